"""Experiment workload entries -> (Schedule, placement, stragglers), all checked before a lab
exists. Pure: reads only the workload files an entry names (AICB files). Each kind's
knowledge lives in its module of :mod:`orchestration.run.kinds`; this is the dispatch."""

from __future__ import annotations

from pathlib import Path

from models.plan import LabPlan
from orchestration.run import kinds
from orchestration.run.kinds.common import BuiltWorkload, Ctx

__all__ = ["BuiltWorkload", "build_entry"]


def build_entry(entry: object, index: int, *, plan: LabPlan, source: str, base_dir: Path,
                seed: int, scale: float, pid_by: str = "site",
                metric: str = "routingcost") -> BuiltWorkload:
    """Build workload ``index`` (an entry of :data:`orchestration.run.kinds.WorkloadEntry`)
    of an experiment for ``plan``.

    ``scale`` (>= 1) divides every size (see orchestration/run/experiment.py); ``seed`` seeds
    patterns and stragglers. Raises :class:`~models.errors.SpecError` naming ``source`` and
    ``workloads[index].<key>`` for a bad unit, an unknown host, too few hosts, or an invalid
    schedule. ``pid_by`` and ``metric`` choose the ALTO cost map (models.alto) that the
    ``cost_map`` keys use (workloads.cost_aware).
    """
    ctx = Ctx(source, index, plan, base_dir, seed, scale, pid_by, metric)
    return kinds.module(entry.kind).build(entry, ctx, plan)  # type: ignore[attr-defined]
