"""Addresses and static routes (single next hop and ECMP) as rtnetlink messages, and the
normalised form readback compares."""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
from collections.abc import Iterable
from typing import Any

from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from models.plan import Route
from testbed.lab.layout import NodeLayout
from testbed.ns.nl import brief

__all__ = ["addr_msg", "route_msg", "connected_route_msg", "rto_min_ms", "dumped_rto_min_ms",
           "route_key", "dumped_route_key", "dumped_routes", "route_template", "addr_template",
           "RTM_NEWADDR", "RTM_GETADDR", "RTM_NEWROUTE", "RTM_GETROUTE", "IFA_F_NODAD"]

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


# RTA_DST is route_msg's first attribute: nlmsghdr (16) + rtmsg (12) + rtattr header (4)
RTA_DST_OFFSET = 16 + 12 + 4


def route_template(route: Route, node: NodeLayout, rto_min_s: float | None = None
                   ) -> tuple[object, Any, tuple[tuple[int, bytes], ...]]:
    """(key, build, patch) for :meth:`testbed.ns.nl.Batch.add_cached`: routes of one node that
    differ only in their destination address (a leaf's routes to every other leaf's subnet
    over the same spines) share one pyroute2 encoding, and each copy gets its own RTA_DST
    bytes. ``build()`` -> (:func:`route_msg` of ``route``, RTM_NEWROUTE); the key holds
    everything else of the message (family, prefix length, next hops as ifindex, gateway,
    weight; the RTO minimum)."""
    hops = tuple((node.ifindex(h.ifname), str(h.via) if h.via else "", h.weight)
                 for h in route.nexthops)
    key = ("route", route.dst.version, route.dst.prefixlen, hops, rto_min_s)
    return (key, lambda: (route_msg(route, node, rto_min_s), RTM_NEWROUTE),
            ((RTA_DST_OFFSET, route.dst.network_address.packed),))


# addr_msg's attributes: nlmsghdr (16) + ifaddrmsg (8), then IFA_LOCAL and IFA_ADDRESS (IPv4,
# 4 + 4 bytes each) or IFA_ADDRESS alone (IPv6); the value follows each 4-byte rtattr header
IFA_FIRST_VALUE = 16 + 8 + 4


def addr_template(iface: ipaddress.IPv4Interface | ipaddress.IPv6Interface
                  ) -> tuple[object, Any, tuple[tuple[int, bytes], ...]]:
    """(key, build, patch) for :meth:`testbed.ns.nl.Batch.add_cached` with the interface's
    index: addresses of one family and prefix length share one pyroute2 encoding of
    :func:`addr_msg`; each copy gets its index (byte 20, as in ifinfmsg) and address bytes."""
    packed = iface.ip.packed
    patch = ((IFA_FIRST_VALUE, packed),) if iface.version == 6 else (
        (IFA_FIRST_VALUE, packed), (IFA_FIRST_VALUE + 8, packed))
    return (("addr", iface.version, iface.network.prefixlen),
            lambda: (addr_msg(0, iface), RTM_NEWADDR), patch)


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


@functools.lru_cache(maxsize=1 << 16)
def _network(dst: str, dst_len: int) -> str:
    return str(ipaddress.ip_network(f"{dst}/{dst_len}", strict=False))


def dumped_route_key(m: Any) -> tuple[str, frozenset[tuple[int, str, int]]]:
    """The same key for a route dumped from the kernel (pyroute2 rtmsg)."""
    family = 6 if m["family"] == socket.AF_INET6 else 4
    dst = m.get_attr("RTA_DST") or ("::" if family == 6 else "0.0.0.0")
    net = _network(dst, m["dst_len"])  # the same destinations recur on every node
    hops = m.get_attr("RTA_MULTIPATH")
    if hops:
        return net, frozenset((h["oif"], h.get_attr("RTA_GATEWAY") or "", h["hops"] + 1)
                              for h in hops)
    return net, frozenset({(m.get_attr("RTA_OIF"), m.get_attr("RTA_GATEWAY") or "", 1)})


# the attributes readback compares; the rest (cache info, preference) stays undecoded
BriefRoute = brief(rtmsg, {"RTA_DST", "RTA_OIF", "RTA_GATEWAY", "RTA_MULTIPATH",
                           "RTA_METRICS", "RTA_TABLE"})
_RTA = struct.Struct("=HH")
RTA_DST = 1


def dumped_routes(raw: Iterable[bytes]) -> dict[str, tuple[int, frozenset[tuple[int, str, int]],
                                                          int | None]]:
    """dst -> (table, next hops as in :func:`dumped_route_key`, locked RTO minimum in ms or
    None) of raw ``RTM_NEWROUTE`` dump answers (:func:`testbed.ns.nl.dump` with ``raw``).

    pyroute2 decodes each *distinct* route once: the routes of a node that differ only in
    their destination (a leaf's routes to every other leaf over the same spines) share the
    bytes that remain once the header's length, sequence and port and the RTA_DST attribute
    are left out, so only those bytes key the decoded result; the destination is read from
    its attribute (rtnetlink(7): struct rtmsg, then rtattrs). A route's table over 255 is
    in RTA_TABLE, which is part of the key."""
    memo: dict[bytes, tuple[int, frozenset[tuple[int, str, int]], int | None]] = {}
    out = {}
    for data in raw:
        family, dst_len = data[16], data[17]
        pos, dst, rest = 28, None, [data[4:6], data[16:28]]  # type, rtmsg
        while pos + 4 <= len(data):
            alen, atype = _RTA.unpack_from(data, pos)
            if alen < 4:
                break
            if atype == RTA_DST:
                dst = data[pos + 4:pos + alen]
            else:
                rest.append(data[pos:pos + ((alen + 3) & ~3)])
            pos += (alen + 3) & ~3
        key = b"".join(rest)
        got = memo.get(key)
        if got is None:
            m = BriefRoute(data)
            m.decode()
            table = m.get_attr("RTA_TABLE") or m["table"]
            got = memo[key] = (table, dumped_route_key(m)[1], dumped_rto_min_ms(m))
        addr = socket.inet_ntop(family, dst) if dst else ("::" if family == socket.AF_INET6
                                                          else "0.0.0.0")
        out[_network(addr, dst_len)] = got
    return out
