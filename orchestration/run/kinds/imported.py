"""``kind: training | aicb | chakra | fedavg | hierarchical | gossip``: the workload spec of
workloads/spec.py (validated and built there), plus ``hosts``/``placement`` and
``stragglers``. Hierarchical FL without hosts or placement is placed one cluster per site
(workloads.fl_placement)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, ValidationError

from models.errors import SpecError
from models.plan import LabPlan
from models.schedule import Schedule
from models.specfile import issues_from_validation
from models.unit_fields import SpecModel
from orchestration.run.kinds.common import (
    BuiltWorkload,
    Ctx,
    DataSpec,
    Hierarchy,
    PlacementSpec,
    RingOrder,
    StragglerSpecModel,
    finish,
    guarded,
    hosts_of,
    placement_of,
)
from orchestration.serving.entries import StartMode, WorkloadTransport
from workloads.fl_placement import place_clusters
from workloads.placement import sites_of_plan
from workloads.spec import build_workload, parse_workload

__all__ = ["KINDS", "Entry", "ImportedEntry", "build", "entry_stragglers"]

KINDS = ("training", "aicb", "chakra", "fedavg", "hierarchical", "gossip")


class ImportedEntry(SpecModel):
    """``kind: training | aicb | chakra | fedavg | hierarchical | gossip``: the workload spec of
    workloads/spec.py, plus ``hosts``/``placement`` and ``stragglers`` (checked by
    workloads.spec)."""

    model_config = ConfigDict(extra="allow")
    kind: Literal["training", "aicb", "chakra", "fedavg", "hierarchical", "gossip"]
    start: StartMode = "after_previous"
    transport: WorkloadTransport | None = None
    ring_order: RingOrder = "rank"
    hierarchy: Hierarchy = "site"
    data: DataSpec | None = None


Entry = ImportedEntry


def entry_stragglers(entry: ImportedEntry) -> StragglerSpecModel:
    """The stragglers of an imported entry (carried as an extra key)."""
    return StragglerSpecModel.model_validate((entry.model_extra or {}).get("stragglers") or {})


def _fl_clusters(ctx: Ctx, plan: LabPlan, s: Schedule) -> dict[int, str]:
    """Hierarchical FL: one cluster per site (workloads.fl_placement)."""
    clusters = int(s.meta["clusters"])  # type: ignore[call-overload]
    try:
        return place_clusters(clusters, s.world_size - 1 - clusters, sites_of_plan(plan))
    except SpecError as exc:
        raise ctx.reprefix(exc) from None


def _placement(ctx: Ctx, data: object) -> PlacementSpec:
    """The entry's ``placement`` (an extra key), errors at ``workloads[i].placement.<key>``."""
    try:
        return PlacementSpec.model_validate(data or {})
    except ValidationError as exc:
        raise SpecError(issues_from_validation(exc, PlacementSpec, ctx.source,
                                               (*ctx.prefix, "placement"))) from None


def _schedule(ctx: Ctx, e: ImportedEntry) -> Schedule:
    data = {k: v for k, v in (e.model_extra or {}).items()
            if k not in ("hosts", "placement", "stragglers")}
    spec = parse_workload({"kind": e.kind, **data}, file=ctx.source, prefix=ctx.prefix)
    return build_workload(spec, base_dir=Path(ctx.base_dir), file=ctx.source,
                          prefix=ctx.prefix)


def build(e: ImportedEntry, ctx: Ctx, plan: LabPlan) -> BuiltWorkload:
    """The spec's schedule, placed on ``hosts``, by ``placement``, or (hierarchical) by site."""
    def run() -> tuple[StragglerSpecModel, Schedule, dict[int, str]]:
        strag = entry_stragglers(e)
        extra = e.model_extra or {}
        schedule = _schedule(ctx, e)
        hosts = hosts_of(ctx, plan, list(extra["hosts"])) if extra.get("hosts") else None
        placement = _fl_clusters(ctx, plan, schedule) if hosts is None and not \
            extra.get("placement") and schedule.meta.get("kind") == "hierarchical" else \
            placement_of(ctx, plan, schedule.world_size, hosts,
                         _placement(ctx, extra.get("placement")), schedule)
        return strag, schedule, placement
    strag, schedule, placement = guarded(ctx, run)
    return finish(ctx, schedule, placement, strag, e.ring_order, e.hierarchy)
