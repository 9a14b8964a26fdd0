"""Experiment workload entries -> (Schedule, placement, stragglers), all checked before a lab
exists. Pure: reads only the workload files an entry names (AICB files)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aitb.errors import SpecError, SpecIssue
from aitb.plan import LabPlan
from aitb.schedule import Collective, Compute, Group, Op, Schedule, ScheduleError
from aitb.units import UnitError, parse_duration_s, parse_rate_bps, parse_size_bytes
from orchestration.run.app_entries import AppEntry
from orchestration.run.apps import AppPlan, build_app
from orchestration.run.experiment import (
    CollectiveEntry,
    ImportedEntry,
    PatternEntry,
    PlacementSpec,
    StragglerSpecModel,
)
from orchestration.run.serving import build_serving
from orchestration.run.serving_entries import BackgroundEntry, InferenceEntry
from traffic_gen import patterns
from traffic_gen.algorithms import REGISTRY
from traffic_gen.stragglers import StragglerSpec
from workloads.fl_placement import place_clusters
from workloads.placement import place, sites_of_plan
from workloads.spec import build_workload, parse_workload
from workloads.transform import scale_schedule

__all__ = ["BuiltWorkload", "build_entry"]


@dataclass(frozen=True)
class BuiltWorkload:
    """A workload ready to replay: its name, schedule, rank -> host, stragglers; for
    ``kind: app`` the processes to run (``app``; the schedule is then empty)."""

    name: str
    schedule: Schedule
    placement: dict[int, str]
    stragglers: StragglerSpec
    app: AppPlan | None = None


class _Ctx:
    """Where errors point: the experiment file and the entry's key path."""

    def __init__(self, source: str, index: int) -> None:
        self.source, self.prefix = source, ("workloads", index)

    def error(self, key: str | tuple[str | int, ...], message: str) -> SpecError:
        path = (key,) if isinstance(key, str) else key
        return SpecError(SpecIssue(message, file=self.source, key_path=(*self.prefix, *path)))

    def unit(self, key: str, parse: Any, text: str) -> Any:
        try:
            return parse(text)
        except UnitError as exc:
            raise self.error(key, str(exc)) from None


def _hosts(ctx: _Ctx, plan: LabPlan, hosts: list[str]) -> list[str]:
    known = {n.name for n in plan.hosts()}
    bad = [h for h in hosts if h not in known]
    if bad:
        raise ctx.error("hosts", f"not hosts of lab {plan.name}: {', '.join(bad)}; hosts are "
                                 f"{', '.join(sorted(known))}")
    if len(set(hosts)) != len(hosts):
        raise ctx.error("hosts", "a host is listed twice (use placement: {slots: N} to put "
                                 "several ranks on one host)")
    return hosts


def _placement(ctx: _Ctx, plan: LabPlan, world: int, hosts: list[str] | None,
               spec: PlacementSpec | None) -> dict[int, str]:
    if hosts is not None:
        if len(hosts) < world:
            raise ctx.error("hosts", f"{world} ranks need {world} hosts; {len(hosts)} listed")
        return {r: hosts[r] for r in range(world)}
    spec = spec or PlacementSpec()
    if spec.hosts is not None:
        return _placement(ctx, plan, world, _hosts(ctx, plan, spec.hosts), None)
    try:
        return place(world, sites_of_plan(plan), spec.policy, slots=spec.slots,
                     block=spec.block, key="placement")
    except SpecError as exc:
        raise SpecError([SpecIssue(i.message, file=ctx.source, key_path=(*ctx.prefix,
                                   *i.key_path)) for i in exc.issues]) from None


def _fl_clusters(ctx: _Ctx, plan: LabPlan, s: Schedule) -> dict[int, str]:
    """Hierarchical FL: one cluster per site (workloads.fl_placement)."""
    clusters = int(s.meta["clusters"])  # type: ignore[call-overload]
    try:
        return place_clusters(clusters, s.world_size - 1 - clusters, sites_of_plan(plan))
    except SpecError as exc:
        raise SpecError([SpecIssue(i.message, file=ctx.source, key_path=(*ctx.prefix,
                                   *i.key_path)) for i in exc.issues]) from None


def _stragglers(m: StragglerSpecModel, seed: int) -> StragglerSpec:
    return StragglerSpec(fixed=dict(m.fixed), lognormal_sigma=m.lognormal_sigma, seed=seed)


def _world_hosts(ctx: _Ctx, plan: LabPlan, e: CollectiveEntry | PatternEntry) -> list[str]:
    if e.hosts is not None:
        return _hosts(ctx, plan, e.hosts)
    return [h.name for h in plan.hosts()]


def _collective(ctx: _Ctx, plan: LabPlan, e: CollectiveEntry) -> tuple[Schedule, list[str]]:
    hosts = _world_hosts(ctx, plan, e)
    world = e.ranks or len(hosts)
    if world < 2:
        raise ctx.error("hosts", "a collective needs at least 2 ranks")
    size = ctx.unit("size", parse_size_bytes, e.size)
    chunk = ctx.unit("chunk", parse_size_bytes, e.chunk) if e.chunk else None
    known = REGISTRY.get(e.op, {})
    if e.algorithm is not None and e.algorithm not in known:
        raise ctx.error("algorithm", f"unknown algorithm {e.algorithm!r} for {e.op}; known: "
                                     f"{', '.join(known)}")
    ops: list[Op] = []
    if e.compute:
        ops.append(Compute(ctx.unit("compute", parse_duration_s, e.compute), label="compute"))
    ops.append(Collective(e.op, "world", size, e.algorithm, chunk, label=e.op))  # type: ignore[arg-type]
    group = Group("world", "world", tuple(range(world)))
    name = e.name or f"{e.op}-{e.algorithm or 'default'}"
    return Schedule(name, world, {"world": group}, tuple(ops), iterations=e.iterations), hosts


