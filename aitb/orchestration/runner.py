"""``aitb run``: one experiment end to end.

experiment file -> validated spec -> LabPlan (scaled) -> schedules and placements (all checked
before anything is created) -> run directory -> Lab up -> replay each workload over real
sockets -> Lab down (also on error and SIGINT/SIGTERM) -> manifest. A failed run keeps its
manifest, its partial records and ``error.json``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import topologies
from aitb.models.errors import AitbError, SpecError, SpecIssue
from aitb.models.plan import LabPlan, plan_to_dict
from aitb.models.units import UnitError, parse_duration_s, parse_size_bytes
from aitb.orchestration.build import BuiltWorkload, build_entry
from aitb.orchestration.experiment import ExperimentSpec, load_experiment, spec_issue
from aitb.orchestration.rundir import create_run_dir, host_facts, new_run_id, write_json_atomic
from aitb.orchestration.transport import apply_host_transport, host_transport_record
from analysis.dci import write_dci
from analysis.dci_paths import dci_links
from testbed.inspect import describe
from testbed.lab import Lab
from topologies.issues import with_lines
from topologies.scaling import scale_plan
from traffic_gen.launch import LabLauncher
from traffic_gen.program import compile_program
from traffic_gen.replay import ReplayOptions, ReplayResult, replay
from traffic_gen.tcpinfo import TcpKnobs
from workloads.placement import sites_of_plan

__all__ = ["Prepared", "RunOutcome", "prepare", "prepare_spec", "execute", "RECORD_FILES"]

RECORD_FILES = ("flows.jsonl", "collectives.jsonl", "bursts.jsonl", "timeline.jsonl",
                "failures.jsonl")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Prepared:
    """An experiment checked and ready: nothing has been created yet."""

    spec: ExperimentSpec
    source: str
    plan: LabPlan
    workloads: tuple[BuiltWorkload, ...]
    options: ReplayOptions


@dataclass
class RunOutcome:
    """What ``aitb run`` reports: the run directory, success, the error if any."""

    run_dir: Path
    ok: bool
    error: str | None = None
    workloads: list[dict[str, Any]] = field(default_factory=list)


def _plan(spec: ExperimentSpec, source: str, base: Path) -> LabPlan:
    ref = spec.topology
    if ref.file is not None:
        path = Path(ref.file) if Path(ref.file).is_absolute() else base / ref.file
        return topologies.load_topology(path)
    if ref.generator is not None:
        return topologies.generate(ref.generator, **ref.params)
    where = f"{source}: topology.inline"
    return topologies.resolve(topologies.parse_topology(ref.inline or {}, where), where)


def _options(spec: ExperimentSpec, source: str, doc: Any, plan: LabPlan) -> ReplayOptions:
    t = spec.transport

    def unit(key: tuple[str, ...], parse: Callable[[str], Any], text: str | None) -> Any:
        if text is None:
            return None
        try:
            return parse(text)
        except UnitError as exc:
            raise spec_issue(source, doc, key, str(exc)) from None

    knobs = TcpKnobs(congestion_control=t.tcp_congestion_control, nodelay=t.nodelay,
                     sndbuf_bytes=unit(("transport", "sndbuf"), parse_size_bytes, t.sndbuf),
                     rcvbuf_bytes=unit(("transport", "rcvbuf"), parse_size_bytes, t.rcvbuf))
    sites = {h: site for site, hosts in sites_of_plan(plan).items() for h in hosts}
    # aitb run runs as root: agents wait for a burst's start by spinning its last 200 us and
    # take SCHED_FIFO for the start instant only (traffic_gen.datapath), which cut the p99
    # start skew of 64 agents on 2 cores from ~30 ms to ~4 ms (bench/start_skew.py)
    return ReplayOptions(
        knobs=knobs, sites=sites, conns_per_peer=t.conns_per_peer, spin_s=200e-6,
        rt_priority=10,
        transfer_timeout_s=unit(("timeouts", "transfer"), parse_duration_s,
                                spec.timeouts.transfer),
        phase_timeout_s=unit(("timeouts", "phase"), parse_duration_s, spec.timeouts.phase),
        agent_start_timeout_s=unit(("timeouts", "agent_start"), parse_duration_s,
                                   spec.timeouts.agent_start))


def prepare(path: Path) -> Prepared:
    """Load, validate and build everything of the experiment file ``path``; create nothing.

    Raises :class:`SpecError` naming the file (the experiment's, or the topology/workload file
    it references), the key path and the line for every problem found.
    """
    spec, doc = load_experiment(path)
    return prepare_spec(spec, doc, str(path), path.parent)


def prepare_spec(spec: ExperimentSpec, doc: Any, source: str, base: Path) -> Prepared:
    """:func:`prepare` for an already validated ``spec`` (e.g. a campaign point): ``doc`` is
    the mapping it came from (for line numbers), ``source`` names it in errors, ``base`` is the
    folder relative paths are relative to. Creates nothing; raises :class:`SpecError`."""
    plan = apply_host_transport(scale_plan(_plan(spec, source, base), spec.scale),
                                spec.transport)
    options = _options(spec, source, doc, plan)
    built, issues = [], []
    for i, entry in enumerate(spec.workloads):
        try:
            w = build_entry(entry, i, plan=plan, source=source, base_dir=base,
                            seed=spec.seed, scale=spec.scale)
            _compile_check(w, i, source, options)
            built.append(w)
        except SpecError as exc:
            issues += exc.issues
    if issues:
        raise with_lines(SpecError(issues), doc, source)
    return Prepared(spec, source, plan, tuple(built), options)


def _compile_check(w: BuiltWorkload, index: int, source: str, options: ReplayOptions) -> None:
    """Compile the per-rank programs now (pure), so an unknown algorithm or a bad schedule is
    refused before the lab exists, naming the experiment file and workload."""
    try:
        compile_program(w.schedule, w.placement, options.sites, w.stragglers)
    except SpecError as exc:
        raise SpecError([SpecIssue(f"{w.name}: {i.where() + ': ' if i.where() else ''}"
                                   f"{i.message}", file=source,
                                   key_path=("workloads", index)) for i in exc.issues]) from None


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _manifest(prep: Prepared, run_id: str, lab_id: str) -> dict[str, Any]:
    return {"schema_version": 1, "experiment": prep.spec.name, "run_id": run_id,
            "lab_run_id": lab_id, "source": prep.source, "seed": prep.spec.seed,
            "scale": prep.spec.scale, "status": "running", "started_at": _now(),
            "ended_at": None, "error": None, "host": dict(host_facts()),
            "host_transport": host_transport_record(prep.plan), "workloads": []}


def _merge_records(run_dir: Path) -> None:
    root = run_dir / "workloads"
    parts = sorted((p for p in root.glob("*") if p.is_dir()),
                   key=lambda p: int(p.name.split("-", 1)[0])) if root.exists() else []
    for name in RECORD_FILES:
        with (run_dir / name).open("w", encoding="utf-8") as out:
            for part in parts:
                src = part / name
                if not src.exists():
                    continue
                index, workload = part.name.split("-", 1)
                with src.open(encoding="utf-8") as fh:
                    for line in fh:  # ids (c0.1, b0.0) restart in every workload
                        if line.strip():
                            rec = json.loads(line)
                            rec.update(workload=workload, workload_index=int(index))
                            out.write(json.dumps(rec) + "\n")


def _replay_all(prep: Prepared, lab: Lab, run_dir: Path, lab_id: str,
                manifest: dict[str, Any], progress: Progress) -> None:
    addresses = {h.name: str(prep.plan.address_of(h.name)) for h in prep.plan.hosts()}
    for i, w in enumerate(prep.workloads):
        progress(f"workload {i} ({w.name}): {len(w.placement)} ranks")
        part = run_dir / "workloads" / f"{i}-{w.name}"
        opts = dataclasses.replace(prep.options, run_id=lab_id, stragglers=w.stragglers)
        res: ReplayResult = replay(w.schedule, w.placement, LabLauncher(lab), part, addresses,
                                   opts)
        # cumulative kernel counters (qdisc bytes, packets, drops, backlog; per interface) at
        # the end of this workload; the difference to the previous snapshot is its share
        write_json_atomic(part / "counters_end.json", describe(lab))
        manifest["workloads"].append({"index": i, "name": w.name, "dir": str(
            part.relative_to(run_dir)), "ok": res.ok, "skew": dict(res.skew),
            "failures": [f.to_dict() for f in res.failures]})
        write_json_atomic(run_dir / "manifest.json", manifest)
        if not res.ok:
            raise AitbError(f"workload {i} ({w.name}) failed: "
                            + "; ".join(f"{f.node}: {f.detail}" for f in res.failures))


def execute(prep: Prepared, results_dir: Path, progress: Progress = lambda _m: None,
            run_id: str | None = None) -> RunOutcome:
    """Run a prepared experiment; needs root. Creates ``results_dir/<name>/<run-id>/`` with
    experiment.json, plan.json, manifest.json, per-workload records under workloads/ and the
    merged flows/collectives/bursts/timeline/failures JSONL files, and dci.json when the plan
    has DCI links (analysis.dci); a lab owner-marked with
    the run id's last 6 hex digits exists only while it runs. Never raises for a failure
    while running: the outcome says it, and error.json holds it.
    """
    run_id = run_id or new_run_id()
    lab_id = run_id.rsplit("-", 1)[-1]
    run_dir = create_run_dir(results_dir, prep.spec.name, run_id)
    write_json_atomic(run_dir / "experiment.json", prep.spec.model_dump(mode="json"))
    write_json_atomic(run_dir / "plan.json", plan_to_dict(prep.plan))
    manifest = _manifest(prep, run_id, lab_id)
    write_json_atomic(run_dir / "manifest.json", manifest)
    outcome = RunOutcome(run_dir, ok=False)
    try:
        progress(f"bringing up lab {prep.plan.name} ({len(prep.plan.nodes)} nodes)")
        with Lab(prep.plan, run_id=lab_id) as lab:
            manifest["lab_timings_s"] = dict(lab.timings)
            _replay_all(prep, lab, run_dir, lab_id, manifest, progress)
            progress("tearing down")
        outcome.ok = True
    except (AitbError, KeyboardInterrupt) as exc:
        outcome.error = str(exc) or type(exc).__name__
        write_json_atomic(run_dir / "error.json", {"error": outcome.error,
                                                   "type": type(exc).__name__})
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        _merge_records(run_dir)
        manifest.update(status="ok" if outcome.ok else "failed", ended_at=_now(),
                        error=outcome.error)
        write_json_atomic(run_dir / "manifest.json", manifest)
    if outcome.ok and dci_links(prep.plan):  # which collectives crossed a DCI (analysis.dci)
        write_dci(run_dir)
    outcome.workloads = manifest["workloads"]
    return outcome
