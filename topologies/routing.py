"""Static routes by shortest path over the L3 graph, with equal-cost multipath.

Model (as OSPF's): a node leaving through an interface pays that link's ``cost``. Only routers
forward: hosts never appear as transit (they have no ip_forward), so distances are computed over
routers only, and a host uses the routers on its own segments as gateways.

For a destination segment S with routers R(S), the cost of router M to reach S is
d_S(M) = min over R in R(S) of dist(M -> R) + cost(R's port on S), where dist is the shortest
path through routers only (Dijkstra from every router over the reversed graph). A node X not
on S uses every gateway (interface i, router G on i's segment) that reaches the minimum of
cost(i) + d_S(G): one next hop, or an ECMP route where costs tie.

Tables are kept compact where that is exact: destinations with the same next hops are merged
into covering prefixes only when those prefixes contain nothing else (:func:`aggregate`),
and a host whose every destination has the same next hops gets ONE route to the whole pool
(never a default route).

**Per-source tables** (multi-NIC hosts, :class:`models.plan.SourceRoutes`): a host with two or
more NICs gets, per NIC, the routes that traffic from that NIC's address takes: its own subnet
on-link and, for every other segment, the best paths through the gateways on that NIC alone
(the same costs as above, other NICs left out; one route to the pool only when that NIC
reaches every segment, so a destination it cannot reach falls through to the main table).
The testbed installs them as ``ip rule from <address> lookup <table>``, so a packet never
leaves a NIC with another NIC's source address (the kernel's ECMP hash or a shorter path over
another NIC would send it there otherwise). Hosts get them when one of their routes spreads
over several of their NICs (a dual-homed host with equal-cost NICs) or when they bind ranks
to NICs (``ranks_per_host``).
"""

from __future__ import annotations

import heapq
import ipaddress
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from models.plan import NextHop, Route, SourceRoutes
from topologies.addressing import Segment
from topologies.graph import Port

__all__ = ["RoutingResult", "compute_routes"]

INF = float("inf")
Addr = tuple[ipaddress.IPv4Interface, ipaddress.IPv6Interface | None]


@dataclass(frozen=True, slots=True)
class RoutingResult:
    """Routes per node and, per L3 node, the indices of the segments it can reach."""

    routes: dict[str, tuple[Route, ...]]
    reach: dict[str, frozenset[int]]
    source_routes: dict[str, tuple[SourceRoutes, ...]] = field(default_factory=dict)


class _Graph:
    """Interfaces of L3 nodes, gateways per interface, router-to-router distances."""

    def __init__(self, segments: list[Segment], kinds: Mapping[str, str],
                 cost: Mapping[Port, int]) -> None:
        self.segments = [s for s in segments if s.v4 is not None]
        self.ifaces: dict[str, list[tuple[int, Port]]] = defaultdict(list)
        for k, seg in enumerate(self.segments):
            for port in seg.ports:
                self.ifaces[port.node].append((k, port))
        self.routers = sorted({n for n in self.ifaces if kinds[n] == "router"})
        self.router_set = set(self.routers)
        # per segment: its routers with the cost of their port onto it (delivery costs it)
        self.seg_routers = [frozenset((p.node, cost[p]) for p in s.ports
                                      if kinds[p.node] == "router") for s in self.segments]
        self.cost = cost
        self.v4_int = [(int(s.v4.network_address), s.v4.prefixlen) for s in self.segments]
        self.v6_int = [(int(s.v6.network_address), s.v6.prefixlen) if s.v6 else (0, 0)
                       for s in self.segments]
        self.nets = {(int(s.v4.network_address), s.v4.prefixlen): s.v4 for s in self.segments}
        self.nets.update({(int(s.v6.network_address), s.v6.prefixlen): s.v6
                          for s in self.segments if s.v6})
        self.senders = self._senders()
        self.dist_to = {r: self._dijkstra_to(r) for r in self.routers}
        self._dvec: dict[frozenset[tuple[str, int]], dict[str, float]] = {}

    def network(self, addr: int, plen: int, version: int
                ) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        """The network ``addr/plen``: a segment's own object when it is one (cheaper)."""
        net = self.nets.get((addr, plen))
        if net is None or net.version != version:
            cls = ipaddress.IPv4Network if version == 4 else ipaddress.IPv6Network
            net = cls((addr, plen))
        return net

    def own(self, node: str) -> frozenset[int]:
        """The segments ``node`` has an interface on."""
        return frozenset(k for k, _ in self.ifaces[node])

    def gateways(self, node: str) -> list[tuple[int, Port, Port]]:
        """(segment, own port, gateway router's port) for every router next to ``node``."""
        out = []
        for k, own in self.ifaces[node]:
            out += [(k, own, p) for p in self.segments[k].ports
                    if p.node != node and p.node in self.router_set]
        return out

    def _senders(self) -> dict[str, list[tuple[str, int]]]:
        """Router y -> (router x, cost of x's port) for every router x that can send to y
        over a shared segment."""
        out: dict[str, list[tuple[str, int]]] = {r: [] for r in self.routers}
        for seg in self.segments:
            ports = [p for p in seg.ports if p.node in self.router_set]
            for y in ports:
                out[y.node] += [(x.node, self.cost[x]) for x in ports if x.node != y.node]
        return out

    def _dijkstra_to(self, target: str) -> dict[str, float]:
        """Distance from every router to ``target`` through routers only."""
        dist = {target: 0.0}
        heap = [(0.0, target)]
        while heap:
            d, y = heapq.heappop(heap)
            if d > dist.get(y, INF):
                continue
            for x, c in self.senders[y]:
                if d + c < dist.get(x, INF):
                    dist[x] = d + c
                    heapq.heappush(heap, (d + c, x))
        return dist

    def dvec(self, targets: frozenset[tuple[str, int]]) -> dict[str, float]:
        """Router -> cost to reach a segment whose routers and their port costs onto it are
        ``targets``: min over (r, c) in targets of distance(router -> r) + c."""
        if targets not in self._dvec:
            vec: dict[str, float] = {}
            for r, c in targets:
                for m, d in self.dist_to[r].items():
                    if d + c < vec.get(m, INF):
                        vec[m] = d + c
            self._dvec[targets] = vec
        return self._dvec[targets]


