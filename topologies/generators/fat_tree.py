"""``fat_tree``: the k-ary fat-tree (Al-Fares et al., "A Scalable, Commodity Data Center
Network Architecture", SIGCOMM 2008, section 3.2): three tiers of k-port switches."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, validate_call

from topologies.generators._build import Builder, GeneratorParamError
from topologies.spec import TopologySpec

__all__ = ["fat_tree"]


@validate_call
def fat_tree(k: int = Field(default=4, ge=2, le=16), fabric: str | None = None,
             host_link: str | None = None, ecmp_hash: Literal["l3", "l4"] = "l4",
             name: str = "fat-tree") -> TopologySpec:
    """``k`` pods ``p1..``, each with k/2 edge routers ``p<i>e<j>`` and k/2 aggregation routers
    ``p<i>a<j>``; (k/2)^2 core routers ``c<m>``; k/2 hosts ``p<i>e<j>-h<n>`` per edge router:
    k^3/4 hosts in all. Every edge router links to every aggregation router of its pod;
    aggregation router j of every pod links to core routers (j-1)*k/2+1 .. j*k/2. All
    switches are routers, so every host pair in different pods has (k/2)^2 equal-cost paths.

    Raises :class:`GeneratorParamError` (parameter ``k``) when k is odd.
    """
    if k % 2:
        raise GeneratorParamError("k", f"k={k} is odd; a k-ary fat-tree needs an even k "
                                       f"(e.g. {k - 1} or {k + 1})")
    half = k // 2
    b = Builder()
    cores = [b.node(f"c{m}", "router", ecmp_hash=ecmp_hash) for m in range(1, half * half + 1)]
    for p in range(1, k + 1):
        aggs = [b.node(f"p{p}a{j}", "router", ecmp_hash=ecmp_hash) for j in range(1, half + 1)]
        for j in range(1, half + 1):
            edge = b.node(f"p{p}e{j}", "router", ecmp_hash=ecmp_hash)
            for n in range(1, half + 1):
                b.link(b.node(f"{edge}-h{n}", "host"), edge, profile=host_link)
            for agg in aggs:
                b.link(edge, agg, profile=fabric)
        for j, agg in enumerate(aggs):
            for core in cores[j * half:(j + 1) * half]:
                b.link(agg, core, profile=fabric)
    return b.spec(name, f"{k}-ary fat-tree: {k ** 3 // 4} hosts, {k} pods, "
                        f"{half * half} core routers")
