"""``edge_star``: edge sites around an aggregator, each behind its own access link."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, validate_call

from topologies.generators._build import Builder
from topologies.spec import TopologySpec

__all__ = ["edge_star"]


def _add_site(b: Builder, i: int, hosts: int, site_router: bool, access: str | None) -> None:
    site = f"site{i}"
    if not site_router:
        b.link(b.node(site, "host"), "agg", profile=access)
        return
    b.node(site, "router")
    b.node(f"{site}-sw", "switch")
    b.link(site, f"{site}-sw")
    for k in range(1, hosts + 1):
        b.link(b.node(f"{site}-h{k}", "host"), f"{site}-sw")
    b.link(site, "agg", profile=access)


@validate_call
def edge_star(sites: int = Field(default=4, ge=1, le=512),
              hosts_per_site: int = Field(default=1, ge=1, le=256),
              access: str | Annotated[list[str | None], Field(min_length=1)] | None = "edge-lte",
              servers: int = Field(default=1, ge=1, le=64),
              core: str | None = None, site_router: bool | None = None,
              name: str = "edge-star") -> TopologySpec:
    """Edge sites ``site1..`` around aggregator router ``agg``, with ``servers`` hosts
    ``srv1..`` (aggregator / parameter servers) behind it on ``core``-shaped links.

    A site is one host ``site<i>`` (hosts_per_site 1), or a router ``site<i>`` with a site
    switch ``site<i>-sw`` and hosts ``site<i>-h<k>`` (when ``site_router`` or hosts_per_site >
    1). access: the access profile of every site, or a list used site by site in turn
    (heterogeneous sites, e.g. ["edge-lte", "edge-lte", "edge-5g"]); ``up`` = site -> agg.
    The aggregator is a router because hosts do not forward: sites reach each other through it.
    """
    b = Builder()
    b.node("agg", "router")
    for s in range(1, servers + 1):
        b.link(b.node(f"srv{s}", "host"), "agg", profile=core)
    profiles = access if isinstance(access, list) else [access]
    routed = site_router if site_router is not None else hosts_per_site > 1
    for i in range(1, sites + 1):
        _add_site(b, i, hosts_per_site, routed, profiles[(i - 1) % len(profiles)])
    return b.spec(name, f"{sites} edge sites x {hosts_per_site} hosts around an aggregator")
