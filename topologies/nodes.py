"""Node settings with precedence node > group > ``defaults.<kind>`` -> :class:`NodePlan`
(without routes; routing adds them)."""

from __future__ import annotations

from typing import Any

from models.plan import NodePlan
from topologies.container_keys import normal_binds
from topologies.spec import NodeSettings, TopologySpec
from topologies.validate import node_kind

__all__ = ["node_plans", "setting_key_path"]


def _pick(layers: list[NodeSettings | None], key: str) -> Any:
    """The value of ``key`` in the most specific layer that sets it (layers: most specific
    first), else None."""
    for layer in layers:
        value = getattr(layer, key, None) if layer is not None else None
        if value is not None:
            return value
    return None


def _merged_map(layers: list[NodeSettings | None], key: str) -> dict[str, str]:
    """Dict settings merged key by key; the most specific layer wins per key."""
    out: dict[str, str] = {}
    for layer in reversed(layers):
        values = getattr(layer, key, None) if layer is not None else None
        out.update({k: str(v) for k, v in (values or {}).items()})
    return out


def setting_key_path(spec: TopologySpec, name: str, key: str) -> tuple[str, ...]:
    """Key path of the setting ``key`` node ``name`` takes (precedence as in
    :func:`node_plans`): ``("nodes", name, key)``, ``("groups", group, key)`` or
    ``("defaults", kind, key)``, whichever layer sets it first; the node's own path if
    none does."""
    node = spec.nodes[name]
    layers: list[tuple[tuple[str, ...], NodeSettings | None]] = [
        (("nodes", name), node),
        (("groups", str(node.group)), spec.groups.get(node.group) if node.group else None),
        (("defaults", str(node_kind(spec, name))),
         getattr(spec.defaults, str(node_kind(spec, name)), None))]
    for where, layer in layers:
        if layer is not None and getattr(layer, key, None) is not None:
            return (*where, key)
    return ("nodes", name, key)


def node_plans(spec: TopologySpec) -> dict[str, NodePlan]:
    """Name -> :class:`NodePlan` (no routes yet) for every node of a checked ``spec``."""
    out = {}
    for name, node in spec.nodes.items():
        kind = node_kind(spec, name)
        group = spec.groups.get(node.group) if node.group else None
        layers: list[NodeSettings | None] = [node, group, getattr(spec.defaults, str(kind))]
        forward = bool(_pick(layers, "forward"))
        lb = _pick(layers, "load_balancing") or (
            spec.load_balancing if kind == "router" or forward else None) or "flow"
        gap = _pick(layers, "flowlet_gap")
        gap = spec.flowlet_gap if gap is None else gap
        out[name] = NodePlan(
            name=name, kind=kind,  # type: ignore[arg-type]
            sysctls=_merged_map(layers, "sysctls"),
            tcp_congestion_control=_pick(layers, "tcp_congestion_control"),
            ecmp_hash=_pick(layers, "ecmp_hash") or "l3",
            stp=bool(_pick(layers, "stp")),
            forward=forward,
            ranks_per_host=_pick(layers, "ranks_per_host") if kind == "host" else None,
            load_balancing=lb,
            flowlet_gap_s=float(gap) if lb == "flowlet" else None,  # DurationS
            datapath=_pick(layers, "datapath") or "bridge",
            flows=tuple(_pick(layers, "flows") or ()),
            ovs_datapath=_pick(layers, "ovs_datapath") or "auto",
            group=node.group,
            labels=_merged_map(layers, "labels"),
            image=_pick(layers, "image"),
            command=tuple(_pick(layers, "command") or ()) or None,
            environment=_merged_map(layers, "environment"),
            binds=normal_binds(_merged_map(layers, "binds")),
        )
    return out
