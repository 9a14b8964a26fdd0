"""Routed paths through a resolved :class:`LabPlan`, and its DCI links (pure; the one walk).

**The walk** follows the plan's own forwarding state as the kernel would apply it: at each L3
node (host or router) the longest prefix among its connected subnets (its interfaces'
addresses) and its planned routes (``NodePlan.routes``, from topologies.routing) wins, a
connected subnet winning a tie; every next hop of an equal-cost multipath route is followed
(the kernel hashes each flow onto one of them, which the plan cannot predict), so a flow gets
one path per ECMP choice. Inside an L2 segment (``switch`` nodes: Linux bridges or OVS) the
frame crosses the switches on the shortest path (fewest links) to the port that owns the next
hop's address. Each crossed link direction is a :class:`Hop` carrying the sender's egress
:class:`Shaping` (rate limiter and buffer on that interface, the delay line after it).

Paths are listed in next-hop order: the first path takes every route's first next hop, the
next ones vary the last choice first. At most :data:`MAX_PATHS` paths are kept per (node,
destination) (the first ones in that order). A node that the walk reaches twice is a routing
loop, and so is a host in transit (hosts run with ip_forward=0, testbed/ns/sysctl.py, unless they
set ``forward``); an unknown
node or address, a missing route or interface, or an unreachable next hop is a
:class:`PathError` naming it.

**DCI links** (:func:`dci_links`): a link is a data-centre interconnect if both its ends have a
site, the sites differ (a node's site: its label ``site``, else its ``group``; the
``multi_dc_leaf_spine`` generator labels every node of DC ``dcN`` with ``site: dcN``) and
neither end is a host, or if either end's interface is named ``dci-*`` (that generator's
names for DCI ports, so a DCI is found even when its ends carry no site). A link from a host
to another site's router or switch is that host's access link (an edge site's uplink, e.g.
the quickstart's edge1-dc1-b1), not an interconnect between two sites' networks. This is
the union of the rules that analysis (``site`` labels or ``dci-*`` names) and capture
selection (``site`` else ``group``) used.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from models.plan import LabPlan, LinkPlan
from models.shaping import Shaping

__all__ = ["Hop", "PathError", "PathWalker", "paths", "dci_links", "site_of",
           "MAX_PATHS", "host_addresses", "peer_addresses", "rank_addresses",
           "RankBindingError"]

MAX_PATHS = 256  # ECMP fan-out kept per (node, destination): 16x the generated fabrics' widest
Ip = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network


class PathError(ValueError):
    """No path: an unknown node or address, no route, a missing interface, an unowned next
    hop, or a routing loop. The message names the node, address or interface."""


@dataclass(frozen=True, slots=True)
class Hop:
    """One link direction on a path: ``node`` sends on its interface ``ifname`` over the link
    named ``link``; ``shaping`` is that direction's (``rate_bps`` None when unshaped)."""

    link: str
    node: str
    ifname: str
    shaping: Shaping


def _hop(lk: LinkPlan, node: str) -> Hop:
    return Hop(lk.name, node, lk.endpoint(node).ifname, lk.egress(node))


