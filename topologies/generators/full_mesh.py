"""``full_mesh``: n routers, every pair linked, each with its host(s)."""

from __future__ import annotations

from itertools import combinations
from typing import Literal

from pydantic import Field, validate_call

from topologies.generators._build import Builder, add_routed_graph
from topologies.spec import TopologySpec

__all__ = ["full_mesh"]


@validate_call
def full_mesh(n: int = Field(default=4, ge=2, le=64),
              hosts_per_router: int = Field(default=1, ge=1, le=64), fabric: str | None = None,
              host_link: str | None = None, ecmp_hash: Literal["l3", "l4"] = "l4",
              direct: bool = False,
              name: str = "full-mesh") -> TopologySpec:
    """Routers ``m1..m<n>``, one link per pair (n(n-1)/2), ``hosts_per_router`` hosts
    ``m<i>-h<k>`` each: every host pair is two router hops apart. With
    ``direct`` the positions ``m<i>`` are forwarding hosts, each pair one link apart."""
    routers = [f"m{i}" for i in range(1, n + 1)]
    b = Builder()
    add_routed_graph(b, routers, list(combinations(routers, 2)), hosts_per_router, fabric,
                     host_link, ecmp_hash, direct)
    return b.spec(name, f"full mesh of {n} routers")
