"""``edge_hierarchy``: a clustered edge layout, far edge -> near edge -> cloud DC."""

from __future__ import annotations

from pydantic import Field, validate_call

from topologies.generators._build import Builder
from topologies.spec import TopologySpec

__all__ = ["edge_hierarchy"]


def _hosts(b: Builder, router: str, n: int, profile: str | None, site: str) -> None:
    for k in range(1, n + 1):
        b.link(b.node(f"{router}-h{k}", "host", labels={"site": site}), router, profile=profile)


@validate_call
def edge_hierarchy(near_edges: int = Field(default=2, ge=1, le=64),
                   far_per_near: int = Field(default=2, ge=1, le=64),
                   hosts_per_far: int = Field(default=1, ge=1, le=64),
                   hosts_per_near: int = Field(default=1, ge=0, le=64),
                   cloud_hosts: int = Field(default=1, ge=1, le=256),
                   access: str | None = None, metro: str | None = None,
                   cloud_link: str | None = None, device_link: str | None = None,
                   name: str = "edge-tiers") -> TopologySpec:
    """Three tiers of routers: ``cloud`` (the DC) with ``cloud_hosts`` hosts ``cloud-h<k>``
    (``cloud_link``); ``near_edges`` near-edge routers ``ne<i>`` linked to it (``metro``,
    ``up`` = towards the cloud), each with ``hosts_per_near`` edge servers ``ne<i>-h<k>``;
    under near edge i, ``far_per_near`` far-edge routers ``fe<i>-<j>`` (``access``), each with
    ``hosts_per_far`` devices ``fe<i>-<j>-h<k>`` (``device_link``). Every node is labelled
    with its site (``cloud``, ``ne<i>``, ``fe<i>-<j>``) for placement and hierarchical
    collectives. Traffic between far edges of one near edge stays below it."""
    b = Builder()
    b.node("cloud", "router", labels={"site": "cloud"})
    _hosts(b, "cloud", cloud_hosts, cloud_link, "cloud")
    for i in range(1, near_edges + 1):
        near = b.node(f"ne{i}", "router", labels={"site": f"ne{i}"})
        b.link(near, "cloud", profile=metro)
        _hosts(b, near, hosts_per_near, device_link, near)
        for j in range(1, far_per_near + 1):
            far = b.node(f"fe{i}-{j}", "router", labels={"site": f"fe{i}-{j}"})
            b.link(far, near, profile=access)
            _hosts(b, far, hosts_per_far, device_link, far)
    return b.spec(name, f"edge tiers: cloud, {near_edges} near edges x {far_per_near} far "
                        "edges")
