"""The one route walk and DCI rule (models.paths) and the host-to-host helpers built on
it (workloads.paths): generated and hand-made plans, no root, no network."""

from __future__ import annotations

from ipaddress import ip_address, ip_interface, ip_network
from pathlib import Path

import pytest

import topologies
from models.paths import PathError, PathWalker, dci_links, paths
from models.plan import Endpoint, LabPlan, LinkPlan, NextHop, NodePlan, Route
from models.shaping import Shaping
from workloads.paths import path_hops, rtt_delay_s

ROOT = Path(__file__).resolve().parents[2]
DCI = "dc1-b1-dc2-b1"  # two_dc.yaml's and the generator's (n_dcs=2) one DCI link


@pytest.fixture(scope="module")
def two_dc():
    return topologies.load_topology(ROOT / "topologies/examples/two_dc.yaml")


@pytest.fixture(scope="module")
def multi_dc():
    return topologies.generate("multi_dc_leaf_spine", n_dcs=2, spines=2, leaves=2,
                               hosts_per_leaf=2)


def _ip(plan: LabPlan, node: str) -> str:
    return str(plan.address_of(node))


def test_ecmp_gives_one_path_per_choice_over_two_data_centres(two_dc):
    hosts = [h.name for h in two_dc.hosts()]
    found = paths(two_dc, hosts[0], _ip(two_dc, hosts[-1]))
    # two spines on each side of the single DCI link: 2 x 2 equal-cost paths, all distinct
    assert len(found) == 4 and len({tuple(p) for p in found}) == 4
    assert all(any(h.link == DCI for h in p) for p in found)
    assert all(p[0].node == hosts[0] for p in found)
    # next-hop order: the first path leaves the leaf by its route's first next hop
    leaf = found[0][1].node
    (route,) = [r for r in two_dc.node(leaf).routes if ip_address(_ip(two_dc, hosts[-1])) in r.dst]
    assert len(route.nexthops) == 2
    assert [p[1].ifname for p in found] == [route.nexthops[0].ifname] * 2 + [
        route.nexthops[1].ifname] * 2


def test_paths_follow_the_generated_routes(multi_dc):
    walker, dci = PathWalker(multi_dc), dci_links(multi_dc)
    far = walker.paths("dc1-l1-h1", _ip(multi_dc, "dc2-l2-h1"))
    # host-leaf, leaf-spine, spine-border, DCI, border-spine, spine-leaf, leaf-host
    assert len(far) == 4 and all(len(p) == 7 for p in far)
    assert all({h.link for h in p} & dci == dci for p in far)
    far[0].clear()  # the caller's copy: the walker's cache is not touched
    assert len(walker.paths("dc1-l1-h1", _ip(multi_dc, "dc2-l2-h1"))[0]) == 7
    near = walker.paths("dc1-l1-h1", _ip(multi_dc, "dc1-l2-h2"))
    assert len(near) == 2 and not any({h.link for h in p} & dci for p in near)
    (same_leaf,) = walker.paths("dc1-l1-h1", _ip(multi_dc, "dc1-l1-h2"))
    assert [(h.link, h.node) for h in same_leaf] == [("dc1-l1-h1-dc1-l1", "dc1-l1-h1"),
                                                     ("dc1-l1-h2-dc1-l1", "dc1-l1")]
    assert walker.paths("dc1-l1-h1", _ip(multi_dc, "dc1-l1-h1")) == [[]]  # its own address


def _l2_plan() -> LabPlan:
    """h1 - s1 - s2 - h2 with h3 on s1: one subnet over two bridges; h1 -> h2 shaped."""
    def ep(node, ifname, host):
        return Endpoint(node, ifname, ip_interface(f"198.18.0.{host}/24") if host else None)

    links = (LinkPlan("h1-s1", ep("h1", "eth0", 1), ep("s1", "p1", 0),
                      a_to_b=Shaping(rate_bps=10_000_000, delay_s=0.001)),
             LinkPlan("h3-s1", ep("h3", "eth0", 3), ep("s1", "p3", 0)),
             LinkPlan("s1-s2", ep("s1", "up", 0), ep("s2", "up", 0),
                      a_to_b=Shaping(delay_s=0.002)),
             LinkPlan("h2-s2", ep("h2", "eth0", 2), ep("s2", "p2", 0)))
    nodes = tuple(NodePlan(n, "host") for n in ("h1", "h2", "h3")) + tuple(
        NodePlan(n, "switch") for n in ("s1", "s2"))
    return LabPlan("l2", nodes, links)


def test_an_l2_segment_is_crossed_switch_by_switch():
    plan = _l2_plan()
    (path,) = paths(plan, "h1", "198.18.0.2")
    assert [(h.link, h.node, h.ifname) for h in path] == [
        ("h1-s1", "h1", "eth0"), ("s1-s2", "s1", "up"), ("h2-s2", "s2", "p2")]
    assert (path[0].shaping.rate_bps, path[1].shaping.delay_s) == (10_000_000, 0.002)
    (back,) = paths(plan, "h2", "198.18.0.1")  # the other direction: its own shaping
    assert [h.node for h in back] == ["h2", "s2", "s1"] and back[1].shaping.delay_s == 0.0