class PathWalker:
    """The route walk over one plan, with its lookups built once and each (node,
    destination) answer cached: construct once, then ask :meth:`paths` for many flows."""

    def __init__(self, plan: LabPlan) -> None:
        """Index ``plan`` (pure; the plan must not change afterwards)."""
        self.plan = plan
        self.kind = {n.name: n.kind for n in plan.nodes}
        self.forward = {n.name for n in plan.nodes if n.forward}
        self.routes = {n.name: n.routes for n in plan.nodes}
        self.source_routes = {(n.name, sr.ifname): sr.routes for n in plan.nodes
                              for sr in n.source_routes}
        self.port: dict[tuple[str, str], LinkPlan] = {}
        self.owner: dict[Ip, str] = {}
        self.iface_of: dict[Ip, str] = {}
        self.connected: dict[str, list[tuple[Net, str]]] = {n.name: [] for n in plan.nodes}
        for lk in plan.links:
            for ep in (lk.a, lk.b):
                self.port[(ep.node, ep.ifname)] = lk
                for ifa in (ep.ipv4, ep.ipv6):
                    if ifa is not None:
                        self.owner[ifa.ip] = ep.node
                        self.iface_of[ifa.ip] = ep.ifname
                        self.connected[ep.node].append((ifa.network, ep.ifname))
        for n in plan.nodes:  # a forwarding host's node address on its loopback
            for ifa in (n.lo_ipv4, n.lo_ipv6):
                if ifa is not None:
                    self.owner[ifa.ip] = n.name
                    self.connected[n.name].append((ifa.network, "lo"))
        self._cache: dict[tuple[str, Ip], list[list[Hop]]] = {}

    def paths(self, src_node: str, dst_ip: str | Ip, src_ip: str | Ip | None = None
              ) -> list[list[Hop]]:
        """Every path (one per ECMP choice, in next-hop order, at most :data:`MAX_PATHS`)
        from node ``src_node`` to the node owning address ``dst_ip``, as the link directions
        crossed in order; ``[[]]`` when ``src_node`` owns ``dst_ip``. With ``src_ip`` (an
        address of ``src_node``'s interface that has per-source routes,
        :class:`models.plan.SourceRoutes`) the first hop follows that interface's table as the
        kernel's ``ip rule from <src_ip>`` does (the main routes when it has no match).

        Raises :class:`PathError` for an unknown node or address, a missing route or
        interface, an unreachable next hop, a host in transit, or a routing loop (the
        message shows the loop)."""
        try:
            dst = ipaddress.ip_address(dst_ip)
        except ValueError:
            raise PathError(f"{dst_ip!r} is not an IP address") from None
        if src_node not in self.kind:
            raise PathError(f"no node {src_node!r} in lab {self.plan.name!r}")
        if dst not in self.owner:
            raise PathError(f"address {dst} is on no interface of lab {self.plan.name!r}")
        table = self._source_table(src_node, src_ip) if src_ip is not None else None
        if table is None or self.owner[dst] == src_node:
            return [list(p) for p in self._walk(src_node, dst, (src_node,))]  # cache intact
        hops = _lookup(table, dst)
        if not hops:  # no match in the source table: the kernel goes on to the main table
            return [list(p) for p in self._walk(src_node, dst, (src_node,))]
        return self._expand(src_node, dst, (src_node,), hops)

    def _source_table(self, node: str, src_ip: str | Ip) -> tuple | None:
        """The per-source routes of ``node``'s interface holding ``src_ip``, or None."""
        ip = ipaddress.ip_address(src_ip)
        if self.owner.get(ip) != node:
            raise PathError(f"address {ip} is not an address of node {node}")
        return self.source_routes.get((node, self.iface_of.get(ip, "lo")))

    def _walk(self, node: str, dst: Ip, trail: tuple[str, ...]) -> list[list[Hop]]:
        """Paths from ``node`` (reached along the L3 nodes ``trail``) to ``dst``."""
        if self.owner[dst] == node:
            return [[]]
        if (node, dst) in self._cache:
            return self._cache[(node, dst)]
        out = self._expand(node, dst, trail, self._nexthops(node, dst))
        self._cache[(node, dst)] = out
        return out

    def _expand(self, node: str, dst: Ip, trail: tuple[str, ...],
                nexthops: list[tuple[str, Ip]]) -> list[list[Hop]]:
        """Paths from ``node`` to ``dst`` that leave by ``nexthops``."""
        out: list[list[Hop]] = []
        for ifname, gw in nexthops:
            seg, nxt = self._segment(node, ifname, gw)
            if nxt in trail:
                loop = " -> ".join((*trail[trail.index(nxt):], nxt))
                raise PathError(f"routing loop towards {dst}: {loop}")
            if self.kind[nxt] == "host" and self.owner[dst] != nxt \
                    and nxt not in self.forward:
                raise PathError(f"node {node} routes {dst} via host {nxt}, which does not "
                                "forward (ip_forward=0)")
            out += [seg + rest for rest in self._walk(nxt, dst, (*trail, nxt))]
        return _unique(out)[:MAX_PATHS]

    def _nexthops(self, node: str, dst: Ip) -> list[tuple[str, Ip]]:
        """(outgoing interface, address of the next L3 hop) by longest prefix match."""
        best, hops = -1, []
        for net, ifname in self.connected[node]:
            if dst in net and net.prefixlen > best:
                best, hops = net.prefixlen, [(ifname, dst)]
        for r in self.routes[node]:
            if dst in r.dst and r.dst.prefixlen > best:
                best, hops = r.dst.prefixlen, [(h.ifname, h.via or dst) for h in r.nexthops]
        if not hops:
            raise PathError(f"node {node} has no route to {dst}")
        return hops

    def _segment(self, node: str, ifname: str, gw: Ip) -> tuple[list[Hop], str]:
        """The hops from ``node``'s ``ifname`` through switches (breadth first: fewest links)
        to the L3 port that owns ``gw``, and that port's node."""
        first = self.port.get((node, ifname))
        if first is None:
            raise PathError(f"node {node} routes via interface {ifname}, which it does not "
                            "have")
        todo, seen = deque([(first, node, [_hop(first, node)])]), {first.name}
        while todo:
            lk, frm, hops = todo.popleft()
            far = lk.b if lk.a.node == frm else lk.a
            if self.kind.get(far.node) != "switch":
                if gw in {i.ip for i in (far.ipv4, far.ipv6) if i is not None}:
                    return hops, far.node
                continue
            for nxt in self.plan.links_of(far.node):
                if nxt.name not in seen:
                    seen.add(nxt.name)
                    todo.append((nxt, far.node, [*hops, _hop(nxt, far.node)]))
        raise PathError(f"next hop {gw} of node {node} is not reachable from {node}:{ifname}")


