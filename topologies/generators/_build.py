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
