"""Readback: dump what the kernel has in a node's namespace and compare it with the plan.

A zero return code is not evidence (STYLE.md): after bring-up and after every change the lab
dumps links, addresses, routes, qdiscs and classes and raises one LabError naming node,
interface and what differs. What is compared of each qdisc or class is its module's
``problems`` in :mod:`testbed.tc.qdiscs`.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from models.errors import LabError
from models.plan import LinkPlan, NodePlan
from testbed.lab.layout import BRIDGE, IFB_INDEX_BASE, Layout, NodeLayout, owner_alias
from testbed.ns.links import IFF_UP, RTM_GETLINK
from testbed.ns.nl import brief, dump
from testbed.routing.routes import (
    RT_TABLE_MAIN,
    RTM_GETADDR,
    RTM_GETROUTE,
    RTPROT_STATIC,
    dumped_routes,
    route_key,
    rto_min_ms,
)
from testbed.tc import qdiscs
from testbed.tc.msgs import RTM_GETQDISC, RTM_GETTCLASS, TcMsg, handle
from testbed.tc.objects import TcObject

__all__ = ["check_node", "dump_tc", "tc_differences", "raise_if", "link_states",
           "addresses"]


BriefTc = brief(TcMsg, {"TCA_KIND", "TCA_OPTIONS"})


def raise_if(problems: list[str], what: str) -> None:
    """Raise one LabError listing ``problems`` (if any) under the heading ``what``."""
    if problems:
        raise LabError(f"{what}: the kernel's state differs from the plan:\n  "
                       + "\n  ".join(problems))


# the link attributes readback compares, by their numbers in pyroute2's table (= the kernel's
# IFLA_* of include/uapi/linux/if_link.h), with how to read each value
_IFLA = {e[0]: i for i, e in enumerate(ifinfmsg.nla_map)}
_LINK_ATTRS = {_IFLA["IFLA_IFNAME"]: ("ifname", "str"), _IFLA["IFLA_MTU"]: ("mtu", "u32"),
               _IFLA["IFLA_MASTER"]: ("master", "u32"), _IFLA["IFLA_IFALIAS"]: ("alias", "str"),
               _IFLA["IFLA_GSO_MAX_SEGS"]: ("gso_max_segs", "u32")}
_IFINFO = struct.Struct("=BxHiII")  # struct ifinfomsg: family, type, index, flags, change
_U32 = struct.Struct("=I")
_RTA = struct.Struct("=HH")  # struct rtattr: length, type


def link_states(raw: list[bytes]) -> dict[int, dict[str, Any]]:
    """ifindex -> :func:`testbed.ns.links.link_state` of raw ``RTM_NEWLINK`` dump answers,
    read straight from their attributes (rtnetlink(7): struct ifinfomsg, then rtattrs): the
    five of them readback needs, where pyroute2 would decode every attribute of every link
    (most of a large lab's readback)."""
    out = {}
    for data in raw:
        _, _, index, flags, _ = _IFINFO.unpack_from(data, 16)
        state: dict[str, Any] = {"ifname": None, "up": bool(flags & IFF_UP), "mtu": None,
                                 "alias": None, "master": None, "gso_max_segs": None}
        pos = 16 + _IFINFO.size
        while pos + 4 <= len(data):
            alen, atype = _RTA.unpack_from(data, pos)
            if alen < 4:
                break
            what = _LINK_ATTRS.get(atype & 0x3FFF)  # without NLA_F_NESTED/NET_BYTEORDER
            if what is not None:
                value = data[pos + 4:pos + alen]
                state[what[0]] = (value.split(b"\0", 1)[0].decode(errors="replace")
                                  if what[1] == "str" else _U32.unpack_from(value)[0])
            pos += (alen + 3) & ~3
        out[index] = state
    return out


def _links(n: NodePlan, node: NodeLayout, sock: socket.socket, alias: str, wire: bool
           ) -> list[str]:
    got = link_states(dump(sock, ifinfmsg(), RTM_GETLINK, n.name, raw=True))
    out = []
    master = node.index.get(BRIDGE) if n.kind == "switch" else None
    for ifname, index in node.index.items():
        have = got.get(index)
        if have is None or have["ifname"] != ifname:
            out.append(f"node {n.name}: interface {ifname} (index {index}) is missing")
            continue
        if not have["up"] or have["alias"] != alias:
            out.append(f"node {n.name}: {ifname} up={have['up']} alias={have['alias']!r}")
        if wire and ifname != BRIDGE and index < IFB_INDEX_BASE and have["gso_max_segs"] != 1:
            out.append(f"node {n.name}: {ifname} gso_max_segs={have['gso_max_segs']}, "
                       "planned 1 (wire-sized packets)")
        if master and ifname != BRIDGE and not ifname.startswith("ifb") \
                and have["master"] != master:
            out.append(f"node {n.name}: {ifname} is not a port of {BRIDGE}")
    return out


_IFADDR = struct.Struct("=BBBBi")  # struct ifaddrmsg: family, prefixlen, flags, scope, index
IFA_ADDRESS = 1


def addresses(raw: list[bytes]) -> set[tuple[int, str]]:
    """{(ifindex, "address/prefix")} of raw ``RTM_NEWADDR`` dump answers (rtnetlink(7):
    struct ifaddrmsg, then rtattrs; the address as inet_ntop writes it, as pyroute2 does)."""
    out = set()
    for data in raw:
        family, prefixlen, _, _, index = _IFADDR.unpack_from(data, 16)
        pos = 16 + _IFADDR.size
        while pos + 4 <= len(data):
            alen, atype = _RTA.unpack_from(data, pos)
            if alen < 4:
                break
            if atype == IFA_ADDRESS:
                addr = socket.inet_ntop(family, data[pos + 4:pos + alen])
                out.add((index, f"{addr}/{prefixlen}"))
                break
            pos += (alen + 3) & ~3
    return out


def _addrs(links: list[LinkPlan], n: NodePlan, node: NodeLayout, sock: socket.socket
           ) -> list[str]:
    got = addresses(dump(sock, ifaddrmsg(), RTM_GETADDR, n.name, raw=True))
    out = []
    for lk in links:
        ep = lk.endpoint(n.name)
        for iface in (ep.ipv4, ep.ipv6):
            if iface is not None and (node.ifindex(ep.ifname), str(iface)) not in got:
                out.append(f"node {n.name}: {ep.ifname} lacks address {iface}")
    out += [f"node {n.name}: lo lacks node address {iface}" for iface in (n.lo_ipv4, n.lo_ipv6)
            if iface is not None and (1, str(iface)) not in got]
    return out


def _routes(n: NodePlan, node: NodeLayout, sock: socket.socket) -> list[str]:
    got: dict[str, Any] = {}
    families = {socket.AF_INET6 if r.dst.version == 6 else socket.AF_INET for r in n.routes}
    for family in sorted(families):
        req = rtmsg()  # strict dump filter: only static routes of the main table
        req["family"], req["table"], req["proto"] = family, RT_TABLE_MAIN, RTPROT_STATIC
        for dst, (table, hops, _) in dumped_routes(dump(sock, req, RTM_GETROUTE, n.name,
                                                        raw=True)).items():
            if table == RT_TABLE_MAIN:
                got[dst] = hops
    out = []
    for r in n.routes:
        dst, hops = route_key(r, node)
        if got.get(dst) != hops:
            out.append(f"node {n.name}: route {dst} has next hops {sorted(got.get(dst, []))}, "
                       f"planned {sorted(hops)}")
    return out


def _rto_min(links: list[LinkPlan], n: NodePlan, sock: socket.socket) -> list[str]:
    """Every planned and connected route of ``n`` carries its locked RTAX_RTO_MIN."""
    if n.rto_min_s is None:
        return []
    want = rto_min_ms(n.rto_min_s)
    dsts = {str(r.dst) for r in n.routes} | {
        str(iface.network) for lk in links
        for iface in (lk.endpoint(n.name).ipv4, lk.endpoint(n.name).ipv6) if iface is not None}
    got: dict[str, int | None] = {}
    for family in sorted({6 if ":" in d else 4 for d in dsts}):
        req = rtmsg()  # strict dump filter: the main table, every protocol
        req["family"] = socket.AF_INET6 if family == 6 else socket.AF_INET
        req["table"] = RT_TABLE_MAIN
        for dst, (table, _, rto) in dumped_routes(dump(sock, req, RTM_GETROUTE, n.name,
                                                       raw=True)).items():
            if table == RT_TABLE_MAIN:
                got[dst] = rto
    return [f"node {n.name}: route {d} has rto_min {got.get(d)} ms (locked), planned {want} ms"
            for d in sorted(dsts) if got.get(d) != want]


def dump_tc(sock: socket.socket, where: str, ifindexes: list[int], counters: bool = True
            ) -> dict[tuple, Any]:
    """(ifindex, handle, "qdisc"|"class") -> dumped tc message, for the given interfaces;
    without ``counters`` the statistics are not decoded (faster) and only each message's
    TCA_KIND and TCA_OPTIONS may be read: messages whose kind and options are the same bytes
    (the same qdisc on every port of a switch) share one decoded object."""
    out: dict[tuple, Any] = {}
    if not counters:
        memo: dict[bytes, Any] = {}
        for data in dump(sock, TcMsg(), RTM_GETQDISC, where, raw=True):
            out[_tc_key(data, "qdisc")] = _tc_brief(data, memo)
        for index in ifindexes:
            req = TcMsg()
            req["index"] = index
            for data in dump(sock, req, RTM_GETTCLASS, where, raw=True):
                out[_tc_key(data, "class")] = _tc_brief(data, memo)
        return out
    for m in dump(sock, TcMsg(), RTM_GETQDISC, where):
        out[(m["index"], m["handle"], "qdisc")] = m
    for index in ifindexes:
        req = TcMsg()
        req["index"] = index
        for m in dump(sock, req, RTM_GETTCLASS, where):
            out[(m["index"], m["handle"], "class")] = m
    return out


_TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info (struct tcmsg)
TCA_KIND, TCA_OPTIONS = 1, 2


def _tc_key(data: bytes, what: str) -> tuple[int, int, str]:
    _, index, handle_, _, _ = _TCMSG.unpack_from(data, 16)
    return index, handle_, what


def _tc_brief(data: bytes, memo: dict[bytes, Any]) -> Any:
    """The dumped tc message ``data`` decoded (kind and options only), once per distinct
    TCA_KIND + TCA_OPTIONS bytes (rtnetlink(7): struct tcmsg, then rtattrs)."""
    pos, parts = 16 + _TCMSG.size, []
    while pos + 4 <= len(data):
        alen, atype = _RTA.unpack_from(data, pos)
        if alen < 4:
            break
        if atype in (TCA_KIND, TCA_OPTIONS):
            parts.append(data[pos:pos + alen])
        pos += (alen + 3) & ~3
    key = b"".join(parts)
    m = memo.get(key)
    if m is None:
        m = memo[key] = BriefTc(data)
        m.decode()
    return m


def tc_differences(node: NodeLayout, objects: list[TcObject], got: dict[tuple, Any]
                   ) -> list[str]:
    """Problems of ``objects`` (qdiscs and classes of one node) against dumped ``got``."""
    out = []
    for o in objects:
        if o.verb == "filter":
            continue
        key = (node.ifindex(o.dev), handle(o.handle or "0:"), o.verb)
        m = got.get(key)
        where = f"node {node.name}: {o.dev} {o.verb} {o.handle} {o.kind}"
        if m is None or m.get_attr("TCA_KIND") != o.kind:
            kind = m.get_attr("TCA_KIND") if m is not None else "nothing"
            out.append(f"{where}: found {kind}")
            continue
        problems = qdiscs.module(o.kind).problems(o, m.get_attr("TCA_OPTIONS"))
        out += [f"{where}: {problem}" for problem in problems]
    return out


def check_node(links: list[LinkPlan], layout: Layout, n: NodePlan, sock: socket.socket
               ) -> list[str]:
    """Every difference between node ``n``'s plan (``links``: those touching it) and its
    namespace, as sentences."""
    node = layout.nodes[n.name]
    objects = layout.tc_objects(n.name)
    devs = sorted({node.ifindex(o.dev) for o in objects if o.verb == "class"})
    got = dump_tc(sock, n.name, devs, counters=False) if objects else {}
    alias = owner_alias(layout.run_id)
    return (_links(n, node, sock, alias, layout.wire_packets) + _addrs(links, n, node, sock)
            + _routes(n, node, sock) + _rto_min(links, n, sock)
            + tc_differences(node, objects, got))
