"""``hypercube``: a d-dimensional binary hypercube of routers, each with its host(s)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, validate_call

from topologies.generators._build import Builder, add_routed_graph
from topologies.spec import TopologySpec

__all__ = ["hypercube"]


@validate_call
def hypercube(d: int = Field(default=3, ge=1, le=10),
              hosts_per_router: int = Field(default=1, ge=1, le=64), fabric: str | None = None,
              host_link: str | None = None, ecmp_hash: Literal["l3", "l4"] = "l4",
              direct: bool = False,
              name: str = "hypercube") -> TopologySpec:
    """2^d routers ``q<i>`` (i from 0, its bits the coordinates); ``q<i>`` links to every
    ``q<j>`` whose index differs in one bit (d links per router); ``hosts_per_router`` hosts
    ``q<i>-h<k>`` each. Host pairs at Hamming distance m have m! shortest paths (ECMP).
    With ``direct`` the positions ``q<i>`` are forwarding hosts wired to each other (no
    routers)."""
    n = 1 << d
    routers = [f"q{i}" for i in range(n)]
    edges = [(routers[i], routers[i ^ (1 << bit)]) for i in range(n) for bit in range(d)
             if i < i ^ (1 << bit)]
    b = Builder()
    add_routed_graph(b, routers, edges, hosts_per_router, fabric, host_link, ecmp_hash, direct)
    return b.spec(name, f"{d}-dimensional hypercube: {n} routers")
