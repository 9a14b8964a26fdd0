"""containerlab's node settings with its own precedence: node > group > kind > defaults.

Follows containerlab's ``types/topology.go`` (srl-labs/containerlab @ 39ff2b7): a node's kind
is its own, else its group's, else the group named in ``defaults.group``, else
``defaults.kind``; its group is its own, else its kind's (``kinds.<kind>.group``), else
``defaults.group``; any other scalar is taken from the node, its group, its kind, then the
defaults (first one set wins); maps (labels, env, sysctls) are merged key by key with the
same order of precedence. A group named by a node but not defined under ``topology.groups``
is legal (it only labels the node) and contributes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClabNode", "resolve_nodes", "CONTAINER_SETTINGS"]

# Settings that only matter to a container runtime; aitb runs no images, so they are ignored
# (reported once, as a summary).
CONTAINER_SETTINGS = (
    "image", "cmd", "entrypoint", "exec", "binds", "env", "env-files", "ports", "user",
    "startup-config", "mgmt-ipv4", "mgmt-ipv6", "cpu", "cpu-set", "memory", "dns", "aliases",
    "healthcheck", "license", "publish", "devices", "cap-add", "extras", "config", "stages",
    "certificate", "wait-for", "runtime", "restart-policy", "shm-size", "type",
)


@dataclass(frozen=True, slots=True)
class ClabNode:
    """A containerlab node after precedence: name, kind, group, image, labels, network mode,
    and the container-only settings it has (for the 'ignored' summary)."""

    name: str
    kind: str | None
    group: str | None
    image: str | None
    labels: Mapping[str, str] = field(default_factory=dict)
    network_mode: str | None = None
    container_settings: tuple[str, ...] = ()


def _is_set(value: Any) -> bool:
    """containerlab's 'set' test: not empty (None, "", [] and {} count as unset)."""
    return value is not None and value != "" and value != [] and value != {}


class _Levels:
    """The four levels of one topology, each a mapping (missing ones empty)."""

    def __init__(self, topology: Mapping[str, Any]) -> None:
        self.defaults: Mapping[str, Any] = topology.get("defaults") or {}
        self.kinds: Mapping[str, Any] = topology.get("kinds") or {}
        self.groups: Mapping[str, Any] = topology.get("groups") or {}
        self.nodes: Mapping[str, Any] = topology.get("nodes") or {}

    def node(self, name: str) -> Mapping[str, Any]:
        return self.nodes.get(name) or {}

    def group(self, name: str | None) -> Mapping[str, Any]:
        return (self.groups.get(name) or {}) if name else {}

    def kind_def(self, name: str | None) -> Mapping[str, Any]:
        return (self.kinds.get(name) or {}) if name else {}

    def kind_of(self, name: str) -> str | None:
        node = self.node(name)
        return (node.get("kind") or self.group(node.get("group")).get("kind")
                or self.group(self.defaults.get("group")).get("kind")
                or self.defaults.get("kind"))

    def group_of(self, name: str) -> str | None:
        group = (self.node(name).get("group") or self.kind_def(self.kind_of(name)).get("group")
                 or self.defaults.get("group"))
        return None if group is None else str(group)

    def layers(self, name: str) -> list[Mapping[str, Any]]:
        """Most specific first: node, group, kind, defaults."""
        return [self.node(name), self.group(self.group_of(name)),
                self.kind_def(self.kind_of(name)), self.defaults]

    def scalar(self, name: str, key: str) -> Any:
        for layer in self.layers(name):
            if _is_set(layer.get(key)):
                return layer[key]
        return None

    def merged(self, name: str, key: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for layer in reversed(self.layers(name)):
            out.update({str(k): str(v) for k, v in (layer.get(key) or {}).items()})
        return out


def resolve_nodes(topology: Mapping[str, Any]) -> dict[str, ClabNode]:
    """Name -> :class:`ClabNode` for every node under ``topology.nodes`` (a node with an empty
    body is legal and takes everything from its group, kind and defaults).

    ``topology`` must already be checked to hold mappings where mappings belong (see
    :mod:`topologies.clab.check`). Pure; never raises for a checked input.
    """
    levels = _Levels(topology)
    out = {}
    for name in levels.nodes:
        name = str(name)
        used = tuple(k for k in CONTAINER_SETTINGS if _is_set(levels.scalar(name, k)))
        out[name] = ClabNode(
            name=name, kind=levels.kind_of(name), group=levels.group_of(name),
            image=levels.scalar(name, "image"), labels=levels.merged(name, "labels"),
            network_mode=levels.scalar(name, "network-mode"), container_settings=used)
    return out
