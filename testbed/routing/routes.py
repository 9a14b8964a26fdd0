"""Addresses and static routes (single next hop and ECMP) as rtnetlink messages, and the
normalised form readback compares."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from models.plan import Route
from testbed.lab.layout import NodeLayout

__all__ = ["addr_msg", "route_msg", "connected_route_msg", "rto_min_ms", "dumped_rto_min_ms",
           "route_key", "dumped_route_key", "RTM_NEWADDR", "RTM_GETADDR", "RTM_NEWROUTE",
           "RTM_GETROUTE", "IFA_F_NODAD"]

RTM_NEWADDR, RTM_GETADDR, RTM_NEWROUTE, RTM_GETROUTE = 20, 22, 24, 26
IFA_F_NODAD = 0x02  # lab addresses are unique by construction: skip IPv6 DAD's 1-2 s wait
RT_TABLE_MAIN, RTPROT_STATIC, RT_SCOPE_UNIVERSE, RTN_UNICAST = 254, 4, 0, 1
RTPROT_KERNEL, RT_SCOPE_LINK = 2, 253
RTAX_RTO_MIN = 13  # include/uapi/linux/rtnetlink.h
IP6_RT_PRIO_ADDRCONF = 256  # metric of IPv6 connected routes, include/net/addrconf.h


def rto_min_ms(rto_min_s: float) -> int:
    """``rto_min_s`` (seconds) as the kernel's RTAX_RTO_MIN value: whole milliseconds
    (net/ipv4/tcp_input.c reads it with dst_metric_rtt, i.e. msecs_to_jiffies)."""
    return round(rto_min_s * 1000)


def _metrics(rto_min_s: float | None) -> list[list[Any]]:
    """RTA_METRICS carrying a locked RTAX_RTO_MIN (tcp_rto_min() uses the route's value only
    when RTAX_LOCK has its bit, include/net/tcp.h; ``ip route ... rto_min`` locks it too)."""
    if rto_min_s is None:
        return []
    return [["RTA_METRICS", {"attrs": [["RTAX_LOCK", 1 << RTAX_RTO_MIN],
                                       ["RTAX_RTO_MIN", rto_min_ms(rto_min_s)]]}]]


def dumped_rto_min_ms(m: Any) -> int | None:
    """The locked RTAX_RTO_MIN (ms) of a dumped route, or None if unset or not locked."""
    metrics = m.get_attr("RTA_METRICS")
    if metrics is None or not (metrics.get_attr("RTAX_LOCK") or 0) & (1 << RTAX_RTO_MIN):
        return None
    return metrics.get_attr("RTAX_RTO_MIN")


def addr_msg(index: int, iface: ipaddress.IPv4Interface | ipaddress.IPv6Interface) -> ifaddrmsg:
    """Add address ``iface`` (address/prefix) to interface ``index``."""
    m = ifaddrmsg()
    v6 = iface.version == 6
    m["family"] = socket.AF_INET6 if v6 else socket.AF_INET
    m["prefixlen"] = iface.network.prefixlen
    m["index"] = index
    m["flags"] = IFA_F_NODAD if v6 else 0
    ip = str(iface.ip)
    m["attrs"] = [["IFA_ADDRESS", ip]] if v6 else [["IFA_LOCAL", ip], ["IFA_ADDRESS", ip]]
    return m


def route_msg(route: Route, node: NodeLayout, rto_min_s: float | None = None) -> rtmsg:
    """Add ``route`` on ``node``: one next hop as RTA_GATEWAY/RTA_OIF, several as an ECMP
    RTA_MULTIPATH (each weight w is rtnexthop.hops = w-1, rtnetlink(7)); with ``rto_min_s``
    (seconds) a locked RTAX_RTO_MIN metric."""
    m = rtmsg()
    v6 = route.dst.version == 6
    m["family"] = socket.AF_INET6 if v6 else socket.AF_INET
    m["dst_len"] = route.dst.prefixlen
    m["table"], m["proto"], m["scope"], m["type"] = (RT_TABLE_MAIN, RTPROT_STATIC,
                                                    RT_SCOPE_UNIVERSE, RTN_UNICAST)
    attrs: list[list[Any]] = [["RTA_DST", str(route.dst.network_address)]]
    if len(route.nexthops) == 1:
        hop = route.nexthops[0]
        attrs.append(["RTA_OIF", node.ifindex(hop.ifname)])
        if hop.via is not None:
            attrs.append(["RTA_GATEWAY", str(hop.via)])
    else:
        attrs.append(["RTA_MULTIPATH", [_nexthop(h, node) for h in route.nexthops]])
    m["attrs"] = attrs + _metrics(rto_min_s)
    return m


def connected_route_msg(index: int, iface: ipaddress.IPv4Interface | ipaddress.IPv6Interface,
                        rto_min_s: float) -> rtmsg:
    """The kernel's own prefix route of address ``iface`` on interface ``index`` (proto
    kernel, scope link, IPv4 priority 0 with the address as source, IPv6 metric 256), with a
    locked RTAX_RTO_MIN of ``rto_min_s`` seconds: send with NLM_F_REPLACE after the address
    so that it replaces the route the address created (same table, dst, tos, priority)."""
    m = rtmsg()
    v6 = iface.version == 6
    m["family"] = socket.AF_INET6 if v6 else socket.AF_INET
    m["dst_len"] = iface.network.prefixlen
    m["table"], m["proto"], m["scope"], m["type"] = (RT_TABLE_MAIN, RTPROT_KERNEL,
                                                    RT_SCOPE_UNIVERSE if v6 else RT_SCOPE_LINK,
                                                    RTN_UNICAST)
    attrs: list[list[Any]] = [["RTA_DST", str(iface.network.network_address)],
                              ["RTA_OIF", index]]
    attrs.append(["RTA_PRIORITY", IP6_RT_PRIO_ADDRCONF] if v6 else ["RTA_PREFSRC", str(iface.ip)])
    m["attrs"] = attrs + _metrics(rto_min_s)
    return m


def _nexthop(hop: Any, node: NodeLayout) -> dict[str, Any]:
    out: dict[str, Any] = {"oif": node.ifindex(hop.ifname), "hops": hop.weight - 1}
    if hop.via is not None:
        out["attrs"] = [["RTA_GATEWAY", str(hop.via)]]
    return out


def route_key(route: Route, node: NodeLayout) -> tuple[str, frozenset[tuple[int, str, int]]]:
    """(dst, {(oif, gateway, weight)}) of a planned route, for comparison with the kernel's."""
    return str(route.dst), frozenset(
        (node.ifindex(h.ifname), str(h.via) if h.via else "", h.weight) for h in route.nexthops)


def dumped_route_key(m: Any) -> tuple[str, frozenset[tuple[int, str, int]]]:
    """The same key for a route dumped from the kernel (pyroute2 rtmsg)."""
    family = 6 if m["family"] == socket.AF_INET6 else 4
    dst = m.get_attr("RTA_DST") or ("::" if family == 6 else "0.0.0.0")
    net = str(ipaddress.ip_network(f"{dst}/{m['dst_len']}", strict=False))
    hops = m.get_attr("RTA_MULTIPATH")
    if hops:
        return net, frozenset((h["oif"], h.get_attr("RTA_GATEWAY") or "", h["hops"] + 1)
                              for h in hops)
    return net, frozenset({(m.get_attr("RTA_OIF"), m.get_attr("RTA_GATEWAY") or "", 1)})
