"""What every workload kind of :mod:`orchestration.run.kinds` shares: the entry keys common to
the schedule kinds (placement, stragglers, start), the built result, and the checks that point
errors at ``workloads[i].<key>`` of the experiment file. Pure: nothing runs here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from models.alto import AltoMaps, alto_maps, costs_of
from models.errors import SpecError, SpecIssue
from models.plan import LabPlan
from models.schedule import Schedule, ScheduleError
from models.specfile import MAX_RANKS, issues_from_validation
from models.stragglers import StragglerSpec
from models.unit_fields import SpecModel
from models.units import UnitError
from orchestration.apps.argv import AppPlan
from orchestration.serving.entries import StartMode, WorkloadTransport
from workloads.cost_aware import cost_map_placement, order_rings
from workloads.placement import place, sites_of_plan
from workloads.transform import scale_schedule

__all__ = ["BuiltWorkload", "Ctx", "PlacementSpec", "StragglerSpecModel", "Common", "RingOrder",
           "Hierarchy", "DataSpec",
           "hosts_of", "placement_of", "world_hosts", "stragglers_of", "finish", "guarded"]

_Forbid = ConfigDict(extra="forbid")


class PlacementSpec(SpecModel):
    """Ranks onto hosts: explicit ``hosts`` (rank i on hosts[i]) or a ``policy`` over the
    lab's hosts grouped by site (workloads.placement), or ``cost_map``: the fewest bytes x
    cost of the lab's ALTO cost map (workloads.cost_aware)."""

    model_config = _Forbid
    hosts: list[str] | None = None
    policy: Literal["packed", "spread", "cost_map"] = "packed"
    slots: Annotated[int, Field(gt=0, le=MAX_RANKS)] = 1
    block: Annotated[int, Field(gt=0, le=MAX_RANKS)] = 1


# Sanity bounds, past which a value is a typo, not a straggler: a factor of 1000 makes a
# 1 ms compute op a second; a lognormal sigma of 3 already draws factors of 20 at one sigma
# and 8000 at three (and 1e300 overflowed exp() in the draw).
MAX_STRAGGLER_FACTOR = 1000.0
MAX_LOGNORMAL_SIGMA = 3.0


class StragglerSpecModel(SpecModel):
    """Slow workers: ``fixed`` rank -> compute slowdown factor (> 0, at most
    :data:`MAX_STRAGGLER_FACTOR`), and/or a lognormal factor per rank and compute op with
    ``lognormal_sigma`` (0 to :data:`MAX_LOGNORMAL_SIGMA`; models.stragglers)."""

    model_config = _Forbid
    fixed: dict[int, Annotated[float, Field(gt=0, le=MAX_STRAGGLER_FACTOR)]] = Field(
        default_factory=dict)
    lognormal_sigma: Annotated[float, Field(ge=0, le=MAX_LOGNORMAL_SIGMA)] | None = None


class DataSpec(SpecModel):
    """``data:`` what the workload's bytes are and where they may go (models.locality):
    ``class`` a name (e.g. patient-records), ``allowed_regions`` the node ``region`` labels
    its flows may touch, ``allowed_countries`` optionally the ``country`` labels; ``enforce``
    ``refuse`` (default: a placement whose paths leave them is refused before the run) or
    ``record`` (run anyway; locality.json says what left)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    data_class: str = Field(alias="class", min_length=1)
    allowed_regions: Annotated[list[str], Field(min_length=1)]
    allowed_countries: list[str] | None = None
    enforce: Literal["refuse", "record"] = "refuse"


RingOrder = Literal["rank", "cost_map"]  # communicator order: rank ids, or by the cost map
Hierarchy = Literal["site", "cost_map"]  # hierarchical algorithms group by site, or by PID


class Common(SpecModel):
    """Keys of every entry built here: ``name``, ``start``, ``hosts`` or ``placement``,
    ``stragglers``, ``ring_order`` and ``hierarchy`` (workloads.cost_aware)."""

    model_config = _Forbid
    name: str | None = None
    start: StartMode = "after_previous"
    transport: WorkloadTransport | None = None
    hosts: list[str] | None = None
    placement: PlacementSpec | None = None
    stragglers: StragglerSpecModel = Field(default_factory=StragglerSpecModel)
    ring_order: RingOrder = "rank"
    hierarchy: Hierarchy = "site"
    data: DataSpec | None = None


@dataclass(frozen=True)
class BuiltWorkload:
    """A workload ready to replay: its name, schedule, rank -> host, stragglers; for
    ``kind: app`` the processes to run (``app``; the schedule is then empty)."""

    name: str
    schedule: Schedule
    placement: dict[int, str]
    stragglers: StragglerSpec
    app: AppPlan | None = None
    sites: dict[str, str] | None = None  # host -> sub-group of hierarchical algorithms


class Ctx:
    """Where errors point: the experiment file ``source`` and entry ``index``; ``plan`` (the
    lab), ``base_dir`` (of relative files), ``seed`` and ``scale`` (>= 1) of the experiment;
    ``pid_by`` and ``metric`` choose the ALTO cost map (models.alto) of the ``cost_map`` keys."""

    def __init__(self, source: str, index: int, plan: LabPlan | None = None,
                 base_dir: Any = ".", seed: int = 0, scale: float = 1.0,
                 pid_by: str = "site", metric: str = "routingcost") -> None:
        self.source, self.index, self.prefix = source, index, ("workloads", index)
        self.plan, self.base_dir, self.seed, self.scale = plan, base_dir, seed, scale
        self.pid_by, self.metric = pid_by, metric
        self._maps: AltoMaps | None = None

    def alto(self) -> tuple[dict[str, str], dict[tuple[str, str], float]]:
        """(host -> PID, (PID, PID) -> cost) of the lab's cost map (built on first use)."""
        if self._maps is None:
            if self.plan is None:
                raise self.error((), "the cost_map keys need the lab's plan")
            self._maps = alto_maps(self.plan, self.pid_by, [self.metric])  # type: ignore[arg-type]
        return self._maps.pids, costs_of(self._maps.cost_maps[self.metric])

    def error(self, key: str | tuple[str | int, ...], message: str) -> SpecError:
        """A SpecError at ``workloads[index].<key>``."""
        path = (key,) if isinstance(key, str) else key
        return SpecError(SpecIssue(message, file=self.source, key_path=(*self.prefix, *path)))

    def unit(self, key: str, parse: Any, text: str) -> Any:
        """``parse(text)``, a UnitError becoming a SpecError at ``key``."""
        try:
            return parse(text)
        except UnitError as exc:
            raise self.error(key, str(exc)) from None

    def reprefix(self, exc: SpecError) -> SpecError:
        """``exc``'s issues re-pointed into this entry."""
        return SpecError([SpecIssue(i.message, file=self.source, key_path=(*self.prefix,
                                    *i.key_path)) for i in exc.issues])


