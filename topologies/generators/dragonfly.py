"""``dragonfly``: the dragonfly of Kim, Dally, Scott and Abts ("Technology-Driven, Highly-
Scalable Dragonfly Topology", ISCA 2008): groups of a routers, fully connected inside a
group, h global links per router between groups, p hosts per router."""

from __future__ import annotations

from itertools import combinations
from typing import Literal

from pydantic import Field, validate_call

from topologies.generators._build import Builder, GeneratorParamError, add_routed_graph
from topologies.spec import TopologySpec

__all__ = ["dragonfly", "global_links"]


def global_links(a: int, h: int, g: int) -> list[tuple[int, int, int, int]]:
    """The global links of ``g`` groups as (group i, router r, group j, router s), from 0.

    Group i has a*h global ports; port k belongs to router k // h (the consecutive
    arrangement) and leads to group (i + k mod (g-1) + 1) mod g, arriving there on port
    c*(g-1) + g - o - 1 (c = k // (g-1), o = k mod (g-1) + 1), so every pair of groups gets
    a*h/(g-1) links; with g = a*h + 1 (the balanced maximum) exactly one."""
    out = []
    for i in range(g):
        for k in range(a * h):
            c, o = divmod(k, g - 1)
            j = (i + o + 1) % g
            if i < j:
                peer = c * (g - 1) + g - (o + 1) - 1
                out.append((i, k // h, j, peer // h))
    return out


def _check(a: int, h: int, g: int) -> None:
    ports = a * h
    if not 2 <= g <= ports + 1 or ports % (g - 1):
        valid = [d + 1 for d in range(1, ports + 1) if ports % d == 0]
        raise GeneratorParamError("groups", f"groups={g} cannot be joined evenly: each group has "
                                            f"a*h = {ports} global ports to spread over "
                                            f"groups-1 other groups; valid groups: {valid}")


@validate_call
def dragonfly(a: int = Field(default=4, ge=1, le=32), h: int = Field(default=2, ge=1, le=16),
              p: int = Field(default=2, ge=1, le=32), groups: int | None = None,
              fabric: str | None = None, global_link: str | None = None,
              host_link: str | None = None, ecmp_hash: Literal["l3", "l4"] = "l4",
              name: str = "dragonfly") -> TopologySpec:
    """``groups`` groups (default a*h + 1, one global link per group pair) of ``a`` routers
    ``g<i>r<j>`` (from 1), every pair in a group linked (``fabric``), each router with ``h``
    global links (``global_link``, arrangement :func:`global_links`) and ``p`` hosts
    ``g<i>r<j>-h<k>``. Minimal routes: local, global, local hop (ECMP where several tie).

    Raises :class:`GeneratorParamError` (``groups``) when the global ports cannot be spread
    evenly over the other groups, listing the valid group counts.
    """
    g = a * h + 1 if groups is None else groups
    _check(a, h, g)
    name_of = [[f"g{i + 1}r{r + 1}" for r in range(a)] for i in range(g)]
    b = Builder()
    local = [(x, y) for grp in name_of for x, y in combinations(grp, 2)]
    add_routed_graph(b, [r for grp in name_of for r in grp], local, p, fabric, host_link,
                     ecmp_hash)
    for i, r, j, s in global_links(a, h, g):
        b.link(name_of[i][r], name_of[j][s], profile=global_link)
    return b.spec(name, f"dragonfly: {g} groups x {a} routers x {p} hosts, h={h}")