def _best(gws: list[tuple[int, Port, Port]], g: _Graph, targets: frozenset[tuple[str, int]]
          ) -> tuple[tuple[Port, Port], ...]:
    """The (own port, gateway port) pairs on a shortest path towards ``targets``, sorted by
    interface name."""
    get, cost = g.dvec(targets).get, g.cost
    best, hops = INF, []
    for _, own, gw in gws:
        d = cost[own] + get(gw.node, INF)
        if d < best:
            best, hops = d, [(own, gw)]
        elif d == best and d != INF:
            hops.append((own, gw))
    if len(hops) > 1:
        hops.sort(key=lambda pg: (pg[0].ifname, pg[1].node))
    return tuple(hops)


def _nexthops(hops: Iterable[tuple[Port, Port]], addr: Mapping[Port, Addr], v6: bool
              ) -> tuple[NextHop, ...]:
    return tuple(NextHop(ifname=own.ifname, via=(addr[gw][1].ip if v6 else addr[gw][0].ip))
                 for own, gw in hops)


def _node_table(node: str, g: _Graph) -> dict[int, tuple[tuple[Port, Port], ...]]:
    """Destination segment -> best (own port, gateway port) pairs, for every reachable segment
    ``node`` is not on."""
    own = g.own(node)
    gws = g.gateways(node)
    cache: dict[frozenset[tuple[str, int]], tuple] = {}
    canon: dict[tuple, tuple] = {}  # equal next-hop sets share one object (grouped by id)
    out = {}
    for k, targets in enumerate(g.seg_routers):
        if k in own or not targets:
            continue
        if targets not in cache:
            best = _best(gws, g, targets)
            cache[targets] = canon.setdefault(best, best)
        if cache[targets]:
            out[k] = cache[targets]
    return out


def aggregate(nets: list[tuple[int, int]], bits: int) -> list[tuple[int, int]]:
    """Merge disjoint networks ``(network address as int, prefix length)`` of one family with
    ``bits``-bit addresses into the fewest prefixes covering exactly the same addresses: two
    sibling halves (same prefix length, same parent) become their parent, repeatedly. Like
    ``ipaddress.collapse_addresses`` for disjoint input, on integers for speed."""
    if len(nets) < 2:
        return list(nets)
    stack: list[tuple[int, int]] = []
    for net in sorted(nets):
        stack.append(net)
        while len(stack) >= 2:
            (a, la), (b, lb) = stack[-2], stack[-1]
            size = 1 << (bits - la)
            if la != lb or la == 0 or a & size or a + size != b:
                break
            stack[-2:] = [(a, la - 1)]
    return stack


def _pool_routes(hops: tuple[tuple[Port, Port], ...], addr: Mapping[Port, Addr],
                 pools: tuple[ipaddress.IPv4Network, ipaddress.IPv6Network | None]
                 ) -> tuple[Route, ...]:
    """One route per address family to the whole pool (never 0.0.0.0/0)."""
    return tuple(Route(dst=pool, nexthops=_nexthops(hops, addr, v6=i == 1))
                 for i, pool in enumerate(pools) if pool is not None)