def hosts_of(ctx: Ctx, plan: LabPlan, hosts: list[str]) -> list[str]:
    """``hosts`` checked: hosts of ``plan``, none twice, except a server with
    ``ranks_per_host`` N, listed up to N times (one rank per NIC)."""
    known = {n.name: n.ranks_per_host for n in plan.hosts()}
    bad = [h for h in hosts if h not in known]
    if bad:
        raise ctx.error("hosts", f"not hosts of lab {plan.name}: {', '.join(bad)}; hosts are "
                                 f"{', '.join(sorted(known))}")
    over = sorted(h for h in set(hosts) if hosts.count(h) > (known[h] or 1))
    if over:
        h = over[0]
        raise ctx.error("hosts", f"host {h} is listed {hosts.count(h)} times and takes "
                                 f"{known[h] or 1} rank(s) (ranks_per_host: one per NIC); use "
                                 "placement: {slots: N} to put several ranks on one host")
    return hosts


def placement_of(ctx: Ctx, plan: LabPlan, world: int, hosts: list[str] | None,
                 spec: PlacementSpec | None, schedule: Schedule | None = None
                 ) -> dict[int, str]:
    """rank -> host: ``hosts`` in order, else ``spec`` (explicit hosts or a policy; policy
    ``cost_map`` needs the ``schedule`` whose bytes it weighs)."""
    if hosts is not None:
        if len(hosts) < world:
            raise ctx.error("hosts", f"{world} ranks need {world} hosts; {len(hosts)} listed")
        return {r: hosts[r] for r in range(world)}
    spec = spec or PlacementSpec()
    if spec.hosts is not None:
        return placement_of(ctx, plan, world, hosts_of(ctx, plan, spec.hosts), None)
    if spec.policy == "cost_map" and schedule is None:
        raise ctx.error(("placement", "policy"), "cost_map placement needs the workload's "
                                                 "schedule")
    try:
        if spec.policy == "cost_map" and schedule is not None:
            pids, costs = ctx.alto()
            return cost_map_placement(schedule, [h.name for h in plan.hosts()], pids, costs,
                                      slots=spec.slots)
        return place(world, sites_of_plan(plan), spec.policy, slots=spec.slots,
                     block=spec.block, key="placement")
    except SpecError as exc:
        raise ctx.reprefix(exc) from None


def world_hosts(ctx: Ctx, plan: LabPlan, hosts: list[str] | None) -> list[str]:
    """The entry's ``hosts`` (checked), else every host of the lab."""
    if hosts is not None:
        return hosts_of(ctx, plan, hosts)
    return [h.name for h in plan.hosts()]


def stragglers_of(m: StragglerSpecModel, seed: int) -> StragglerSpec:
    """The runtime form of an entry's ``stragglers``."""
    return StragglerSpec(fixed=dict(m.fixed), lognormal_sigma=m.lognormal_sigma, seed=seed)


def finish(ctx: Ctx, schedule: Schedule, placement: dict[int, str],
           strag: StragglerSpecModel, ring_order: RingOrder = "rank",
           hierarchy: Hierarchy = "site") -> BuiltWorkload:
    """Scale ``schedule`` by ``ctx.scale`` and check that the stragglers' ranks exist; with
    ``ring_order`` cost_map reorder its groups, with ``hierarchy`` cost_map group the
    hierarchical algorithms by PID (workloads.cost_aware)."""
    if ctx.scale > 1:
        schedule = scale_schedule(schedule, ctx.scale)
    bad = sorted(r for r in strag.fixed if not 0 <= r < schedule.world_size)
    if bad:
        raise ctx.error("stragglers", f"rank(s) {bad} do not exist: this workload has ranks "
                                      f"0..{schedule.world_size - 1}")
    if ring_order == "cost_map":
        pids, costs = ctx.alto()
        schedule = order_rings(schedule, placement, pids, costs)
    sites = ctx.alto()[0] if hierarchy == "cost_map" else None
    return BuiltWorkload(schedule.name, schedule, placement, stragglers_of(strag, ctx.seed),
                         sites=sites)


def guarded(ctx: Ctx, build: Any) -> Any:
    """``build()``, a ScheduleError or a pydantic ValidationError becoming a SpecError that
    names ``workloads[index]`` (and the key, for a ValidationError)."""
    try:
        return build()
    except ScheduleError as exc:
        raise ctx.error((), str(exc)) from None
    except ValidationError as exc:
        raise SpecError(issues_from_validation(exc, None, ctx.source, ctx.prefix)) from None
