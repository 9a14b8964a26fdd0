"""Small hand-built LabPlans for the runtime tests (the topology loader is tested elsewhere)."""

from __future__ import annotations

import ipaddress as ip

from models.plan import Endpoint, LabPlan, LinkPlan, NextHop, NodePlan, Route
from models.shaping import Shaping

IF = ip.IPv4Interface


def two_hosts_switch(shaping: Shaping | None = None, stp: bool = False) -> LabPlan:
    """h1 - s1 - h2 on one /24 (198.18.0.0/24); ``shaping`` on h1 -> s1."""
    s = shaping or Shaping()
    return LabPlan("sw", nodes=(NodePlan("h1", "host"), NodePlan("h2", "host"),
                                NodePlan("s1", "switch", stp=stp)),
                   links=(LinkPlan("h1-s1", Endpoint("h1", "eth0", IF("198.18.0.1/24")),
                                   Endpoint("s1", "p1"), a_to_b=s),
                          LinkPlan("h2-s1", Endpoint("h2", "eth0", IF("198.18.0.2/24")),
                                   Endpoint("s1", "p2"))))


def two_hosts_router(h1_out: Shaping | None = None, h1_in: Shaping | None = None,
                     mtu: int = 1500, h2_in: Shaping | None = None,
                     cc: str | None = None) -> LabPlan:
    """h1 - r1 - h2 routed: 198.18.1.0/30 and 198.18.2.0/30. h1_out/h1_in shape h1's link,
    h2_in shapes r1 -> h2 (a bottleneck at the router, like a switch buffer)."""
    r1 = NodePlan("r1", "router")
    h1 = NodePlan("h1", "host", tcp_congestion_control=cc, routes=(Route(ip.ip_network("0.0.0.0/0"),
                                              (NextHop("eth0", ip.ip_address("198.18.1.2")),)),))
    h2 = NodePlan("h2", "host", tcp_congestion_control=cc, routes=(Route(ip.ip_network("0.0.0.0/0"),
                                              (NextHop("eth0", ip.ip_address("198.18.2.2")),)),))
    return LabPlan("rt", nodes=(h1, h2, r1), links=(
        LinkPlan("h1-r1", Endpoint("h1", "eth0", IF("198.18.1.1/30")),
                 Endpoint("r1", "e1", IF("198.18.1.2/30")),
                 a_to_b=h1_out or Shaping(), b_to_a=h1_in or Shaping(), mtu=mtu),
        LinkPlan("h2-r1", Endpoint("h2", "eth0", IF("198.18.2.1/30")),
                 Endpoint("r1", "e2", IF("198.18.2.2/30")), b_to_a=h2_in or Shaping(),
                 mtu=mtu)))


def ecmp_diamond(load_balancing: str = "flow", flowlet_gap_s: float | None = None,
                 r1_r2: Shaping | None = None) -> LabPlan:
    """h1 - r1 =(via r2 | via r3)= r4 - h2; r1 has an ECMP route to h2's subnet, r4 one to
    h1's; both balance with ``load_balancing`` (and ``flowlet_gap_s``); ``r1_r2`` shapes
    r1 -> r2 (one path slower than the other)."""
    lb = {"load_balancing": load_balancing, "flowlet_gap_s": flowlet_gap_s}
    def link(name, a, aif, aip, b, bif, bip):
        return LinkPlan(name, Endpoint(a, aif, IF(aip)), Endpoint(b, bif, IF(bip)),
                        a_to_b=(r1_r2 or Shaping()) if name == "r1-r2" else Shaping())
    gw = ip.ip_address
    dst2, dst1 = ip.ip_network("198.18.9.0/30"), ip.ip_network("198.18.8.0/30")
    links = (link("h1-r1", "h1", "eth0", "198.18.8.1/30", "r1", "e0", "198.18.8.2/30"),
             link("r1-r2", "r1", "e1", "198.18.3.1/30", "r2", "e1", "198.18.3.2/30"),
             link("r1-r3", "r1", "e2", "198.18.4.1/30", "r3", "e1", "198.18.4.2/30"),
             link("r2-r4", "r2", "e2", "198.18.5.1/30", "r4", "e1", "198.18.5.2/30"),
             link("r3-r4", "r3", "e2", "198.18.6.1/30", "r4", "e2", "198.18.6.2/30"),
             link("h2-r4", "h2", "eth0", "198.18.9.1/30", "r4", "e0", "198.18.9.2/30"))
    nodes = (
        NodePlan("h1", "host", routes=(Route(ip.ip_network("0.0.0.0/0"),
                                             (NextHop("eth0", gw("198.18.8.2")),)),)),
        NodePlan("h2", "host", routes=(Route(ip.ip_network("0.0.0.0/0"),
                                             (NextHop("eth0", gw("198.18.9.2")),)),)),
        NodePlan("r1", "router", ecmp_hash="l4", **lb, routes=(Route(dst2, (
            NextHop("e1", gw("198.18.3.2")), NextHop("e2", gw("198.18.4.2")))),)),
        NodePlan("r2", "router", routes=(Route(dst2, (NextHop("e2", gw("198.18.5.2")),)),
                                         Route(dst1, (NextHop("e1", gw("198.18.3.1")),)))),
        NodePlan("r3", "router", routes=(Route(dst2, (NextHop("e2", gw("198.18.6.2")),)),
                                         Route(dst1, (NextHop("e1", gw("198.18.4.1")),)))),
        NodePlan("r4", "router", **lb, routes=(Route(dst1, (
            NextHop("e1", gw("198.18.5.1")), NextHop("e2", gw("198.18.6.1")))),)),
    )
    return LabPlan("ecmp", nodes=nodes, links=links)
