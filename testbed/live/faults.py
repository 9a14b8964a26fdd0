"""Links that fail and come back on a live lab through rtnetlink (pyroute2 messages): a link
goes down by setting one veth end down, whose peer then loses its carrier; it comes back by
setting both ends up; the plan's static routes are restored and read back when it returns.

Why one end: a veth end set down takes the carrier of its peer with it (``veth_close``), so
the link carries nothing either way from the kernel's ack on, and the peer's node stops using
it by the lab's sysctls (:func:`testbed.ns.sysctl.skips_carrierless_routes`: its next hops
without carrier are skipped, ``ignore_routes_with_linkdown``; a switch's bridge disables the
port). What the peer's node does about the carrier loss is the kernel's linkwatch work,
deferred, and for a veth whose two ends have the same ifindex (the lab's fixed indexes often
do) batched with other link events at most once a second: the peer kept sending into the
dead link for up to a second (bench/link_down.py). So the down also processes each peer's
carrier loss in the same step (:class:`testbed.ns.carrier.CarrierSync`, ``ETHTOOL_GLINK`` on
the peer: the kernel's own linkwatch work for that device, done in the request): when
:meth:`LinkChange.apply` returns, no packet is sent into the link from either end
(``sync_carrier=False`` leaves it to the kernel's worker, for the bench's comparison). An up
does the same for both ends' returning carrier (the linkdown flags go in the call, so the
read-back below rarely waits).
Setting the peer down as well cost a second request that waited, in the kernel, for
an RCU grace period which the peer's carrier change had just begun (traced here with the
scheduler's tracepoints: 0.03-4 ms asleep in that request, none in the first;
bench/event_timing.py). Both ends are set down where the peer's node would keep using a link
without carrier (its own sysctls turn ``ignore_routes_with_linkdown`` off). The end set down
is the one on the action's node (a ``node_down``), else the one on the node with the most of
the change's links (a partition of a node's uplinks: one request), else end a. Up sets both
ends up (the one that stayed up: no change, 0.03-0.06 ms), whatever set them down. A link
that runs through the lab's wire namespace (its native delay line's place,
testbed/lab/layout.py ``wires``) is two veths, end - port - bridge - port - end: down also
sets the wire port facing each end that stays up down, so that end loses its carrier at
the same instant; up sets both ports up (:func:`wire_ports`).

Why the routes need restoring: when an interface goes down, the kernel deletes every IPv4
route with a single next hop through it (``fib_sync_down_dev``, net/ipv4/fib_semantics.c) and
IPv6 does likewise (``rt6_sync_down_dev``); they do not come back with the link, so a host's
default route is gone for good after ``ip link set eth0 down; ... up``. Multipath routes keep
the next hop, flagged dead, and skip it meanwhile (the kernel revives it on up). On the side
that only lost the carrier, the routes stay, their next hops flagged linkdown and skipped
(the lab's sysctls, :func:`testbed.ns.sysctl.node_sysctls`, also make the kernel skip next hops
whose neighbour failed, ``fib_multipath_use_neigh``), until the carrier returns.

On up, every planned route of the two end nodes that has a next hop on a returning link is
replaced by the plan's route restricted to the next hops whose links are up (the full route
once all are), then dumped and compared: same next hops, none flagged dead or linkdown once
the kernel's linkwatch has seen the carrier (polled for at most CARRIER_WAIT_S; a dump flags
a next hop without carrier dead too where ignore_routes_with_linkdown is on,
fib_nexthop_info).
A node with ``rto_min`` also gets its connected routes on those links back with the metric
(the kernel re-adds them without it). Needs root; every request goes under the lab's
netlink lock (the counter reader and the trace player share the sockets).

A change can be made ready ahead of its instant (:func:`prepare_links`: the trace player
does it before waiting for an event): the interface and route messages are encoded then
(once per distinct message, :meth:`testbed.ns.nl.Batch.add_cached`; pyroute2 took ~0.1 ms per
message), so that :meth:`LinkChange.apply` only sends one buffer per node and collects the
acks. What remains at the instant is the kernel's own work (~0.15-0.25 ms per veth end set
down or up here: bench/event_timing.py) and, for a down, the peers' carrier work done in the
call (its sockets, one per peer node, are made at prepare time; the work itself waits for an
RCU grace period: apply p50 1.1 -> 4.2 ms with FRR, 3.2 -> 6.5 ms static, on a machine at
load average 12-21, bench/link_down.py).
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from pyroute2.netlink.rtnl.rtmsg import rtmsg

from models.errors import LabError
from models.plan import Endpoint, LinkPlan, Route
from testbed.delay.nfqueue.labline import WIRE_NODE
from testbed.ns.carrier import CarrierSync
from testbed.ns.links import RTM_NEWLINK, updown_msg
from testbed.ns.nl import F_CREATE, F_REPLACE, Batch, dump
from testbed.ns.sysctl import skips_carrierless_routes
from testbed.routing import frr, load_balance, source_routing
from testbed.routing.routes import (
    RTM_GETROUTE,
    RTM_NEWROUTE,
    connected_route_msg,
    dumped_route_key,
    route_key,
    route_msg,
)

Lab = Any  # testbed.lab.lab.Lab, which calls this module (no import back: no cycle)

__all__ = ["set_links", "prepare_links", "down_ends", "wire_ports", "LinkChange", "restore_routes",
           "RTNH_F_DEAD", "RTNH_F_LINKDOWN"]

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


class LinkChange:
    """Links set down or up, made ready by :func:`prepare_links` before the instant they are
    due: names checked, the ends to set chosen (down: :func:`down_ends`; up: both) and their
    ifindexes looked up, the interface messages encoded into one :class:`testbed.ns.nl.Batch`
    per node and, for an up, the route messages that restore the plan's routes (for the down
    links the lab will have then; re-made at :meth:`apply` if another change came in
    between). :meth:`apply` then only sends and collects acks; one apply per change."""

    def __init__(self, lab: Lab, links: list[LinkPlan], up: bool, node: str | None = None,
                 sync_carrier: bool = True) -> None:
        self.lab, self.links, self.up = lab, links, up
        ends = [ep for lk in links for ep in (lk.a, lk.b)] if up else down_ends(lab, links,
                                                                                node)
        # the ends whose carrier changes without their own flags changing, processed by the
        # kernel in apply: down, the peers of the ends set down (they lose the carrier); up,
        # every end (each gets its carrier back when both are up)
        self.carrier: list[tuple[CarrierSync, str]] = []
        if sync_carrier:
            syncs: dict[str, CarrierSync] = {}
            for lk in links:
                for ep, peer in ((lk.a, lk.b), (lk.b, lk.a)):
                    if up or (peer in ends and ep not in ends):
                        if ep.node not in syncs:
                            syncs[ep.node] = CarrierSync(lab.node_io(ep.node).fd,
                                                         f"node {ep.node}")
                        self.carrier.append((syncs[ep.node], ep.ifname))
        by_node: dict[str, list[int]] = {}
        for ep in ends:
            by_node.setdefault(ep.node, []).append(lab.layout.node(ep.node).ifindex(ep.ifname))
        for port in wire_ports(lab, links, ends, up):
            by_node.setdefault(WIRE_NODE, []).append(lab.layout.node(WIRE_NODE).ifindex(port))
        word = "up" if up else "down"
        self.batches = []
        for name, indexes in by_node.items():
            batch = Batch(lab.node_io(name).sock, f"node {name}")
            for index in indexes:
                batch.add_cached(("updown", up), lambda: (updown_msg(0, up), RTM_NEWLINK),
                                 index, 0, f"node {name}: set interface {index} {word}")
            self.batches.append(batch)
        self.routes: list[_NodeRoutes] | None = None
        if up:  # the routes as they will be restored, unless the down links change
            self.down_after = frozenset(lab.down_links) - {lk.name for lk in links}
            self.routes = _route_batches(lab, links, self.down_after)
        self.applied = False

    def apply(self) -> dict[str, Any]:
        """Send the change; on up, restore and read back the routes (:func:`restore_routes`;
        ``acked_unix_s`` in the result: when the kernel had acked the links and routes).
        Updates ``lab.down_links``. Returns ``{"links": [...], "routes": {node: [dst, ...]},
        "acked_unix_s": seconds since the epoch}`` (routes and acked: on up only). Raises
        LabError naming node when the kernel refuses, or when the read-back differs."""
        assert not self.applied, "a LinkChange is applied once"
        self.applied = True
        lab, links = self.lab, self.links
        with lab.netlink_lock:
            try:
                for batch in self.batches:
                    batch.commit()
                for sync, ifname in self.carrier:  # the carrier changes, now
                    sync.sync(ifname)
            finally:
                for sync in {id(s): s for s, _ in self.carrier}.values():
                    sync.close()
            if self.up:
                lab.down_links.difference_update(lk.name for lk in links)
            else:
                lab.down_links.update(lk.name for lk in links)
            done: dict[str, Any] = {"links": [lk.name for lk in links]}
            if self.up:
                routes = self.routes if frozenset(lab.down_links) == self.down_after else None
                done["routes"] = _restore(lab, links, done, routes)
        return done


def wire_ports(lab: Lab, links: Sequence[LinkPlan], ends: Sequence[Endpoint], up: bool
               ) -> list[str]:
    """The wire namespace's ports to set with ``ends`` (testbed/lab/layout.py ``wires``: a
    link through it is two veths, end - port - bridge - port - end): on up, both ports of
    each such link; on down, the port facing each end that stays up, so that it loses its
    carrier as the peer of a direct veth would. Pure (reads ``lab.layout``)."""
    out: list[str] = []
    for lk in links:
        w = lab.layout.wires.get(lk.name)
        if w is None:
            continue
        for ep in (lk.a, lk.b):
            if up or not any(e is ep for e in ends):
                out.append(w.port_of(lk, ep.node, ep.ifname))
    return out


def down_ends(lab: Lab, links: Sequence[LinkPlan], node: str | None = None
              ) -> list[Endpoint]:
    """The ends to set down to take ``links`` down, in link order: per link the end on
    ``node`` (a ``node_down``'s node) if it has one, else the end on the node with the most
    of ``links`` (end a on a tie), its peer losing the carrier; the other end where the
    chosen one's peer node would keep using a link without carrier
    (:func:`testbed.ns.sysctl.skips_carrierless_routes`); both where neither end's would. Pure
    (reads ``lab.plan``)."""
    count = Counter(ep.node for lk in links for ep in (lk.a, lk.b))
    skips = {n.name: skips_carrierless_routes(n) for n in lab.plan.nodes}
    out = []
    for lk in links:
        if node in (lk.a.node, lk.b.node):
            first = lk.endpoint(node)
        else:
            first = lk.b if count[lk.b.node] > count[lk.a.node] else lk.a
        other = lk.b if first is lk.a else lk.a
        if skips[other.node]:  # the peer of the end set down stops using the link
            out.append(first)
        elif skips[first.node]:
            out.append(other)
        else:
            out += [lk.a, lk.b]
    return out


def prepare_links(lab: Lab, names: Sequence[str], up: bool, node: str | None = None,
                  sync_carrier: bool = True) -> LinkChange:
    """The change that takes every link in ``names`` down (one end each, :func:`down_ends`;
    ``node``: the node whose links these are, a ``node_down``'s) or ``up`` (both ends), ready
    to :meth:`LinkChange.apply` (nothing is sent yet). Raises LabError naming an unknown
    link."""
    return LinkChange(lab, _links(lab, names), up, node, sync_carrier)


def set_links(lab: Lab, names: Sequence[str], up: bool, node: str | None = None
              ) -> dict[str, Any]:
    """Take every link in ``names`` down (one end each, :func:`down_ends`) or ``up`` (both
    ends); on up, restore and read back the routes (:func:`restore_routes`). Updates
    ``lab.down_links``. Returns what was done: ``{"links": [...], "routes": {node: [dst,
    ...]}, "acked_unix_s": ...}`` (routes and acked: on up only, see
    :meth:`LinkChange.apply`). Raises LabError naming link or node when the kernel refuses,
    or when the read-back differs."""
    return prepare_links(lab, names, up, node).apply()


def _live(route: Route, ifnames_down: set[str]) -> Route | None:
    hops = tuple(h for h in route.nexthops if h.ifname not in ifnames_down)
    return dataclasses.replace(route, nexthops=hops) if hops else None


_NodeRoutes = tuple[str, Any, socket.socket, Batch, list[Route], set[str]]
"""node, its layout, its socket, the batch of its route messages, the routes wanted, its
interfaces on the links that come up (and are up)."""


def _route_batches(lab: Lab, links: Sequence[LinkPlan], down_links: Iterable[str]
                   ) -> list[_NodeRoutes]:
    """The route messages that restore the routes of the end nodes of ``links`` with the
    links ``down_links`` down (encoded once per distinct route, :meth:`Batch.add_cached`)."""
    touched = {ep.node: set() for lk in links for ep in (lk.a, lk.b)}
    for lk in links:
        for ep in (lk.a, lk.b):
            touched[ep.node].add(ep.ifname)
    down_names = set(down_links)
    out = []
    for node, ifnames in touched.items():
        n = lab.plan.node(node)
        down = {lk.endpoint(node).ifname for lk in lab.plan.links_of(node)
                if lk.name in down_names}
        layout = lab.layout.node(node)
        sock = lab.node_io(node).sock
        batch = Batch(sock, f"node {node}")
        flags = F_CREATE | F_REPLACE
        rto = n.rto_min_s
        if rto is not None:
            for lk in lab.plan.links_of(node):
                ep = lk.endpoint(node)
                if ep.ifname in ifnames:
                    index = layout.ifindex(ep.ifname)
                    for iface in (ep.ipv4, ep.ipv6):
                        if iface is not None:
                            batch.add_cached(
                                ("connected", index, iface, rto),
                                lambda i=index, f=iface, r=rto: (connected_route_msg(i, f, r),
                                                          RTM_NEWROUTE),
                                None, flags,
                                f"node {node}: rto_min on connected route {iface.network}")
        wanted = []
        for route in () if frr.routed_by_frr(lab.plan, n) else n.routes:  # FRR re-learns
            if not any(h.ifname in ifnames for h in route.nexthops):
                continue
            live = _live(route, down)
            if live is None:
                continue
            wanted.append(live)
            key = ("route", live, tuple(layout.ifindex(h.ifname) for h in live.nexthops), rto)
            batch.add_cached(key, lambda r=live, lo=layout, m=rto: (route_msg(r, lo, m),
                                                             RTM_NEWROUTE),
                             None, flags, f"node {node}: restore route {route.dst}")
        out.append((node, layout, sock, batch, wanted, ifnames - down))
    return out


def restore_routes(lab: Lab, links: Sequence[LinkPlan], times: dict[str, Any] | None = None
                   ) -> dict[str, list[str]]:
    """Re-add the routes of the end nodes of ``links`` that go through them (restricted to
    next hops on links that are up, see the module docstring) and read them back. Returns
    node -> the destinations restored; ``times`` (if given) gets ``acked_unix_s``, when the
    kernel had acked every route (seconds since the epoch; the read-back waits for the
    carrier after it). Raises LabError listing every difference."""
    return _restore(lab, links, times, None)


def _restore(lab: Lab, links: Sequence[LinkPlan], times: dict[str, Any] | None,
             batches: list[_NodeRoutes] | None) -> dict[str, list[str]]:
    """:func:`restore_routes` with the route batches made already (None: make them now)."""
    if batches is None:
        batches = _route_batches(lab, links, lab.down_links)
    for node, _, _, batch, _, ifnames_up in batches:
        batch.commit()
        load_balance.restore(lab, node, ifnames_up)  # its per-next-hop tables
        source_routing.restore(lab, node, ifnames_up)  # its per-source tables
    if times is not None:
        times["acked_unix_s"] = time.time()
    out: dict[str, list[str]] = {}
    problems: list[str] = []
    for node, layout, sock, _, wanted, _ in batches:
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
