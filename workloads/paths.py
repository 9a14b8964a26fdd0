"""Routed paths through a resolved lab plan, and their configured delays (pure).

A packet from host ``src`` to host ``dst`` follows the plan's routes (longest prefix match;
an equal-cost multipath route is followed through its first next hop, so with ECMP the path is
one of the equal-cost ones, and their configured delays may differ) from node to node, and
inside an L2 segment (Linux bridges, ``switch`` nodes, loop-free) the one path between two
ports. Used by the inference workload's ``nearest`` policy and to check that background flows
cross the link they should load.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from collections.abc import Iterator

from aitb.models.plan import LabPlan, LinkPlan

__all__ = ["Hop", "PathError", "path_hops", "path_delay_s", "rtt_delay_s"]

Hop = tuple[LinkPlan, str]  # a link and the node that sends on it
_MAX_HOPS = 64


class PathError(ValueError):
    """No route, a routing loop, or an unknown node."""


def _owner(plan: LabPlan, ip: ipaddress.IPv4Address) -> str | None:
    for lk in plan.links:
        for ep in (lk.a, lk.b):
            if ep.ipv4 is not None and ep.ipv4.ip == ip:
                return ep.node
    return None


def _next_hop(plan: LabPlan, node: str, dst: ipaddress.IPv4Address
              ) -> tuple[str, ipaddress.IPv4Address]:
    """(outgoing interface, next-hop address) of ``node`` towards ``dst``."""
    for lk in plan.links_of(node):
        ep = lk.endpoint(node)
        if ep.ipv4 is not None and dst in ep.ipv4.network:
            return ep.ifname, dst  # connected
    best = None
    for r in plan.node(node).routes:
        if r.dst.version == 4 and dst in r.dst and (best is None
                                                     or r.dst.prefixlen > best.dst.prefixlen):
            best = r
    if best is None:
        raise PathError(f"node {node} has no route to {dst}")
    hop = best.nexthops[0]
    return hop.ifname, hop.via if hop.via is not None else dst  # type: ignore[return-value]


def _l2(plan: LabPlan, node: str, ifname: str, target: str) -> list[Hop]:
    """Hops from ``node``'s interface ``ifname`` through switches to ``target``."""
    first = next((lk for lk in plan.links_of(node) if lk.endpoint(node).ifname == ifname), None)
    if first is None:
        raise PathError(f"node {node} has no interface {ifname}")
    kinds = {n.name: n.kind for n in plan.nodes}
    other = first.b.node if first.a.node == node else first.a.node
    todo: deque[tuple[str, list[Hop]]] = deque([(other, [(first, node)])])
    seen = {node, other}
    while todo:
        at, hops = todo.popleft()
        if at == target:
            return hops
        if kinds[at] != "switch":
            continue
        for lk in plan.links_of(at):
            nxt = lk.b.node if lk.a.node == at else lk.a.node
            if nxt not in seen:
                seen.add(nxt)
                todo.append((nxt, [*hops, (lk, at)]))
    raise PathError(f"{target} is not reachable from {node}:{ifname} at layer 2")


def path_hops(plan: LabPlan, src: str, dst: str) -> list[Hop]:
    """The (link, sending node) hops from host ``src`` to host ``dst`` along the plan's
    routes. Raises PathError for a node without address, no route, or a loop."""
    addr = plan.address_of(dst)
    if addr is None:
        raise PathError(f"node {dst} has no IPv4 address")
    hops: list[Hop] = []
    at = src
    for _ in range(_MAX_HOPS):
        if at == dst:
            return hops
        ifname, via = _next_hop(plan, at, addr)
        nxt = _owner(plan, via)
        if nxt is None:
            raise PathError(f"next hop {via} of node {at} belongs to no node")
        hops += _l2(plan, at, ifname, nxt)
        at = nxt
    raise PathError(f"routing loop from {src} to {dst}")


def _delays(hops: list[Hop]) -> Iterator[float]:
    for lk, sender in hops:
        yield lk.egress(sender).delay_s


def path_delay_s(plan: LabPlan, src: str, dst: str) -> float:
    """Configured one-way delay (s) from ``src`` to ``dst``: the sum of the delay_s of every
    link direction on the path (propagation only; no serialization or queueing)."""
    return sum(_delays(path_hops(plan, src, dst)))


def rtt_delay_s(plan: LabPlan, a: str, b: str) -> float:
    """Configured round-trip delay (s) between ``a`` and ``b``: both directions' paths."""
    return path_delay_s(plan, a, b) + path_delay_s(plan, b, a)