def _routes(table: Mapping[int, tuple], g: _Graph, addr: Mapping[Port, Addr],
            pools: tuple[ipaddress.IPv4Network, ipaddress.IPv6Network | None], compact: bool
            ) -> tuple[Route, ...]:
    groups: dict[int, list[int]] = defaultdict(list)
    by_id: dict[int, tuple] = {}
    for k, hops in table.items():  # next-hop tuples are canonical objects: group by identity
        groups[id(hops)].append(k)
        by_id[id(hops)] = hops
    if compact and len(groups) == 1:
        return _pool_routes(next(iter(by_id.values())), addr, pools)
    out = []
    for hid, ks in groups.items():
        hops = by_id[hid]
        v4 = _nexthops(hops, addr, v6=False)
        out += [(4, a, Route(dst=g.network(a, plen, 4), nexthops=v4))
                for a, plen in aggregate([g.v4_int[k] for k in ks], 32)]
        if pools[1] is not None:
            v6 = _nexthops(hops, addr, v6=True)
            out += [(6, a, Route(dst=g.network(a, plen, 6), nexthops=v6))
                    for a, plen in aggregate([g.v6_int[k] for k in ks], 128)]
    out.sort(key=lambda t: t[:2])
    return tuple(r for _, _, r in out)


def _spreads(routes: tuple[Route, ...]) -> bool:
    """Whether a route of these has next hops on two or more interfaces."""
    return any(len({h.ifname for h in r.nexthops}) > 1 for r in routes)


def _source_routes(node: str, g: _Graph, addr: Mapping[Port, Addr],
                   pools: tuple[ipaddress.IPv4Network, ipaddress.IPv6Network | None]
                   ) -> tuple[SourceRoutes, ...]:
    """Per own interface of host ``node``: its subnet on-link, then the best routes through
    the gateways on that interface only (compact like a host's main table)."""
    out = []
    gws = g.gateways(node)
    for k, port in g.ifaces[node]:
        mine = [gw for gw in gws if gw[1] == port]
        canon: dict[tuple, tuple] = {}
        table = {}
        for kk, targets in enumerate(g.seg_routers):
            if kk == k or not targets or not mine:
                continue
            best = _best(mine, g, targets)
            if best:
                table[kk] = canon.setdefault(best, best)
        v4, v6 = addr[port]
        onlink = tuple(Route(dst=i.network, nexthops=(NextHop(ifname=port.ifname),))
                       for i in (v4, v6) if i is not None)
        # one route to the whole pool only when this NIC reaches every segment: else a
        # destination it cannot reach must fall through to the main table, not be sent
        # to a gateway that drops it
        need = {kk for kk, t in enumerate(g.seg_routers) if t} | g.own(node)
        compact = need - {k} <= set(table)
        out.append(SourceRoutes(port.ifname, onlink + (
            _routes(table, g, addr, pools, compact=compact) if table else ())))
    return tuple(out)


def compute_routes(segments: list[Segment], kinds: Mapping[str, str], cost: Mapping[Port, int],
                   addr: Mapping[Port, Addr],
                   pools: tuple[ipaddress.IPv4Network, ipaddress.IPv6Network | None],
                   per_source: Iterable[str] = ()) -> RoutingResult:
    """Routes for every host and router.

    segments: with subnets allocated; kinds: node -> kind; cost: port -> cost of leaving
    through it; addr: port -> (IPv4, IPv6 or None) interface; pools: (IPv4 pool, IPv6 pool or
    None) for the compact host route; per_source: hosts that get per-source tables even when
    no route of theirs spreads over several NICs (hosts binding ranks to NICs). Returns
    routes and reachable segment indices per node, and the per-source tables of the
    multi-NIC hosts that need them (module docstring).
    """
    g = _Graph(segments, kinds, cost)
    routes, reach = {}, {}
    for node in g.routers:
        table = _node_table(node, g)
        routes[node] = _routes(table, g, addr, pools, compact=False)
        reach[node] = frozenset(table) | g.own(node)
    for node in sorted(set(g.ifaces) - g.router_set):
        gws, own = g.gateways(node), g.own(node)
        if len(gws) == 1:  # one gateway: one route to the pool, reach what it reaches
            far = reach[gws[0][2].node] - own
            routes[node] = _pool_routes(((gws[0][1], gws[0][2]),), addr, pools) if far else ()
            reach[node] = far | own
            continue
        table = _node_table(node, g)
        routes[node] = _routes(table, g, addr, pools, compact=True)
        reach[node] = frozenset(table) | own
    forced = set(per_source)
    source = {node: _source_routes(node, g, addr, pools)
              for node in sorted(set(g.ifaces) - g.router_set)
              if len(g.ifaces[node]) > 1 and (node in forced or _spreads(routes[node]))}
    return RoutingResult(routes=routes, reach=reach, source_routes=source)
