"""``leaf_spine``: one routed leaf-spine fabric (Clos), hosts under leaves, ECMP over spines."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, validate_call

from topologies.generators._build import Builder
from topologies.spec import TopologySpec

__all__ = ["leaf_spine", "add_fabric"]


def add_fabric(b: Builder, prefix: str, spines: int, leaves: int, hosts_per_leaf: int,
               fabric: str | None, host_link: str | None, ecmp_hash: str) -> list[str]:
    """Add a routed fabric to ``b``: spines ``{prefix}s1..``, leaves ``{prefix}l1..``, hosts
    ``{prefix}l<j>-h<k>``; every leaf links to every spine (``fabric`` profile), hosts to their
    leaf (``host_link`` profile, ``up`` = host -> leaf). Host links come first, leaf by leaf, so
    each leaf's host subnets are contiguous. Returns the spine names."""
    spine_names = [b.node(f"{prefix}s{i}", "router", ecmp_hash=ecmp_hash)
                   for i in range(1, spines + 1)]
    leaf_names = [b.node(f"{prefix}l{j}", "router", ecmp_hash=ecmp_hash)
                  for j in range(1, leaves + 1)]
    for leaf in leaf_names:
        for k in range(1, hosts_per_leaf + 1):
            b.link(b.node(f"{leaf}-h{k}", "host"), leaf, profile=host_link)
    for leaf in leaf_names:
        for spine in spine_names:
            b.link(leaf, spine, profile=fabric)
    return spine_names


@validate_call
def leaf_spine(spines: int = Field(default=4, ge=1, le=64),
               leaves: int = Field(default=16, ge=1, le=256),
               hosts_per_leaf: int = Field(default=16, ge=1, le=256),
               fabric: str | None = None, host_link: str | None = None,
               ecmp_hash: Literal["l3", "l4"] = "l4", name: str = "leaf-spine") -> TopologySpec:
    """One DC: ``leaves`` x ``hosts_per_leaf`` hosts, every leaf linked to every spine.

    Defaults give the benchmark fabric: 16 leaves x 16 hosts, 4 spines = 256 hosts, 64 fabric
    links. fabric/host_link: profile names (None: unshaped); ecmp_hash: routers' multipath hash.
    Leaves and spines are routers, so the fabric is loop-free at L2 and a leaf reaches another
    leaf's hosts over every spine (ECMP).
    """
    b = Builder()
    add_fabric(b, "", spines, leaves, hosts_per_leaf, fabric, host_link, ecmp_hash)
    return b.spec(name, f"leaf-spine: {spines} spines, {leaves} leaves x {hosts_per_leaf} hosts")
