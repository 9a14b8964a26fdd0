"""``kind: inference`` (LLM serving requests, TTFT and per-token latency) and ``kind:
background`` (an offered load on the links): entries in orchestration/serving/entries.py,
built by orchestration/serving/build.py from workloads.inference and workloads.background."""

from __future__ import annotations

from models.plan import LabPlan
from models.stragglers import StragglerSpec
from orchestration.run.kinds.common import BuiltWorkload, Ctx
from orchestration.serving.build import build_serving
from orchestration.serving.entries import BackgroundEntry, InferenceEntry

__all__ = ["KINDS", "Entry", "build"]

KINDS = ("inference", "background")
Entry = InferenceEntry | BackgroundEntry


def build(e: InferenceEntry | BackgroundEntry, ctx: Ctx, plan: LabPlan) -> BuiltWorkload:
    """The serving schedule (scaled by the experiment's scale) and its placement."""
    schedule, placement = build_serving(e, ctx.index, plan=plan, source=ctx.source,
                                        seed=ctx.seed, scale=ctx.scale)
    return BuiltWorkload(schedule.name, schedule, placement, StragglerSpec(seed=ctx.seed))