def _loop_plan() -> LabPlan:
    """h1 - r1 - r2; r1 and r2 each send 198.18.9.0/24 to the other; h9 owns 198.18.9.9."""
    def rt(via):
        return (Route(ip_network("198.18.9.0/24"), (NextHop("eth1", ip_address(via)),)),)

    links = (LinkPlan("h1-r1", Endpoint("h1", "eth0", ip_interface("198.18.0.0/31")),
                      Endpoint("r1", "eth0", ip_interface("198.18.0.1/31"))),
             LinkPlan("r1-r2", Endpoint("r1", "eth1", ip_interface("198.18.0.2/31")),
                      Endpoint("r2", "eth1", ip_interface("198.18.0.3/31"))),
             LinkPlan("h9-x", Endpoint("h9", "eth0", ip_interface("198.18.9.9/24")),
                      Endpoint("x", "eth0", ip_interface("198.18.9.1/24"))))
    h1_default = (Route(ip_network("0.0.0.0/0"), (NextHop("eth0", ip_address("198.18.0.1")),)),)
    nodes = (NodePlan("h1", "host", routes=h1_default), NodePlan("r1", "router",
                                                                 routes=rt("198.18.0.3")),
             NodePlan("r2", "router", routes=rt("198.18.0.2")), NodePlan("h9", "host"),
             NodePlan("x", "router"))
    return LabPlan("loop", nodes, links)


def test_loops_and_unknowns_are_clear_errors():
    plan = _loop_plan()
    with pytest.raises(PathError, match=r"routing loop towards 198\.18\.9\.9: r1 -> r2 -> r1"):
        paths(plan, "h1", "198.18.9.9")
    with pytest.raises(PathError, match="no node 'nosuch' in lab 'loop'"):
        paths(plan, "nosuch", "198.18.9.9")
    with pytest.raises(PathError, match=r"198\.18\.7\.7 is on no interface of lab 'loop'"):
        paths(plan, "h1", "198.18.7.7")
    with pytest.raises(PathError, match=r"node r2 has no route to 198\.18\.0\.0"):
        paths(plan, "r2", "198.18.0.0")
    assert isinstance(PathError("x"), ValueError)  # callers that catch ValueError still do


def test_a_host_in_transit_is_refused():
    route = Route(ip_network("198.18.0.2/31"), (NextHop("eth0", ip_address("198.18.0.1")),))
    plan = LabPlan("t", (NodePlan("h1", "host", routes=(route,)), NodePlan("h2", "host"),
                         NodePlan("h3", "host")),
                   (LinkPlan("a", Endpoint("h1", "eth0", ip_interface("198.18.0.0/31")),
                             Endpoint("h2", "eth0", ip_interface("198.18.0.1/31"))),
                    LinkPlan("b", Endpoint("h2", "eth1", ip_interface("198.18.0.2/31")),
                             Endpoint("h3", "eth0", ip_interface("198.18.0.3/31")))))
    with pytest.raises(PathError, match="via host h2, which does not forward"):
        paths(plan, "h1", "198.18.0.3")


def test_dci_links_of_the_generator_and_the_union_rule(multi_dc):
    assert dci_links(multi_dc) == {lk.name for lk in multi_dc.links
                                   if {lk.a.node, lk.b.node} == {"dc1-b1", "dc2-b1"}}
    assert dci_links(topologies.generate("single_switch", hosts=3)) == frozenset()
    three = topologies.generate("multi_dc_leaf_spine", n_dcs=3)
    assert len(dci_links(three)) == sum(1 for lk in three.links
                                        if lk.a.ifname.startswith("dci-"))
    # sites by group when there is no site label; a dci-* port counts without any site
    plan = _l2_plan()
    grouped = LabPlan("g", tuple(NodePlan(n.name, n.kind, group={"h1": "a", "s1": "a",
                                                                 "s2": "b"}.get(n.name))
                                 for n in plan.nodes), plan.links)
    assert dci_links(grouped) == {"s1-s2"}  # h2-s2: h2 has no site; h1-s1: same site
    renamed = LabPlan("d", plan.nodes, (*plan.links[:3], LinkPlan(
        "h2-s2", Endpoint("h2", "eth0"), Endpoint("s2", "dci-x"))))
    assert dci_links(renamed) == {"h2-s2"}


def test_path_hops_take_the_first_ecmp_path(two_dc):
    hosts = [h.name for h in two_dc.hosts()]
    hops = path_hops(two_dc, hosts[0], hosts[-1])
    first = paths(two_dc, hosts[0], _ip(two_dc, hosts[-1]))[0]
    assert [(lk.name, n) for lk, n in hops] == [(h.link, h.node) for h in first]
    assert hops[0][1] == hosts[0] and hosts[-1] in (hops[-1][0].a.node, hops[-1][0].b.node)
    assert any(lk.name == DCI for lk, _ in hops)
    # the DCI's 500 us each way is the only configured delay on the path
    assert rtt_delay_s(two_dc, hosts[0], hosts[-1]) == pytest.approx(0.001)
    assert rtt_delay_s(two_dc, hosts[0], hosts[1]) == 0.0
    assert path_hops(two_dc, hosts[0], hosts[0]) == []
