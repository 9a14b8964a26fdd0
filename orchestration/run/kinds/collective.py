"""``kind: collective``: one collective over all placed ranks, ``iterations`` times, each after
``compute`` of compute time; the algorithm from traffic_gen.algorithms (checked here)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from models.plan import LabPlan
from models.schedule import COLLECTIVES, Collective, Compute, Group, Op, Schedule
from models.specfile import MAX_ITERATIONS, MAX_RANKS
from models.unit_fields import Duration, Size
from models.units import plain
from orchestration.run.kinds.common import (
    BuiltWorkload,
    Common,
    Ctx,
    finish,
    guarded,
    placement_of,
    world_hosts,
)
from traffic_gen.algorithms import REGISTRY

__all__ = ["KINDS", "Entry", "CollectiveEntry", "build"]

KINDS = ("collective",)


class CollectiveEntry(Common):
    """``kind: collective``: one collective over all placed ranks, ``iterations`` times, each
    after ``compute`` of compute time."""

    kind: Literal["collective"]
    op: str
    algorithm: str | None = None
    size: Size
    chunk: Size | None = None
    ranks: Annotated[int, Field(gt=0, le=MAX_RANKS)] | None = None
    iterations: int = Field(1, ge=1, le=MAX_ITERATIONS, strict=True)
    compute: Duration | None = None

    @model_validator(mode="after")
    def _known_op(self) -> CollectiveEntry:
        if self.op not in COLLECTIVES:
            raise ValueError(f"unknown collective {self.op!r}; known: {', '.join(COLLECTIVES)}")
        return self


Entry = CollectiveEntry


def _schedule(ctx: Ctx, plan: LabPlan, e: CollectiveEntry) -> tuple[Schedule, list[str]]:
    hosts = world_hosts(ctx, plan, e.hosts)
    world = e.ranks or len(hosts)
    if world < 2:
        raise ctx.error("hosts", "a collective needs at least 2 ranks")
    size, chunk = int(e.size), plain(e.chunk)  # read with the spec: SizeBytes
    known = REGISTRY.get(e.op, {})
    if e.algorithm is not None and e.algorithm not in known:
        raise ctx.error("algorithm", f"unknown algorithm {e.algorithm!r} for {e.op}; known: "
                                     f"{', '.join(known)}")
    ops: list[Op] = []
    if e.compute:
        ops.append(Compute(float(e.compute), label="compute"))
    ops.append(Collective(e.op, "world", size, e.algorithm, chunk, label=e.op))  # type: ignore[arg-type]
    group = Group("world", "world", tuple(range(world)))
    name = e.name or f"{e.op}-{e.algorithm or 'default'}"
    return Schedule(name, world, {"world": group}, tuple(ops), iterations=e.iterations), hosts


def build(e: CollectiveEntry, ctx: Ctx, plan: LabPlan) -> BuiltWorkload:
    """The collective's schedule, ranks on ``hosts`` in order (or all the lab's hosts), or,
    without ``hosts``, by ``placement`` (a policy over all the lab's hosts)."""
    def run() -> tuple[Schedule, dict[int, str]]:
        schedule, hosts = _schedule(ctx, plan, e)
        if e.hosts is None and e.placement is not None:
            return schedule, placement_of(ctx, plan, schedule.world_size, None, e.placement,
                                          schedule)
        return schedule, placement_of(ctx, plan, schedule.world_size, hosts, None)
    schedule, placement = guarded(ctx, run)
    return finish(ctx, schedule, placement, e.stragglers, e.ring_order, e.hierarchy)
