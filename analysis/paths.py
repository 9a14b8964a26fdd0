"""Paths through a resolved lab plan: which shaped link directions a packet crosses.

The walk follows exactly the routes the plan installs (``NodePlan.routes``, computed by
topologies.routing at resolve time): at an L3 node, a destination on a connected subnet is
delivered there, otherwise the longest matching route's next hops are taken (every one of an
ECMP route: one path each); inside an L2 segment the frame crosses the switches (Linux
bridges) between the two L3 ports. Each crossed link direction is a :class:`Hop` carrying the
sender's egress :class:`Shaping` (rate limiter and buffer on that interface, the delay line
after it; aitb.models.shaping).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from aitb.models.plan import Endpoint, LabPlan, LinkPlan
from aitb.models.shaping import Shaping

__all__ = ["Hop", "PathError", "paths", "ideal_params"]

MAX_HOPS = 64
MAX_PATHS = 64


class PathError(ValueError):
    """No path: an unknown node or address, no route, or a routing loop."""


@dataclass(frozen=True, slots=True)
class Hop:
    """One link direction on a path: ``node`` sends on ``ifname`` over ``link``; ``shaping``
    is that direction's (its ``rate_bps`` None when unshaped)."""

    link: str
    node: str
    ifname: str
    shaping: Shaping


def _hop(lk: LinkPlan, node: str) -> Hop:
    return Hop(lk.name, node, lk.endpoint(node).ifname, lk.egress(node))


def _other(lk: LinkPlan, node: str) -> Endpoint:
    return lk.b if lk.a.node == node else lk.a


def _segment(plan: LabPlan, node: str, lk: LinkPlan) -> list[tuple[list[Hop], Endpoint]]:
    """L3 endpoints reachable from ``node`` out of ``lk`` through switches: (hops, endpoint)."""
    out, todo, seen = [], [([_hop(lk, node)], lk, node)], {lk.name}
    kinds = {n.name: n.kind for n in plan.nodes}
    while todo:
        hops, link, frm = todo.pop()
        far = _other(link, frm)
        if kinds.get(far.node) != "switch":
            out.append((hops, far))
            continue
        for nxt in plan.links_of(far.node):
            if nxt.name not in seen:
                seen.add(nxt.name)
                todo.append((hops + [_hop(nxt, far.node)], nxt, far.node))
    return out


def _ips(ep: Endpoint) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return {i.ip for i in (ep.ipv4, ep.ipv6) if i is not None}


def _step(plan: LabPlan, node: str, dst) -> list[tuple[list[Hop], Endpoint]]:
    """From L3 ``node`` towards address ``dst``: the segments to cross and the next L3 port."""
    for lk in plan.links_of(node):
        ep = lk.endpoint(node)
        nets = [i.network for i in (ep.ipv4, ep.ipv6) if i is not None]
        if any(dst in n for n in nets):
            return [(h, e) for h, e in _segment(plan, node, lk) if dst in _ips(e)]
    routes = [r for r in plan.node(node).routes if dst in r.dst]
    if not routes:
        raise PathError(f"node {node} has no route to {dst}")
    best = max(routes, key=lambda r: r.dst.prefixlen)
    out = []
    for nh in best.nexthops:
        gw = nh.via or dst
        for lk in plan.links_of(node):
            if lk.endpoint(node).ifname == nh.ifname:
                out += [(h, e) for h, e in _segment(plan, node, lk) if gw in _ips(e)]
    return out


def paths(plan: LabPlan, src_node: str, dst_ip: str) -> list[list[Hop]]:
    """Every path (one per ECMP choice, at most MAX_PATHS) from ``src_node`` to the node that
    owns ``dst_ip``, as the link directions crossed in order.

    Raises :class:`PathError` for an unknown node or address, a missing route, or a loop
    (more than MAX_HOPS hops)."""
    try:
        dst = ipaddress.ip_address(dst_ip)
        plan.node(src_node)
    except (KeyError, ValueError) as exc:
        raise PathError(str(exc)) from None
    done, todo = [], [([], src_node)]
    while todo and len(done) < MAX_PATHS:
        hops, node = todo.pop()
        if len(hops) > MAX_HOPS:
            raise PathError(f"routing loop from {src_node} to {dst_ip} (at {node})")
        steps = _step(plan, node, dst)
        if not steps:
            raise PathError(f"{dst_ip} is not reachable from {node} in the plan")
        for seg, ep in steps:
            if dst in _ips(ep):
                done.append(hops + seg)
            else:
                todo.append((hops + seg, ep.node))
    return done


def ideal_params(plan: LabPlan, src_node: str, src_ip: str, dst_node: str,
                 dst_ip: str) -> tuple[int | None, float]:
    """The best path's bottleneck rate (bit/s; None if every path is unshaped) and the base
    RTT (s): the smallest sum of configured ``delay_s`` over a forward path plus the same over
    a reverse path (the ACKs' way back). With ECMP the highest bottleneck rate is taken, so an
    ideal built from it is a lower bound whatever path a flow was hashed to.

    Raises :class:`PathError` as :func:`paths` does."""
    fwd, rev = paths(plan, src_node, dst_ip), paths(plan, dst_node, src_ip)
    rates = [_bottleneck(p) for p in fwd]
    shaped = [r for r in rates if r is not None]
    rate = None if len(shaped) < len(rates) or not shaped else max(shaped)
    delay = min(_delay(p) for p in fwd) + min(_delay(p) for p in rev)
    return rate, delay


def _bottleneck(path: list[Hop]) -> int | None:
    rates = [h.shaping.rate_bps for h in path if h.shaping.rate_bps is not None]
    return min(rates) if rates else None


def _delay(path: list[Hop]) -> float:
    return sum(h.shaping.delay_s for h in path)
