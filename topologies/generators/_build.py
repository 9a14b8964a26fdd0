"""A small builder that generators use to assemble a :class:`TopologySpec`."""

from __future__ import annotations

from typing import Any

from topologies.spec import Defaults, LinkSpec, NodeSpec, ProfileSpec, TopologySpec

__all__ = ["Builder"]


class Builder:
    """Collects nodes and links in order; :meth:`spec` returns the validated spec."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeSpec] = {}
        self.links: list[LinkSpec] = []

    def node(self, name: str, kind: str, **settings: Any) -> str:
        """Add node ``name`` of ``kind`` (host, switch, router); returns the name."""
        self.nodes[name] = NodeSpec(kind=kind, **settings)  # type: ignore[arg-type]
        return name

    def link(self, a: str, b: str, profile: str | None = None, **settings: Any) -> None:
        """Add a link ``a`` -- ``b`` (``node`` or ``node:ifname``) with an optional profile."""
        self.links.append(LinkSpec(endpoints=(a, b), profile=profile, **settings))

    def spec(self, name: str, description: str, profiles: dict[str, ProfileSpec] | None = None,
             defaults: Defaults | None = None) -> TopologySpec:
        """The assembled :class:`TopologySpec`."""
        return TopologySpec(name=name, description=description, nodes=self.nodes,
                            links=self.links, profiles=profiles or {},
                            defaults=defaults or Defaults())


class GeneratorParamError(ValueError):
    """Parameters a generator cannot build: ``param`` names the parameter, the message says
    what would be valid. :func:`topologies.generators.build_spec` turns it into one
    :class:`SpecIssue` at ``generator.params.<param>`` naming the generator."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def add_routed_graph(b: Builder, routers: list[str], edges: list[tuple[str, str]],
                     hosts_per_router: int = 1, fabric: str | None = None,
                     host_link: str | None = None, ecmp_hash: str = "l4",
                     direct: bool = False) -> None:
    """Add ``routers`` (router nodes), one link per pair in ``edges`` (``fabric`` profile) and
    ``hosts_per_router`` hosts ``<router>-h<k>`` behind each router (``host_link`` profile,
    ``up`` = host -> router): a router per position with its host(s) behind it. With
    ``direct`` the positions are forwarding hosts wired to each other (``forward: true``, no
    routers, no hosts behind them): a direct-connect fabric as TPU-style pods are. Routes are
    shortest paths with ECMP (topologies/routing.py).

    Raises :class:`GeneratorParamError` (``hosts_per_router``) for ``direct`` with other than
    one host per position."""
    if direct:
        if hosts_per_router != 1:
            raise GeneratorParamError("hosts_per_router", f"hosts_per_router={hosts_per_router}"
                                      " with direct: true; a direct-connect position is itself"
                                      " the host (leave hosts_per_router at 1)")
        for r in routers:
            b.node(r, "host", forward=True, ecmp_hash=ecmp_hash)
        for x, y in edges:
            b.link(x, y, profile=fabric)
        return
    for r in routers:
        b.node(r, "router", ecmp_hash=ecmp_hash)
    for r in routers:
        for k in range(1, hosts_per_router + 1):
            b.link(b.node(f"{r}-h{k}", "host"), r, profile=host_link)
    for x, y in edges:
        b.link(x, y, profile=fabric)
