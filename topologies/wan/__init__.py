"""Real WAN maps (Internet Topology Zoo GraphML/GML) as aitb topologies: PoPs become routers
with hosts behind them, links get delays from great-circle distances and rates from the map;
fabrics from the generators can be attached at chosen PoPs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.errors import SpecIssue
from models.plan import LabPlan
from topologies.resolve import resolve
from topologies.spec import TopologySpec
from topologies.wan.build import (
    EARTH_RADIUS_KM,
    FIBRE_US_PER_KM,
    Attachment,
    WanOptions,
    great_circle_km,
    wan_topology,
)
from topologies.wan.reader import Pop, WanEdge, WanGraph, read_wan

__all__ = ["WanImport", "import_wan", "read_wan", "wan_topology", "WanOptions", "Attachment",
           "Pop", "WanEdge", "WanGraph", "great_circle_km", "FIBRE_US_PER_KM",
           "EARTH_RADIUS_KM"]


@dataclass(frozen=True, slots=True)
class WanImport:
    """``topology``: the mapping a topology file holds; ``plan``: it resolved; ``report``:
    PoPs without coordinates, parallel links, attachments."""

    topology: dict[str, Any]
    plan: LabPlan
    report: list[SpecIssue]


def import_wan(path: str | Path, options: WanOptions | None = None) -> WanImport:
    """Read the map at ``path`` and build its topology under ``options``.

    Raises :class:`SpecError` (file, node or edge, key) for a bad map, a bad option, or a
    topology that does not resolve; creates nothing.
    """
    source = str(path)
    topo, report = wan_topology(read_wan(path), options or WanOptions(), source)
    plan = resolve(TopologySpec.model_validate(topo), source)
    return WanImport(topo, plan, report)