def _lookup(routes: tuple, dst: Ip) -> list[tuple[str, Ip]]:
    """(interface, next L3 hop) of the longest prefix of ``routes`` holding ``dst``."""
    best, hops = -1, []
    for r in routes:
        if dst in r.dst and r.dst.prefixlen > best:
            best, hops = r.dst.prefixlen, [(h.ifname, h.via or dst) for h in r.nexthops]
    return hops


def _unique(found: list[list[Hop]]) -> list[list[Hop]]:
    return [list(p) for p in dict.fromkeys(tuple(p) for p in found)]


def paths(plan: LabPlan, src_node: str, dst_ip: str | Ip) -> list[list[Hop]]:
    """:meth:`PathWalker.paths` on a fresh walker of ``plan`` (for one-off questions; build
    a :class:`PathWalker` once for many). Raises :class:`PathError` as that does."""
    return PathWalker(plan).paths(src_node, dst_ip)


def host_addresses(plan: LabPlan, node: str) -> list[str]:
    """The IPv4 traffic addresses of host ``node``: a forwarding host's node address alone,
    else one per NIC (each link's address, in link order; the first is
    :meth:`LabPlan.address_of`)."""
    n = plan.node(node)
    if n.lo_ipv4 is not None:
        return [str(n.lo_ipv4.ip)]
    return [str(ep.ipv4.ip) for lk in plan.links_of(node)
            for ep in (lk.endpoint(node),) if ep.ipv4 is not None]


def peer_addresses(plan: LabPlan, hosts: Iterable[str]
                   ) -> dict[tuple[str, str], tuple[str, str]]:
    """(source address, destination address) per ordered pair (src, dst) of distinct
    ``hosts`` where either has several NICs (:func:`host_addresses`); pairs of one-address
    hosts are left out (both use :meth:`LabPlan.address_of`).

    Candidates: every (source, destination) address pair: for a src with per-source tables
    (:class:`models.plan.SourceRoutes`, a dual-homed host) each of its NICs' addresses, walked
    with that address's table; else src's address on the interface every path to the
    destination leaves by (its first address when an ECMP route spreads over several NICs),
    and every address of dst. The pair with the fewest link crossings wins (rank i of a
    server on NIC i reaches NIC i of its peer over rail i; a GPU reaches a GPU of its own
    server over their intra-server link). Equal-cost candidates (a dual-homed host whose peers
    are as near over either NIC) are spread **per peer**: the k-th tie (in NIC order, source
    first) with k = the position of dst among src's peers (``hosts`` without src) modulo the
    number of ties, so consecutive peers of a host use consecutive NICs and all connections
    of one pair use one NIC pair. Addresses src has no route to are skipped; pairs with no
    route at all are left out (a resolved plan has none). Pure."""
    names = list(dict.fromkeys(hosts))
    addrs = {h: host_addresses(plan, h) for h in names}
    own = {h: {lk.endpoint(h).ifname: str(lk.endpoint(h).ipv4.ip) for lk in plan.links_of(h)
               if lk.endpoint(h).ipv4 is not None} for h in names}
    tables = {h: [own[h][sr.ifname] for sr in plan.node(h).source_routes
                  if sr.ifname in own[h]] for h in names}
    walker = PathWalker(plan)
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for src in names:
        for j, dst in enumerate(h for h in names if h != src):
            if (len(addrs[src]) < 2 and len(addrs[dst]) < 2) or not addrs[src]:
                continue
            cands = _candidates(walker, src, addrs[src], tables[src], own[src], addrs[dst])
            if not cands:
                continue
            best = min(c[0] for c in cands)
            ties = [c[1:] for c in cands if c[0] == best]
            out[(src, dst)] = ties[j % len(ties)]
    return out


