"""Links that fail and come back on a live lab: both veth ends set down or up through rtnetlink
(pyroute2 messages), and the plan's static routes restored and read back when a link returns.

Why the routes need restoring: when an interface goes down, the kernel deletes every IPv4
route with a single next hop through it (``fib_sync_down_dev``, net/ipv4/fib_semantics.c) and
IPv6 does likewise (``rt6_sync_down_dev``); they do not come back with the link, so a host's
default route is gone for good after ``ip link set eth0 down; ... up``. Multipath routes keep
the next hop, flagged dead, and skip it meanwhile (the kernel revives it on up). The lab's
sysctls (:func:`testbed.sysctl.node_sysctls`) also make the kernel skip next hops whose link
lost its carrier without an admin down (``ignore_routes_with_linkdown``) or whose neighbour
failed (``fib_multipath_use_neigh``).

On up, every planned route of the two end nodes that has a next hop on a returning link is
replaced by the plan's route restricted to the next hops whose links are up (the full route
once all are), then dumped and compared: same next hops, none flagged dead or linkdown once
the kernel's linkwatch has seen the carrier (polled for at most CARRIER_WAIT_S; a dump flags
a next hop without carrier dead too where ignore_routes_with_linkdown is on,
fib_nexthop_info).
A node with ``rto_min`` also gets its connected routes on those links back with the metric
(the kernel re-adds them without it). Needs root; every request goes under the lab's
netlink lock (the counter reader and the trace player share the sockets).
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Iterable, Sequence
from typing import Any

from pyroute2.netlink.rtnl.rtmsg import rtmsg

from aitb.errors import LabError
from aitb.plan import LinkPlan, Route
from testbed import frr, load_balance, source_routing
from testbed.links import RTM_NEWLINK, updown_msg
from testbed.nl import F_CREATE, F_REPLACE, Batch, dump
from testbed.routes import (
    RTM_GETROUTE,
    RTM_NEWROUTE,
    connected_route_msg,
    dumped_route_key,
    route_key,
    route_msg,
)

Lab = Any  # testbed.lab.Lab, which calls this module (no import back: no cycle)

__all__ = ["set_links", "restore_routes", "RTNH_F_DEAD", "RTNH_F_LINKDOWN"]

RTNH_F_DEAD, RTNH_F_LINKDOWN = 1, 16  # include/uapi/linux/rtnetlink.h
RT_TABLE_MAIN = 254
CARRIER_WAIT_S = 0.5  # longest wait for the kernel to see a returned link's carrier


def _links(lab: Lab, names: Iterable[str]) -> list[LinkPlan]:
    by_name = {lk.name: lk for lk in lab.plan.links}
    out = []
    for name in names:
        if name not in by_name:
            raise LabError(f"no link {name!r} in lab {lab.plan.name}")
        out.append(by_name[name])
    return out


def set_links(lab: Lab, names: Sequence[str], up: bool) -> dict[str, Any]:
    """Set both ends of every link in ``names`` down or ``up``; on up, restore and read back
    the routes (:func:`restore_routes`). Updates ``lab.down_links``. Returns what was done:
    ``{"links": [...], "routes": {node: [dst, ...]}}`` (routes: on up only). Raises LabError
    naming link or node when the kernel refuses, or when the read-back differs."""
    links = _links(lab, names)
    by_node: dict[str, list[int]] = {}
    for lk in links:
        for ep in (lk.a, lk.b):
            by_node.setdefault(ep.node, []).append(lab.layout.node(ep.node).ifindex(ep.ifname))
    word = "up" if up else "down"
    with lab.netlink_lock:
        for node, indexes in by_node.items():
            batch = Batch(lab.node_io(node).sock, f"node {node}")
            for index in indexes:
                batch.add(updown_msg(index, up), RTM_NEWLINK, 0,
                          f"node {node}: set interface {index} {word}")
            batch.commit()
        if up:
            lab.down_links.difference_update(lk.name for lk in links)
        else:
            lab.down_links.update(lk.name for lk in links)
        done: dict[str, Any] = {"links": [lk.name for lk in links]}
        if up:
            done["routes"] = restore_routes(lab, links, done)
    return done


def _live(route: Route, ifnames_down: set[str]) -> Route | None:
    hops = tuple(h for h in route.nexthops if h.ifname not in ifnames_down)
    return dataclasses.replace(route, nexthops=hops) if hops else None


def restore_routes(lab: Lab, links: Sequence[LinkPlan], times: dict[str, Any] | None = None
                   ) -> dict[str, list[str]]:
    """Re-add the routes of the end nodes of ``links`` that go through them (restricted to
    next hops on links that are up, see the module docstring) and read them back. Returns
    node -> the destinations restored; ``times`` (if given) gets ``acked_unix_s``, when the
    kernel had acked every route (seconds since the epoch; the read-back waits for the
    carrier after it). Raises LabError listing every difference."""
    touched = {ep.node: set() for lk in links for ep in (lk.a, lk.b)}
    for lk in links:
        for ep in (lk.a, lk.b):
            touched[ep.node].add(ep.ifname)
    out: dict[str, list[str]] = {}
    problems: list[str] = []
    batches = []
    for node, ifnames in touched.items():
        n = lab.plan.node(node)
        down = {lk.endpoint(node).ifname for lk in lab.plan.links_of(node)
                if lk.name in lab.down_links}
        layout = lab.layout.node(node)
        sock = lab.node_io(node).sock
        batch = Batch(sock, f"node {node}")
        if n.rto_min_s is not None:
            for lk in lab.plan.links_of(node):
                ep = lk.endpoint(node)
                if ep.ifname in ifnames:
                    for iface in (ep.ipv4, ep.ipv6):
                        if iface is not None:
                            batch.add(connected_route_msg(layout.ifindex(ep.ifname), iface,
                                                          n.rto_min_s), RTM_NEWROUTE,
                                      F_CREATE | F_REPLACE,
                                      f"node {node}: rto_min on connected route "
                                      f"{iface.network}")
        wanted = []
        for route in () if frr.routed_by_frr(lab.plan, n) else n.routes:  # FRR re-learns
            if not any(h.ifname in ifnames for h in route.nexthops):
                continue
            live = _live(route, down)
            if live is None:
                continue
            wanted.append(live)
            batch.add(route_msg(live, layout, n.rto_min_s), RTM_NEWROUTE,
                      F_CREATE | F_REPLACE, f"node {node}: restore route {route.dst}")
        batch.commit()
        load_balance.restore(lab, node, ifnames - down)  # its per-next-hop tables
        source_routing.restore(lab, node, ifnames - down)  # its per-source tables
        batches.append((node, layout, sock, wanted))
    if times is not None:
        times["acked_unix_s"] = time.time()
    for node, layout, sock, wanted in batches:
        # the carrier of a veth end that came up is announced by the kernel's linkwatch
        # work, a moment later: until then its next hops are flagged linkdown (skipped)
        deadline = time.monotonic() + CARRIER_WAIT_S
        while True:
            bad, linkdown = _read_back(node, layout, sock, wanted)
            if bad or not linkdown or time.monotonic() > deadline:
                break
            time.sleep(0.0005)
        problems += bad + [f"node {node}: route {d} still has a next hop flagged dead "
                           f"or without carrier "
                           f"{CARRIER_WAIT_S:g} s after the link came up" for d in linkdown]
        out[node] = [str(r.dst) for r in wanted]
    if problems:
        raise LabError("routes after link up differ from the plan:\n  " + "\n  ".join(problems))
    return out


def _hop_flags(m: Any) -> int:
    hops = m.get_attr("RTA_MULTIPATH")
    flags = m["flags"]
    for h in hops or ():
        flags |= h["flags"]
    return flags


def _read_back(node: str, layout: Any, sock: socket.socket, wanted: Sequence[Route]
               ) -> tuple[list[str], list[str]]:
    """(differences from ``wanted``, destinations with a next hop flagged linkdown)."""
    if not wanted:
        return [], []
    got: dict[str, tuple[Any, int]] = {}
    for family in sorted({socket.AF_INET6 if r.dst.version == 6 else socket.AF_INET
                          for r in wanted}):
        req = rtmsg()  # strict dump filter: the main table
        req["family"], req["table"] = family, RT_TABLE_MAIN
        for m in dump(sock, req, RTM_GETROUTE, node):
            if m["table"] == RT_TABLE_MAIN:
                dst, hops = dumped_route_key(m)
                got[dst] = (hops, _hop_flags(m))
    out, linkdown = [], []
    for r in wanted:
        dst, hops = route_key(r, layout)
        have, flags = got.get(dst, (None, 0))
        if have != hops:
            out.append(f"node {node}: route {dst} has next hops {sorted(have or [])}, "
                       f"planned {sorted(hops)}")
        elif flags & (RTNH_F_DEAD | RTNH_F_LINKDOWN):  # a dump flags a linkdown hop dead
            linkdown.append(dst)  # too where ignore_routes_with_linkdown is on
    return out, linkdown
