"""``kind: training | aicb | chakra | fedavg | hierarchical | gossip``: the workload spec of
workloads/spec.py (validated and built there), plus ``hosts``/``placement`` and
``stragglers``. Hierarchical FL without hosts or placement is placed one cluster per site
(workloads.fl_placement)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict

from models.errors import SpecError
from models.plan import LabPlan
from models.schedule import Schedule
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
    # the keys of every kind, validated here like the collective kinds' (the kind's own keys
    # are the extras, validated by workloads.spec)
    hosts: list[str] | None = None
    placement: PlacementSpec | None = None
    stragglers: StragglerSpecModel | None = None


Entry = ImportedEntry
_OWN_KEYS = ("hosts", "placement", "stragglers")


def entry_stragglers(entry: ImportedEntry) -> StragglerSpecModel:
    """The stragglers of an imported entry (none given: no straggler)."""
    return entry.stragglers or StragglerSpecModel()


def _fl_clusters(ctx: Ctx, plan: LabPlan, s: Schedule) -> dict[int, str]:
    """Hierarchical FL: one cluster per site (workloads.fl_placement)."""
    clusters = int(s.meta["clusters"])  # type: ignore[call-overload]
    try:
        return place_clusters(clusters, s.world_size - 1 - clusters, sites_of_plan(plan))
    except SpecError as exc:
        raise ctx.reprefix(exc) from None


def _schedule(ctx: Ctx, e: ImportedEntry) -> Schedule:
    data = {k: v for k, v in (e.model_extra or {}).items() if k not in _OWN_KEYS}
    spec = parse_workload({"kind": e.kind, **data}, file=ctx.source, prefix=ctx.prefix,
                          also_known=[k for k in ImportedEntry.model_fields if k != "kind"])
    return build_workload(spec, base_dir=Path(ctx.base_dir), file=ctx.source,
                          prefix=ctx.prefix)


def build(e: ImportedEntry, ctx: Ctx, plan: LabPlan) -> BuiltWorkload:
    """The spec's schedule, placed on ``hosts``, by ``placement``, or (hierarchical) by site."""
    def run() -> tuple[StragglerSpecModel, Schedule, dict[int, str]]:
        strag = entry_stragglers(e)
        schedule = _schedule(ctx, e)
        hosts = hosts_of(ctx, plan, list(e.hosts)) if e.hosts else None
        placement = _fl_clusters(ctx, plan, schedule) if hosts is None and \
            e.placement is None and schedule.meta.get("kind") == "hierarchical" else \
            placement_of(ctx, plan, schedule.world_size, hosts,
                         e.placement or PlacementSpec(), schedule)
        return strag, schedule, placement
    strag, schedule, placement = guarded(ctx, run)
    return finish(ctx, schedule, placement, strag, e.ring_order, e.hierarchy)