def _candidates(walker: PathWalker, src: str, src_addrs: list[str], table_addrs: list[str],
                own: dict[str, str], dst_addrs: list[str]) -> list[tuple[int, str, str]]:
    """(link crossings, source, destination) for each way src can reach an address of dst
    (:func:`peer_addresses`)."""
    out = []
    for src_ip in table_addrs or [None]:
        for addr in dst_addrs:
            try:
                found = walker.paths(src, addr, src_ip)
            except PathError:
                continue
            first = {p[0].ifname for p in found if p}
            if src_ip is None:
                ip = own.get(next(iter(first)), src_addrs[0]) if len(first) == 1 \
                    else src_addrs[0]
            elif first - {f for f, a in own.items() if a == src_ip}:
                continue  # its table has no route there: the main table, another NIC
            else:
                ip = src_ip
            out.append((min(len(p) for p in found), ip, addr))
    return out


def rank_addresses(plan: LabPlan, placement: Mapping[int, str]) -> dict[int, str]:
    """rank -> the IPv4 address it is bound to, for the ranks placed on hosts with
    ``ranks_per_host`` (:class:`models.plan.NodePlan`): the k-th rank placed on such a host (in
    rank order) gets its k-th NIC's address (:func:`host_addresses`); ranks on other hosts
    are left out. Raises :class:`RankBindingError` naming the host when more ranks are placed
    on it than its ``ranks_per_host``. Pure."""
    by_host: dict[str, list[int]] = {}
    for rank in sorted(placement):
        by_host.setdefault(placement[rank], []).append(rank)
    out: dict[int, str] = {}
    for host, ranks in by_host.items():
        n = plan.node(host)
        if n.ranks_per_host is None:
            continue
        if len(ranks) > n.ranks_per_host:
            raise RankBindingError(f"host {host} takes {n.ranks_per_host} ranks "
                                   f"(ranks_per_host: one per NIC) and {len(ranks)} are "
                                   f"placed on it (ranks {ranks})")
        out.update(zip(ranks, host_addresses(plan, host), strict=False))
    return out


class RankBindingError(ValueError):
    """More ranks placed on a host than its ``ranks_per_host``; the message names it."""


def site_of(plan: LabPlan, node: str) -> str | None:
    """The site of ``node``: its label ``site``, else its ``group``, else None. Raises
    KeyError naming an unknown node."""
    n = plan.node(node)
    return (n.labels or {}).get("site", n.group)


def dci_links(plan: LabPlan) -> frozenset[str]:
    """Names of the DCI links of ``plan``: both ends in different sites (:func:`site_of`)
    and neither a host (a host's link to another site is its access link), or an end's
    interface named ``dci-*`` (the module docstring gives the why)."""
    site = {n.name: site_of(plan, n.name) for n in plan.nodes}
    host = {n.name for n in plan.nodes if n.kind == "host"}
    out = set()
    for lk in plan.links:
        a, b = site.get(lk.a.node), site.get(lk.b.node)
        named = lk.a.ifname.startswith("dci-") or lk.b.ifname.startswith("dci-")
        access = lk.a.node in host or lk.b.node in host
        if named or (a is not None and b is not None and a != b and not access):
            out.add(lk.name)
    return frozenset(out)
