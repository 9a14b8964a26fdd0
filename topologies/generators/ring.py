"""``ring``: n routers in a ring, each with its host(s)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, validate_call

from topologies.generators._build import Builder, add_routed_graph
from topologies.spec import TopologySpec

__all__ = ["ring"]


@validate_call
def ring(n: int = Field(default=8, ge=3, le=512),
         hosts_per_router: int = Field(default=1, ge=1, le=64), fabric: str | None = None,
         host_link: str | None = None, ecmp_hash: Literal["l3", "l4"] = "l4",
         direct: bool = False,
         name: str = "ring") -> TopologySpec:
    """Routers ``r1..r<n>``, ``r<i>`` linked to ``r<i+1>`` and ``r<n>`` to ``r1``;
    ``hosts_per_router`` hosts ``r<i>-h<k>`` each. Opposite routers of an even ring are
    reached both ways round (ECMP). With ``direct`` the
    positions ``r<i>`` are forwarding hosts (no routers)."""
    routers = [f"r{i}" for i in range(1, n + 1)]
    b = Builder()
    add_routed_graph(b, routers, [(routers[i], routers[(i + 1) % n]) for i in range(n)],
                     hosts_per_router, fabric, host_link, ecmp_hash, direct)
    return b.spec(name, f"ring of {n} routers")
