"""L2 segments and their subnets, computed from the link graph.

A segment is either a point-to-point link between two L3 nodes (hosts, routers), addressed as
an IPv4 /31 (RFC 3021), or the set of L3 interfaces attached to one connected group of switches
(switch-switch links join switches into one broadcast domain), addressed with the smallest
subnet that holds every member plus network and broadcast address. Switch ports get no address.
A forwarding host also has a loopback segment: its node address, an IPv4 /32 (an IPv6 /128 in a
/64 of its own).

Subnets are taken from the pool in a fixed order (larger subnets first, then by the position of
the segment's first link), so the same topology always gets the same addresses, and same-size
subnets of consecutive links are contiguous (which lets routing aggregate them). IPv6, when
enabled, gives each segment a /64 of the IPv6 pool, members ``::1, ::2, ...``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

from models.errors import SpecIssue
from topologies.graph import Edge, Port
from topologies.spec import AddressingSpec

__all__ = ["Segment", "find_segments", "allocate"]


@dataclass(slots=True)
class Segment:
    """One L3 subnet: its member interfaces (``ports``, in link order) and the links in it."""

    order: int
    ports: list[Port] = field(default_factory=list)
    edges: list[int] = field(default_factory=list)
    switches: list[str] = field(default_factory=list)
    v4: ipaddress.IPv4Network | None = None
    v6: ipaddress.IPv6Network | None = None
    loopback: bool = False  # a forwarding host's node address: one port (its lo), a /32

    @property
    def p2p(self) -> bool:
        """True for a point-to-point link (no switch)."""
        return not self.switches

    def nodes(self) -> list[str]:
        """The L3 nodes on this segment, in port order."""
        return [p.node for p in self.ports]


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def find_segments(edges: list[Edge], kinds: Mapping[str, str]) -> list[Segment]:
    """Group interfaces into segments; returned in order of each segment's first link.
    ``kinds``: node name -> kind."""
    uf = _UnionFind()
    for e in edges:
        if kinds[e.a.node] == "switch" and kinds[e.b.node] == "switch":
            uf.union(e.a.node, e.b.node)
    lans: dict[str, Segment] = {}
    out: list[Segment] = []
    for e in edges:
        switches = [p.node for p in (e.a, e.b) if kinds[p.node] == "switch"]
        if not switches:
            out.append(Segment(order=len(out), ports=[e.a, e.b], edges=[e.index]))
            continue
        root = uf.find(switches[0])
        if root not in lans:
            lans[root] = Segment(order=len(out))
            out.append(lans[root])
        seg = lans[root]
        seg.edges.append(e.index)
        seg.ports += [p for p in (e.a, e.b) if kinds[p.node] != "switch"]
        seg.switches += [s for s in switches if s not in seg.switches]
    return out


def check_segments(segments: list[Segment], edges: list[Edge],
                   stp: Mapping[str, bool]) -> list[SpecIssue]:
    """Problems a segment can have: a node with two interfaces on it, links of different MTU
    on one bridge, a switch loop without STP on every switch of it (a broadcast storm)."""
    issues = []
    by_index = {e.index: e for e in edges}
    for seg in segments:
        first = ("links", seg.edges[0])
        nodes = seg.nodes()
        twice = sorted({n for n in nodes if nodes.count(n) > 1})
        if twice and not seg.p2p:
            issues.append(SpecIssue(f"node(s) {', '.join(twice)} have more than one interface "
                                    f"on the L2 segment of switch {seg.switches[0]!r}",
                                    key_path=first))
        mtus = sorted({by_index[i].mtu for i in seg.edges})
        if len(mtus) > 1:
            issues.append(SpecIssue(f"links on the L2 segment of switch {seg.switches[0]!r} have "
                                    f"different MTUs {mtus}; a bridge needs one MTU",
                                    key_path=first))
        issues += _loop_issue(seg, by_index, stp)
    return issues


def _loop_issue(seg: Segment, by_index: Mapping[int, Edge],
                stp: Mapping[str, bool]) -> list[SpecIssue]:
    sw = set(seg.switches)
    inner = [i for i in seg.edges if by_index[i].a.node in sw and by_index[i].b.node in sw]
    if len(inner) < len(sw) or all(stp.get(s, False) for s in sw):
        return []
    return [SpecIssue(f"switches {', '.join(sorted(sw))} form a loop; set stp: true on all of "
                      "them or remove a link (a loop without STP floods the segment)",
                      key_path=("links", inner[-1]))]


def _v4_prefix(seg: Segment) -> int:
    if seg.loopback:
        return 32
    if seg.p2p:
        return 31
    need = len(seg.ports) + 2  # network and broadcast addresses
    return 32 - max(2, (need - 1).bit_length())


def allocate(segments: list[Segment], spec: AddressingSpec
             ) -> tuple[dict[Port, tuple[ipaddress.IPv4Interface, ipaddress.IPv6Interface | None]],
                        list[SpecIssue]]:
    """Give each segment with members a subnet; returns port -> (IPv4, IPv6 or None) interface
    addresses and the issues (pool too small). Sets ``seg.v4``/``seg.v6``."""
    used = [s for s in segments if s.ports]
    pool = spec.ipv4_pool
    cursor = int(pool.network_address)
    need = sum(2 ** (32 - _v4_prefix(s)) for s in used)
    if need > pool.num_addresses:
        return {}, [SpecIssue(f"the IPv4 pool {pool} has {pool.num_addresses} addresses; this "
                              f"topology needs {need}; give a larger ipv4_pool",
                              key_path=("addressing", "ipv4_pool"))]
    v6_nets = list(_v6_subnets(spec, len(used))) if spec.ipv6 else []
    if spec.ipv6 and len(v6_nets) < len(used):
        return {}, [SpecIssue(f"the IPv6 pool {spec.ipv6_pool} holds fewer than {len(used)} "
                              "/64 subnets", key_path=("addressing", "ipv6_pool"))]
    out = {}
    for seg in sorted(used, key=lambda s: (_v4_prefix(s), s.order)):
        plen = _v4_prefix(seg)
        seg.v4 = ipaddress.IPv4Network((cursor, plen))
        cursor += seg.v4.num_addresses  # stays inside the pool: checked by `need` above
    for i, seg in enumerate(used):
        seg.v6 = v6_nets[i] if spec.ipv6 else None
        out.update(_member_addresses(seg))
    return out, []


def _v6_subnets(spec: AddressingSpec, count: int):
    if spec.ipv6_pool.prefixlen > 64:
        return iter(())
    nets = spec.ipv6_pool.subnets(new_prefix=64)
    return (next(nets) for _ in range(min(count, 2 ** (64 - spec.ipv6_pool.prefixlen))))


def _member_addresses(seg: Segment):
    assert seg.v4 is not None  # set by allocate() just before
    base = int(seg.v4.network_address) + (0 if seg.p2p else 1)  # skip the network address
    for k, port in enumerate(seg.ports):
        v4 = ipaddress.IPv4Interface((base + k, seg.v4.prefixlen))
        v6 = (ipaddress.IPv6Interface((int(seg.v6.network_address) + k + 1,
                                       128 if seg.loopback else 64))
              if seg.v6 is not None else None)
        yield port, (v4, v6)
