"""``kind: app``: a real application on several nodes (entry in
orchestration/apps/entries.py, processes planned by orchestration/apps/argv.py); its
schedule is empty, the runner starts the processes instead."""

from __future__ import annotations

from models.plan import LabPlan
from models.schedule import Schedule
from models.stragglers import StragglerSpec
from orchestration.apps.argv import build_app
from orchestration.apps.entries import AppEntry
from orchestration.run.kinds.common import BuiltWorkload, Ctx

__all__ = ["KINDS", "Entry", "build"]

KINDS = ("app",)
Entry = AppEntry


def build(e: AppEntry, ctx: Ctx, plan: LabPlan) -> BuiltWorkload:
    """An empty schedule of the app's ranks and the processes to start (``app``)."""
    app = build_app(e, ctx.index, plan, ctx.source)
    return BuiltWorkload(app.name, Schedule(app.name, len(app.ranks), {}, (),
                                            meta={"kind": "app"}),
                         {r.rank: r.node for r in app.ranks}, StragglerSpec(seed=ctx.seed), app)
