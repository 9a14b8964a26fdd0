"""Which links a packet from a node to an address can cross, from a resolved LabPlan (pure).

The walk follows the plan's own routing tables, as the kernel would: at each node the longest
prefix among its routes and its connected subnets; a route's next hops are all followed (equal
cost multipath: the kernel hashes each flow onto one of them, which the plan cannot predict, so
a flow *may* take any of them); L2 switches are crossed to the next hop's owner.

DCI links: the links whose two ends lie in different sites (node label ``site``, set by the
``multi_dc_leaf_spine`` generator on every node of DC ``dcN``), and links with an interface
named ``dci-*`` (that generator's DCI interface names).
"""

from __future__ import annotations

import ipaddress
from collections import deque
from functools import cache

from aitb.models.plan import LabPlan, LinkPlan

__all__ = ["dci_links", "PathFinder"]

MAX_HOPS = 64  # IP's default TTL (RFC 1700): a longer walk is a routing loop
MAX_PATHS = 256  # ECMP fan-out kept per (node, destination); enough for the generated fabrics
Ip = ipaddress.IPv4Address | ipaddress.IPv6Address


def dci_links(plan: LabPlan) -> frozenset[str]:
    """Names of the DCI links of ``plan`` (see the module docstring)."""
    site = {n.name: (n.labels or {}).get("site") for n in plan.nodes}
    out = set()
    for lk in plan.links:
        a, b = site.get(lk.a.node), site.get(lk.b.node)
        if (a and b and a != b) or lk.a.ifname.startswith("dci-") \
                or lk.b.ifname.startswith("dci-"):
            out.add(lk.name)
    return frozenset(out)


class PathFinder:
    """Paths through one plan; construct once, then ask :meth:`links` for many flows."""

    def __init__(self, plan: LabPlan) -> None:
        self.plan = plan
        self.kind = {n.name: n.kind for n in plan.nodes}
        self.owner: dict[Ip, str] = {}
        self.port: dict[tuple[str, str], LinkPlan] = {}
        self.connected: dict[str, list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network,
                                             str]]] = {n.name: [] for n in plan.nodes}
        for lk in plan.links:
            for ep in (lk.a, lk.b):
                self.port[(ep.node, ep.ifname)] = lk
                for ifa in (ep.ipv4, ep.ipv6):
                    if ifa is not None:
                        self.owner[ifa.ip] = ep.node
                        self.connected[ep.node].append((ifa.network, ep.ifname))
        self.links = cache(self._links)

    def _nexthops(self, node: str, dst: Ip) -> list[tuple[str, Ip]]:
        """(interface, address of the next hop's owner) by longest prefix match."""
        best, hops = -1, []
        for net, ifname in self.connected[node]:
            if dst in net and net.prefixlen > best:
                best, hops = net.prefixlen, [(ifname, dst)]
        for r in self.plan.node(node).routes:
            if dst.version == r.dst.version and dst in r.dst and r.dst.prefixlen > best:
                best, hops = r.dst.prefixlen, [(h.ifname, h.via or dst) for h in r.nexthops]
        return hops

    def _l2(self, node: str, ifname: str, target: str) -> list[str]:
        """Links from ``node``'s ``ifname`` to ``target`` through switches (BFS)."""
        first = self.port[(node, ifname)]
        queue = deque([(first, node, [first.name])])
        seen = {first.name}
        while queue:
            lk, came_from, names = queue.popleft()
            other = lk.b.node if lk.a.node == came_from else lk.a.node
            if other == target:
                return names
            if self.kind.get(other) != "switch":
                continue
            for nxt in self.plan.links_of(other):
                if nxt.name not in seen:
                    seen.add(nxt.name)
                    queue.append((nxt, other, [*names, nxt.name]))
        return []

    def _links(self, node: str, dst: Ip, hops: int = 0) -> tuple[frozenset[str], ...]:
        """Every path (a set of link names) from ``node`` to ``dst``; () when unreachable."""
        if self.owner.get(dst) == node:
            return (frozenset(),)
        if hops >= MAX_HOPS or dst not in self.owner:
            return ()
        paths: list[frozenset[str]] = []
        for ifname, via in self._nexthops(node, dst):
            nxt = self.owner.get(via)
            seg = self._l2(node, ifname, nxt) if nxt else []
            if not seg:
                continue
            paths += [p | set(seg) for p in self.links(nxt, dst, hops + 1)]
        return tuple(dict.fromkeys(paths))[:MAX_PATHS]

    def flow_links(self, src_node: str, dst_ip: str) -> tuple[frozenset[str], ...]:
        """The possible paths (sets of link names) of a flow from ``src_node`` to
        ``dst_ip``; () if the plan gives it no route."""
        return self.links(src_node, ipaddress.ip_address(dst_ip))
