"""The link graph of a checked spec: interface names, link names, cost, MTU and shaping per
link (:class:`Edge`), before addresses are known."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from models.errors import SpecIssue
from models.shaping import Shaping
from models.units import UnitError
from topologies.shaping import LinkShapingError, link_shaping, setting_key_path
from topologies.spec import ProfileSpec, TopologySpec
from topologies.validate import split_endpoint

__all__ = ["Port", "Edge", "build_edges"]

DEFAULT_MTU = 1500
DEFAULT_COST = 1


class Port(NamedTuple):
    """One end of a link: node and interface name inside it (a tuple: cheap to hash)."""

    node: str
    ifname: str


@dataclass(frozen=True, slots=True)
class Edge:
    """A link with everything but addresses resolved; ``index`` is its place in ``links``."""

    index: int
    name: str
    a: Port
    b: Port
    cost: int
    mtu: int
    a_to_b: Shaping
    b_to_a: Shaping


def _ifnames(spec: TopologySpec) -> list[tuple[str, str]]:
    """Interface names per link end: the given ones, else ``eth0, eth1, ...`` per node in link
    order, skipping names given explicitly elsewhere on that node."""
    taken: dict[str, set[str]] = defaultdict(set)
    for link in spec.links:
        for end in link.endpoints:
            node, ifname = split_endpoint(end)
            if ifname:
                taken[node].add(ifname)
    counters: dict[str, int] = defaultdict(int)

    def name_for(end: str) -> str:
        node, ifname = split_endpoint(end)
        if ifname:
            return ifname
        while f"eth{counters[node]}" in taken[node]:
            counters[node] += 1
        counters[node] += 1
        return f"eth{counters[node] - 1}"

    return [(name_for(lk.endpoints[0]), name_for(lk.endpoints[1])) for lk in spec.links]


def _link_names(spec: TopologySpec) -> list[str]:
    """Given names, else ``a-b`` (``a-b-2``, ``a-b-3`` for parallel links), unique."""
    used = {lk.name for lk in spec.links if lk.name}
    out = []
    for lk in spec.links:
        if lk.name:
            out.append(lk.name)
            continue
        base = "-".join(split_endpoint(e)[0] for e in lk.endpoints)
        name, n = base, 1
        while name in used:
            n += 1
            name = f"{base}-{n}"
        used.add(name)
        out.append(name)
    return out


def build_edges(spec: TopologySpec, profiles: Mapping[str, ProfileSpec]
                ) -> tuple[list[Edge], list[SpecIssue]]:
    """One :class:`Edge` per link of a checked ``spec`` and the shaping issues found (invalid
    combinations such as jitter above delay after merging profile and link settings)."""
    edges, issues = [], []
    default = spec.defaults.link
    names = _link_names(spec)
    shared: dict[tuple[tuple[str | int, ...], str], list[str]] = {}  # a profile's or default's
    for i, (link, (a_if, b_if)) in enumerate(zip(spec.links, _ifnames(spec), strict=True)):
        try:
            a_to_b, b_to_a = link_shaping(link, profiles, default)
        except LinkShapingError as exc:
            path = ("links", i) if exc.key is None else setting_key_path(
                link, i, profiles, default, exc.direction, exc.key)  # type: ignore[arg-type]
            if path[0] == "links":
                issues.append(SpecIssue(str(exc), key_path=path))
            else:  # the layer that set the key refused, once for every link it reaches
                what = str(exc).split(": ", 1)[-1]
                shared.setdefault((path, what), []).append(f"{names[i]} {exc.direction}")
            continue
        except UnitError as exc:
            issues.append(SpecIssue(str(exc), key_path=("links", i)))
            continue
        a, b = (split_endpoint(e)[0] for e in link.endpoints)
        edges.append(Edge(
            index=i, name=names[i], a=Port(a, a_if), b=Port(b, b_if),
            cost=link.cost or (default.cost if default and default.cost else DEFAULT_COST),
            mtu=link.mtu or (default.mtu if default and default.mtu else DEFAULT_MTU),
            a_to_b=a_to_b, b_to_a=b_to_a))
    for (path, what), where in shared.items():
        more = f" and {len(where) - 2} more" if len(where) > 2 else ""
        links = "link" if len(where) == 1 else "links"
        issues.append(SpecIssue(f"{what} (on {links} {', '.join(where[:2])}{more})",
                                key_path=path))
    dup = _duplicate_names(names)
    issues += [SpecIssue(f"link name {n!r} is used twice", key_path=("links", i, "name"))
               for i, n in dup]
    return edges, issues


def _duplicate_names(names: list[str]) -> list[tuple[int, str]]:
    seen: set[str] = set()
    out = []
    for i, n in enumerate(names):
        if n in seen:
            out.append((i, n))
        seen.add(n)
    return out