def _rank_of(ctx: _Ctx, hosts: list[str], key: str, host: str | None) -> int:
    if host is None:
        raise ctx.error(key, f"this pattern needs {key}: a host name")
    if host not in hosts:
        raise ctx.error(key, f"{host!r} is not among the workload's hosts "
                             f"({', '.join(hosts)})")
    return hosts.index(host)


def _pattern(ctx: _Ctx, plan: LabPlan, e: PatternEntry, seed: int) -> tuple[Schedule, list[str]]:
    hosts = _world_hosts(ctx, plan, e)
    size = ctx.unit("size", parse_size_bytes, e.size)
    rate = ctx.unit("rate", parse_rate_bps, e.rate) if e.rate else None
    if e.protocol == "udp" and rate is None:
        raise ctx.error("rate", "UDP flows need a pacing rate, like '100mbit'")
    ranks = list(range(len(hosts)))
    common: dict[str, Any] = {"protocol": e.protocol, "rate_bps": rate}
    if e.kind == "incast":
        recv = _rank_of(ctx, hosts, "receiver", e.receiver)
        gap = ctx.unit("gap", parse_duration_s, e.gap) if e.gap else 0.0
        ops = patterns.incast([r for r in ranks if r != recv], recv, size, e.repeats, gap,
                              **common)
    elif e.kind == "one_to_many":
        src = _rank_of(ctx, hosts, "sender", e.sender)
        ops = patterns.one_to_many(src, [r for r in ranks if r != src], size, **common) \
            * e.repeats
    elif e.kind == "permutation":
        ops = patterns.permutation(ranks, size, seed, **common) * e.repeats
    else:
        ops = patterns.all_pairs(ranks, size, **common) * e.repeats
    return patterns.pattern_schedule(e.name or e.kind, len(hosts), ops), hosts


def _imported(ctx: _Ctx, e: ImportedEntry, base_dir: Path) -> Schedule:
    data = {k: v for k, v in (e.model_extra or {}).items()
            if k not in ("hosts", "placement", "stragglers")}
    spec = parse_workload({"kind": e.kind, **data}, file=ctx.source, prefix=ctx.prefix)
    return build_workload(spec, base_dir=base_dir, file=ctx.source)


def build_entry(entry: CollectiveEntry | PatternEntry | ImportedEntry | InferenceEntry
                | BackgroundEntry | AppEntry, index: int, *, plan: LabPlan, source: str,
                base_dir: Path, seed: int, scale: float) -> BuiltWorkload:
    """Build workload ``index`` of an experiment for ``plan``.

    ``scale`` (>= 1) divides every size (ARCHITECTURE decision 8); ``seed`` seeds patterns and
    stragglers. Raises :class:`SpecError` naming ``source`` and ``workloads[index].<key>`` for
    a bad unit, an unknown host, too few hosts, or an invalid schedule.
    """
    if isinstance(entry, AppEntry):
        app = build_app(entry, index, plan, source)
        return BuiltWorkload(app.name, Schedule(app.name, len(app.ranks), {}, (),
                                                meta={"kind": "app"}),
                             {r.rank: r.node for r in app.ranks}, StragglerSpec(seed=seed), app)
    if isinstance(entry, InferenceEntry | BackgroundEntry):
        schedule, placement = build_serving(entry, index, plan=plan, source=source, seed=seed,
                                            scale=scale)
        return BuiltWorkload(schedule.name, schedule, placement, StragglerSpec(seed=seed))
    ctx = _Ctx(source, index)
    try:
        strag = entry_stragglers(entry)
        if isinstance(entry, CollectiveEntry):
            schedule, hosts = _collective(ctx, plan, entry)
            placement = _placement(ctx, plan, schedule.world_size, hosts, None)
        elif isinstance(entry, PatternEntry):
            schedule, hosts = _pattern(ctx, plan, entry, seed)
            placement = _placement(ctx, plan, schedule.world_size, hosts, None)
        else:
            extra = entry.model_extra or {}
            schedule = _imported(ctx, entry, base_dir)
            hosts = _hosts(ctx, plan, list(extra["hosts"])) if extra.get("hosts") else None
            placement = _fl_clusters(ctx, plan, schedule) if hosts is None and not \
                extra.get("placement") and schedule.meta.get("kind") == "hierarchical" else \
                _placement(ctx, plan, schedule.world_size, hosts,
                           PlacementSpec.model_validate(extra.get("placement") or {}))
    except ScheduleError as exc:
        raise ctx.error((), str(exc)) from None
    except ValidationError as exc:
        raise SpecError([SpecIssue(e["msg"], file=source, key_path=(*ctx.prefix, *e["loc"]))
                         for e in exc.errors()]) from None
    if scale > 1:
        schedule = scale_schedule(schedule, scale)
    bad = sorted(r for r in strag.fixed if not 0 <= r < schedule.world_size)
    if bad:
        raise ctx.error("stragglers", f"rank(s) {bad} do not exist: this workload has ranks "
                                      f"0..{schedule.world_size - 1}")
    return BuiltWorkload(schedule.name, schedule, placement, _stragglers(strag, seed))


def entry_stragglers(entry: CollectiveEntry | PatternEntry | ImportedEntry
                     ) -> StragglerSpecModel:
    """The stragglers of an entry (imported kinds carry them as an extra key)."""
    if not isinstance(entry, ImportedEntry):
        return entry.stragglers
    return StragglerSpecModel.model_validate((entry.model_extra or {}).get("stragglers") or {})
