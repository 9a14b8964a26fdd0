"""Addresses and static routes (single next hop and ECMP) as rtnetlink messages, and the
normalised form readback compares."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from aitb.models.plan import Route
from testbed.layout import NodeLayout

__all__ = ["addr_msg", "route_msg", "route_key", "dumped_route_key", "RTM_NEWADDR",
           "RTM_GETADDR", "RTM_NEWROUTE", "RTM_GETROUTE", "IFA_F_NODAD"]

RTM_NEWADDR, RTM_GETADDR, RTM_NEWROUTE, RTM_GETROUTE = 20, 22, 24, 26
IFA_F_NODAD = 0x02  # lab addresses are unique by construction: skip IPv6 DAD's 1-2 s wait
RT_TABLE_MAIN, RTPROT_STATIC, RT_SCOPE_UNIVERSE, RTN_UNICAST = 254, 4, 0, 1


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


def route_msg(route: Route, node: NodeLayout) -> rtmsg:
    """Add ``route`` on ``node``: one next hop as RTA_GATEWAY/RTA_OIF, several as an ECMP
    RTA_MULTIPATH (each weight w is rtnexthop.hops = w-1, rtnetlink(7))."""
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
    m["attrs"] = attrs
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
