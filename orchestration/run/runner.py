"""``aitb run``: one experiment end to end.

experiment file -> validated spec -> LabPlan (scaled) -> schedules and placements (all checked
before anything is created) -> run directory -> Lab up -> replay each workload over real
sockets (one after another; an entry with ``start: with_previous`` runs concurrently with
the one before it, see orchestration.run.concurrent) -> Lab down (also on error and SIGINT/SIGTERM)
-> manifest. A failed run keeps its
manifest, its partial records and ``error.json``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import logging
import os
import signal
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import topologies
from analysis.fidelity import check_coverage, coverage_words
from models.errors import AitbError, LabError, SpecError, SpecIssue, format_key_path
from models.events import EVENT_RECORDS, EventAction
from models.paths import PathError, RankBindingError, peer_addresses, rank_addresses
from models.plan import LabPlan, plan_to_dict
from models.rundir import RECORD_FILES as RECORD_FILES_BY_KIND
from models.rundir import (
    create_run_dir,
    host_facts,
    new_run_id,
    remove_if_empty,
    write_json_atomic,
)
from models.schedule import Gather
from models.specfile import Ref, line_of, resolve_ref, with_lines
from models.units import plain
from orchestration.alto.files import write_alto
from orchestration.alto.live import live_alto
from orchestration.alto.serve import server_node, serving_alto
from orchestration.apps.run import run_app
from orchestration.cluster.control import Control
from orchestration.cluster.lab import ClusterLab, connect
from orchestration.cluster.run import check_cluster, cluster_lab_run, write_cluster_fidelity
from orchestration.cluster.spec import parse_cluster
from orchestration.events.hits import annotate_failures, failure_cause
from orchestration.events.spec import plan_events
from orchestration.events.traces import playing_traces
from orchestration.fidelity.run import FidelityMonitor
from orchestration.observe.cluster import Observed
from orchestration.observe.local import ObserveConfig, observe_config, observing
from orchestration.privacy.locality_check import check_placement
from orchestration.privacy.tls_cert import write_run_certificate
from orchestration.privacy.tls_pairs import check_tls, uses_tls, workload_tls_pairs
from orchestration.run.build import BuiltWorkload, build_entry
from orchestration.run.concurrent import SerialLauncher, run_group, start_groups
from orchestration.run.engine_check import check_shared_engine
from orchestration.run.experiment import (
    EXPERIMENT_TOP,
    ExperimentSpec,
    TopologyRef,
    parse_experiment,
    spec_issue,
)
from orchestration.run.runlog import RunLog
from orchestration.run.salvage import salvage
from orchestration.run.size_check import size_issues
from orchestration.run.transport import (
    apply_host_transport,
    congestion_control_record,
    host_transport_record,
)
from testbed.delay.nfqueue.linecpu import check_line_cpu
from testbed.host.capabilities import in_vm
from testbed.lab import signals
from testbed.lab.backends import make_lab
from testbed.lab.lab import Lab
from testbed.lab.registry import Registry, state_dir
from testbed.lab.signals import interruption, swallowed
from testbed.lab.state import describe
from topologies.loader import read_yaml
from topologies.scaling import scale_plan
from traffic_gen.program import Program, compile_program
from traffic_gen.replay import ReplayOptions, ReplayResult, replay
from traffic_gen.tcpinfo import TcpKnobs
from workloads.placement import sites_of_plan

__all__ = ["Prepared", "RunOutcome", "prepare", "prepare_doc", "prepare_spec", "execute",
           "analyze_finished", "RECORD_FILES"]

RECORD_FILES = tuple(RECORD_FILES_BY_KIND.values())
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Prepared:
    """An experiment checked and ready: nothing has been created yet."""

    spec: ExperimentSpec
    source: str
    plan: LabPlan
    workloads: tuple[BuiltWorkload, ...]
    options: ReplayOptions
    backend: str = "native"
    observe: ObserveConfig = ObserveConfig()  # capture and counter sampling (observe.py)
    events: tuple[EventAction, ...] = ()  # the experiment's events: (events.py)
    machines: Mapping[str, str] = field(default_factory=dict)  # node -> machine (cluster:)
    cluster_source: str = ""  # the file whose cluster: section it is (experiment/topology)


@dataclass
class RunOutcome:
    """What ``aitb run`` reports: the run directory, success, the error if any."""

    run_dir: Path
    ok: bool
    error: str | None = None
    workloads: list[dict[str, Any]] = field(default_factory=list)
    report: Path | None = None
    analysis_error: str | None = None
    trustworthy: bool | None = None  # fidelity.json's verdict; None if the lab never came up
    exit_code: int = 0  # what `aitb run` exits with: 0, 1 failed, 128+signal interrupted


def _topology_ref(source: str, doc: Any) -> Ref:
    return Ref(source, ("topology", "file"), line_of(doc, ("topology", "file")))


def _plan(spec: ExperimentSpec, source: str, base: Path, doc: Any = None) -> LabPlan:
    return _plan_of(spec.topology, source, base, doc)


def _plan_of(ref: TopologyRef, source: str, base: Path, doc: Any = None) -> LabPlan:
    if ref.file is not None:
        where = _topology_ref(source, doc)
        return topologies.load_topology(resolve_ref(ref.file, base, where), ref=where)
    if ref.generator is not None:
        try:
            return topologies.generate(ref.generator, **ref.params)
        except SpecError as exc:  # named "<generator NAME>": at topology.params.<key>
            raise with_lines(SpecError([_at_topology_key(i, source) for i in exc.issues]),
                             doc, source) from None
    where = f"{source}: topology.inline"  # the plan's source
    try:
        return topologies.resolve(topologies.parse_topology(ref.inline or {}, where), where,
                                  base)
    except SpecError as exc:  # issues of the inline mapping: at topology.inline.<key>
        raise with_lines(SpecError([
            SpecIssue(i.message, file=source, key_path=("topology", "inline", *i.key_path),
                      line=i.line) if i.file == where else i for i in exc.issues]),
            doc, source) from None


def _at_topology_key(issue: SpecIssue, source: str) -> SpecIssue:
    """An issue of ``topologies.generate`` (file ``<generator NAME>``, key path
    ``generator.params.<key>`` or ``generator``) at the experiment's own keys:
    ``topology.params.<key>``, else ``topology.generator``."""
    if not (issue.file or "").startswith("<generator "):
        return issue
    path, message = issue.key_path, issue.message
    if path[:2] == ("generator", "params") and len(path) > 2:
        path = ("topology", "params", *path[2:])
    elif path[:1] == ("generator",):
        path = ("topology", "generator")
    else:  # a stage of the generated topology (e.g. its address pool): said as such
        message = f"the generated topology: {format_key_path(path)}: {message}" if path \
            else f"the generated topology: {message}"
        path = ("topology", "generator")
    return SpecIssue(message, file=source, key_path=path)


def _backend(spec: ExperimentSpec, base: Path, source: str = "", doc: Any = None) -> str:
    """The experiment's ``backend``, else its topology file's or inline topology's, else
    native."""
    if spec.backend is not None:
        return spec.backend
    ref = spec.topology
    if ref.inline is not None:
        return str(ref.inline.get("backend") or "native")
    if ref.file is not None:
        where = _topology_ref(source, doc)
        topo, _ = read_yaml(resolve_ref(ref.file, base, where), ref=where)
        return str(topo.get("backend") or "native")
    return "native"


def _with_topology_cluster(spec: ExperimentSpec, base: Path, source: str, doc: Any
                           ) -> tuple[ExperimentSpec, str]:
    """``spec`` with its topology's ``cluster:`` section (a topology file's or the inline
    topology's) when it has none of its own, and the file that section is in. Raises
    SpecError naming that file and the key path for a bad section."""
    ref = spec.topology
    if spec.cluster is not None or ref.generator is not None:
        return spec, source
    if ref.inline is not None:
        data, where, topo = ref.inline.get("cluster"), f"{source} (topology.inline)", None
    else:
        assert ref.file is not None
        at = _topology_ref(source, doc)
        path = resolve_ref(ref.file, base, at)
        topo, _ = read_yaml(path, ref=at)
        data, where = topo.get("cluster"), str(path)
    if data is None:
        return spec, source
    try:
        cluster = parse_cluster(data, where)
    except SpecError as exc:
        raise (exc if topo is None else with_lines(exc, topo, where)) from None
    return spec.model_copy(update={"cluster": cluster}), where


def _options(spec: ExperimentSpec, source: str, doc: Any, plan: LabPlan) -> ReplayOptions:
    t = spec.transport

    knobs = TcpKnobs(congestion_control=t.tcp_congestion_control, nodelay=t.nodelay,
                     sndbuf_bytes=plain(t.sndbuf), rcvbuf_bytes=plain(t.rcvbuf))
    sites = {h: site for site, hosts in sites_of_plan(plan).items() for h in hosts}
    # aitb run runs as root: the starters (traffic_gen.burst_starter) spin the last 200 us before a
    # burst's instant at SCHED_FIFO 10 and write every flow's first segment then
    # (bench/start_skew.py); inside the stock-kernel VM under software emulation (TCG) an
    # agent's Python start alone took over 20 s with a few agents sharing 2 emulated CPUs
    to = spec.timeouts  # DurationS values, read with the spec
    return ReplayOptions(
        knobs=knobs, sites=sites, conns_per_peer=t.conns_per_peer, spin_s=200e-6,
        rt_priority=10, agent_start_timeout_s=max(float(to.agent_start), _agent_start_timeout_s()),
        transfer_timeout_s=float(to.transfer), phase_timeout_s=float(to.phase),
        start_margin_s=plain(to.start_margin), traffic_engine=spec.traffic_engine)


def _agent_start_timeout_s() -> float:
    """The least time agents get to say hello (``timeouts.agent_start`` may give more): an
    agent's Python starts in ~0.2 s here, but
    under software emulation (TCG) its imports take seconds of a vCPU, and all the agents of
    a workload start at once on 2 vCPUs (8 agents did not make 20 s in the VM)."""
    return 120.0 if in_vm() == "tcg" else 20.0


def prepare(path: Path) -> Prepared:
    """Load, validate and build everything of the experiment file ``path``; create nothing.

    Raises :class:`SpecError` naming the file (the experiment's, or the topology/workload file
    it references), the key path and the line for every problem found: those of the
    experiment file and those of the files it names together (:func:`prepare_doc`).
    """
    doc, dups = read_yaml(path, EXPERIMENT_TOP)
    return prepare_doc(doc, str(path), path.parent, dups)


def prepare_doc(doc: Any, source: str, base: Path, dups: Sequence[SpecIssue] = ()
                ) -> Prepared:
    """:func:`prepare_spec` of the experiment mapping ``doc`` (read from ``source``; ``dups``
    its duplicate keys). When the experiment itself is invalid, what its valid keys name is
    checked all the same (orchestration.run.salvage: the topology file, generator or inline
    mapping; the valid workload entries on it, with the files they name), and every issue
    of both is raised in one :class:`SpecError`, with a note at ``topology`` (or
    ``events``) where that part cannot be checked until the experiment's own errors are
    fixed. Creates nothing."""
    try:
        spec = parse_experiment(doc, source)
    except SpecError as exc:
        raise SpecError([*dups, *exc.issues, *_beyond(doc, source, base, exc.issues)]
                        ) from None
    try:
        prep = prepare_spec(spec, doc, source, base)
    except SpecError as exc:
        raise SpecError([*dups, *exc.issues]) from None
    if dups:
        raise SpecError(list(dups))
    return prep


def _beyond(doc: Any, source: str, base: Path, issues: Sequence[SpecIssue]
            ) -> list[SpecIssue]:
    """The issues of what an invalid experiment's valid keys name (see :func:`prepare_doc`),
    the notes on what could not be checked last."""
    part = salvage(doc, issues, source)
    found: list[SpecIssue] = []
    try:
        if part.doc is None:
            pass
        elif part.keep:  # defaults stand in for bad keys: no size bound from them
            prepare_spec(parse_experiment(part.doc, source), part.doc, source, base,
                         check_sizes=False)
        else:  # no valid workload entry: the topology alone
            _plan_of(TopologyRef.model_validate(doc["topology"]), source, base, doc)
    except SpecError as exc:
        found = part.restore(exc.issues, source, doc)
    except ValidationError:  # the topology key was valid in the experiment: not reached
        pass
    seen = {(i.file, i.key_path, i.message) for i in issues}
    return [*(i for i in found if (i.file, i.key_path, i.message) not in seen), *part.notes]


def prepare_spec(spec: ExperimentSpec, doc: Any, source: str, base: Path,
                 check_sizes: bool = True) -> Prepared:
    """:func:`prepare` for an already validated ``spec`` (e.g. a campaign point): ``doc`` is
    the mapping it came from (for line numbers), ``source`` names it in errors, ``base`` is the
    folder relative paths are relative to; ``check_sizes``: refuse transfers no rate can carry
    in time (orchestration.run.size_check). Creates nothing; raises :class:`SpecError`."""
    if spec.workloads[0].start == "with_previous":
        raise spec_issue(source, doc, ("workloads", 0, "start"),
                         "with_previous needs a workload before it")
    if spec.delay_line_cpu is not None:
        if spec.cluster is not None:
            raise spec_issue(source, doc, ("delay_line_cpu",), "a CPU of this machine: a lab "
                             "over a cluster's machines has none to give")
        try:
            check_line_cpu(spec.delay_line_cpu, "CPU")
        except LabError as exc:
            raise spec_issue(source, doc, ("delay_line_cpu",), str(exc)) from None
    plan = apply_host_transport(scale_plan(_plan(spec, source, base, doc), spec.scale),
                                spec.transport)
    options = _options(spec, source, doc, plan)
    if spec.alto.serve:
        try:
            server_node(spec.alto, plan)
        except LabError as exc:
            raise spec_issue(source, doc, ("alto", "node"), str(exc)) from None
    built, issues = [], []
    for i, entry in enumerate(spec.workloads):
        try:
            w = build_entry(entry, i, plan=plan, source=source, base_dir=base,
                            seed=spec.seed, scale=spec.scale, pid_by=spec.alto.pids,
                            metric=spec.alto.metric)
            program = _compile_check(w, i, source, options)
            bad: list[SpecIssue] = []
            if program is not None and check_sizes:  # sizes no transfer can carry in time
                bad = size_issues(
                    w.name, program, w.placement, plan, source=source,
                    key_path=("workloads", i, *(("size",) if hasattr(entry, "size") else ())),
                    size_key=hasattr(entry, "size"),
                    transfer_timeout_s=options.transfer_timeout_s,
                    udp_payload_bytes=options.udp_payload_bytes,
                    rates_change=bool(plan.traces or spec.events),
                    conns_per_peer=options.conns_per_peer)
            try:  # the entry's other issues come in the same message as its sizes'
                _binding_check(w, i, source, plan)
            except SpecError as exc:
                bad += exc.issues
            try:
                check_placement(entry, w.schedule, w.placement, plan, i, source)  # data: refuse
            except SpecError as exc:
                bad += exc.issues
            if bad:
                raise SpecError(bad)
            built.append(w)
        except SpecError as exc:
            issues += exc.issues
    events: tuple[EventAction, ...] = ()
    try:
        events = plan_events(spec.events, plan, [w.name for w in built], source, doc,
                             spec.scale, placements={w.name: w.placement for w in built
                                                     if w.app is None},
                             last_iteration={w.name: _last_iteration(w) for w in built
                                             if w.app is None})
    except SpecError as exc:
        issues += exc.issues
    if issues:
        raise with_lines(SpecError(issues), doc, source)
    try:  # what the shared traffic engine cannot replay
        check_shared_engine(spec, built, events, source)
    except SpecError as exc:
        raise with_lines(exc, doc, source) from None
    try:
        # sites exist; no UDP flow over TLS; workloads sharing hosts agree
        check_tls(spec.transport, plan, built, source, spec.workloads)
    except SpecError as exc:
        raise with_lines(exc, doc, source) from None
    backend = _backend(spec, base, source, doc)
    machines: dict[str, str] = {}
    spec, cluster_source = _with_topology_cluster(spec, base, source, doc)
    if spec.cluster is not None:  # the lab over machines (orchestration/cluster/run.py)
        machines = check_cluster(spec, plan, source, doc, backend, cluster_source)
        # agents start by their own sleep: the starters' sockets (kick) cannot cross machines
        options = dataclasses.replace(options, start_mode="sleep", python=spec.cluster.python)
    return Prepared(spec, source, plan, tuple(built), options, backend,
                    observe_config(spec, source, doc, plan), events, machines, cluster_source)


def _binding_check(w: BuiltWorkload, index: int, source: str, plan: LabPlan) -> None:
    """Refuse, before the lab exists, more ranks on a host than its ``ranks_per_host``."""
    try:
        rank_addresses(plan, w.placement)
    except RankBindingError as exc:
        raise SpecError(SpecIssue(f"{w.name}: {exc}", file=source,
                                  key_path=("workloads", index, "placement"))) from None


def _last_iteration(w: BuiltWorkload) -> int:
    """The last iteration number a workload's records carry (collectives.jsonl): its
    schedule's iterations, or its last FL round (gathers number their rounds)."""
    rounds = [op.round for op in w.schedule.ops if isinstance(op, Gather)]
    return max([w.schedule.iterations - 1, *rounds])


def _compile_check(w: BuiltWorkload, index: int, source: str, options: ReplayOptions
                   ) -> Program | None:
    """Compile the per-rank programs now (pure), so an unknown algorithm or a bad schedule is
    refused before the lab exists, naming the experiment file and workload. Returns the
    program (None for an application workload, which has none)."""
    if w.app is not None:
        return None
    try:
        return compile_program(w.schedule, w.placement, w.sites or options.sites,
                               w.stragglers)
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
            "host_transport": host_transport_record(prep.plan), "workloads": [],
            "energy": prep.spec.energy.model_dump()}


def _flops_of(schedule: Any, placement: Mapping[int, str]) -> dict[str, Any]:
    """What analysis needs for MFU and network wait (analysis/metrics/energy.py): the
    workload's ranks and their hosts, its model FLOPs per iteration and its accelerators' peak
    (``Schedule.meta`` of a training workload; None for kinds without a model) and, for FL
    kinds, each round's drawn local training seconds per rank (``train_s``, compute that
    happens inside the FL ops)."""
    meta = getattr(schedule, "meta", {}) or {}
    rounds = meta.get("rounds")
    train = [{str(k): float(v) for k, v in (r.get("train_s") or {}).items()}
             for r in rounds] if isinstance(rounds, list) else None
    return {"world_size": int(schedule.world_size), "model_flops": meta.get("model_flops"),
            "flops_per_s": meta.get("flops_per_s"),
            "hosts": {str(r): h for r, h in placement.items()}, "train_s": train}


def merge_records(run_dir: Path, scale: float = 1) -> None:
    """Merge each workload's record files (workloads/<index>-<name>/*.jsonl) into the run's
    (RECORD_FILES), each record tagged with its ``workload`` and ``workload_index`` and, in a
    scaled run (``scale`` > 1: rates, buffers and sizes divided by it, topologies/scaling.py),
    with ``scale``: its ``size_bytes`` and other sizes are the emulated ones (a 240 MB model
    at scale 10 is 24 MB here), multiply by ``scale`` for the experiment's."""
    tag = {"scale": int(scale) if float(scale).is_integer() else scale} if scale != 1 else {}
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
                            rec.update(workload=workload, workload_index=int(index), **tag)
                            out.write(json.dumps(rec) + "\n")


def _anchoring(player: Any, name: str) -> Callable[[int, int, float], None] | None:
    """The controller's phase hook that anchors ``events:`` to workload ``name``: its first
    phase's start, and the first phase of each iteration (None without a player)."""
    if player is None:
        return None

    def on_phase(index: int, iteration: int, t0: float) -> None:
        if index == 0:
            player.anchor(name, t0)
        player.anchor(name, t0, iteration)

    return on_phase


def _replay_all(prep: Prepared, lab: Lab | ClusterLab, run_dir: Path, lab_id: str,
                manifest: dict[str, Any], progress: Progress,
                player: Any = None) -> None:
    addresses = {h.name: str(prep.plan.address_of(h.name)) for h in prep.plan.hosts()}
    # multi-NIC hosts: each peer over the NIC nearest to it (models.paths.peer_addresses)
    pairs = peer_addresses(prep.plan, sorted({h for w in prep.workloads if w.app is None
                                              for h in w.placement.values()}))

    def replay_one(i: int) -> ReplayResult:
        w = prep.workloads[i]
        part = run_dir / "workloads" / f"{i}-{w.name}"
        if w.app is not None:  # kind: app, real processes (orchestration.apps.run)
            if player is not None:  # events at {workload: NAME, offset}: from now
                player.anchor(w.name)
            assert isinstance(lab, Lab)  # refused on clusters (cluster_run.check_cluster)
            return run_app(lab, w.app, part, run_dir, lab_id)
        opts = dataclasses.replace(prep.options, run_id=lab_id, stragglers=w.stragglers,
                                   sites=w.sites or prep.options.sites,
                                   on_phase=_anchoring(player, w.name),
                                   on_controller=None if player is None else
                                   functools.partial(player.attach, w.name),
                                   # a dead delay line fails the replay within a second
                                   health=lab.dead_delay_lines if isinstance(lab, Lab)
                                   else None)
        return replay(w.schedule, w.placement, SerialLauncher(lab), part, addresses, opts,
                      pairs, rank_addresses(prep.plan, w.placement))

    annotated: dict[int, list[dict[str, Any]]] = {}
    for group in start_groups(prep.spec.workloads):  # start: with_previous -> concurrent
        for i in group:
            progress(f"workload {i} ({prep.workloads[i].name}): "
                     f"{len(prep.workloads[i].placement)} ranks"
                     + (" (concurrent)" if len(group) > 1 else ""))
        results = run_group(group, replay_one)
        for i in group:
            w, res = prep.workloads[i], results[i]
            part = run_dir / "workloads" / f"{i}-{w.name}"
            # cumulative kernel counters (qdisc bytes, packets, drops, backlog; per interface)
            # at the end of this workload (of its group, for concurrent workloads); the
            # difference to the previous snapshot is its (its group's) share
            write_json_atomic(part / "counters_end.json", lab.describe()
                              if isinstance(lab, ClusterLab) else describe(lab))
            fails = [f.to_dict() for f in res.failures]
            if player is not None and player.t0 is not None and fails:
                # the links down and agents stopped on each failed transfer's way
                annotate_failures(prep.plan, part / "failures.jsonl",
                                  run_dir / EVENT_RECORDS, player.t0)
                fails = [json.loads(x) for x in (part / "failures.jsonl").read_text(
                    encoding="utf-8").splitlines() if x.strip()]
            annotated[i] = fails
            manifest["workloads"].append({"index": i, "name": w.name, "dir": str(
                part.relative_to(run_dir)), "ok": res.ok, "skew": dict(res.skew),
                "failures": fails, "group": group,
                **_flops_of(w.schedule, w.placement)})
        write_json_atomic(run_dir / "manifest.json", manifest)
        lab.check_delay_lines()  # a dead native line fails the run, naming link and direction
        failed = [i for i in group if not results[i].ok]
        if failed:
            raise AitbError("; ".join(
                f"workload {i} ({prep.workloads[i].name}) failed: "
                + "; ".join(f"{f.get('node')}: {failure_cause(f)}" for f in annotated[i])
                for i in failed))


def _fidelity(monitor: FidelityMonitor, run_dir: Path, manifest: dict[str, Any],
              outcome: RunOutcome, progress: Progress) -> None:
    """fidelity.json, and its verdict in the manifest and the outcome."""
    _verdict(monitor.write(run_dir, t0_unix_s=(manifest.get("events") or {}).get("t0_unix_s"),
                           scale=float(manifest.get("scale") or 1)),
             manifest, outcome, progress)


def _verdict(doc: dict[str, Any], manifest: dict[str, Any], outcome: RunOutcome,
             progress: Progress) -> None:
    """fidelity.json's verdict in the manifest and the outcome; its reasons logged."""
    outcome.trustworthy = doc["trustworthy"]
    manifest["fidelity"] = {"trustworthy": doc["trustworthy"], "reasons": doc["reasons"]}
    for reason in doc["reasons"]:
        logging.getLogger("aitb.run").warning("fidelity: %s", reason)
    bad = sum(not e["ok"] for e in doc["links"])
    _, missing = coverage_words(doc.get("coverage") or check_coverage(doc["links"]))
    progress(f"fidelity: {len(doc['links'])} shaped link directions, {bad} off"
             + ("" if not doc["cpu"]["saturated"] else ", host CPU saturated")
             + (f"; not exercised: {missing}" if missing else ""))


def execute(prep: Prepared, results_dir: Path, progress: Progress = lambda _m: None,
            run_id: str | None = None, analyze: bool = True,
            backend: str | None = None) -> RunOutcome:
    """Run a prepared experiment; needs root. ``backend`` (native/mininet) overrides the
    experiment's (:func:`testbed.lab.backends.make_lab`). Creates
    ``results_dir/<name>/<run-id>/`` with experiment.json, plan.json, manifest.json,
    per-workload records under workloads/, the merged flows/collectives/bursts/timeline/
    failures JSONL files, captures/ and counters/ (unless the experiment turns them off),
    ``run.log`` (every progress step and aitb's log records) and ``fidelity.json`` (once the
    lab was up); a lab owner-marked with the run id's last 6 hex digits exists only while it
    runs. Never raises for a failure while running: the outcome says it, and error.json
    holds it. With ``analyze`` (default), then analyses the run (also a failed one, from its
    partial records, but not an interrupted one; see _analyze): tables/, metrics.json,
    report.html.
    """
    run_id = run_id or new_run_id()
    lab_id = run_id.rsplit("-", 1)[-1]
    # a cluster's machines are reached first: an unreachable one is a LabError naming file,
    # key and machine, before anything exists here or there
    controls = connect(prep.spec.cluster, prep.cluster_source or prep.source) \
        if prep.spec.cluster else None
    manifest = _manifest(prep, run_id, lab_id)  # before the folder: host facts take a moment
    manifest["backend"] = backend = backend or prep.backend
    run_dir = results_dir / prep.spec.name / run_id
    # SIGINT/SIGTERM from the registry's creation to the run's end raise LabInterrupted (the
    # interpreter's KeyboardInterrupt used to pass the steps between the manifest's first
    # write and the lab, leaving it `running`): before the run directory has its manifest
    # nothing is left, after it the manifest says `interrupted`; the lab's teardown holds them
    with signals.raising():
        # the registry first, naming the run directory: a SIGKILL at any instant from here on
        # leaves a run `aitb clean` finds (it marks the manifest killed, or removes a directory
        # killed before its manifest existed); the lab adopts this registry
        # (Lab.registry_created)
        registry, mine, written = Registry(state_dir(), lab_id), False, False
        try:
            # held: a signal inside these writes (after the manifest's rename, say) would
            # leave what they made half-known; it is delivered again in the run's try below
            with signals.held() as got:
                registry.create(prep.plan, [{"kind": "run_dir",
                                             "path": str(run_dir.resolve())}])
                mine = True
                run_dir = create_run_dir(results_dir, prep.spec.name, run_id)
                write_json_atomic(run_dir / "manifest.json", manifest)  # first: a run dir has one
                written = True
        except BaseException as exc:
            # the hold's own end can raise (the raising handler back, a signal pending)
            if not (written and isinstance(exc, signals.LabInterrupted)):
                with signals.held():  # a second signal must not cut the removal short
                    remove_if_empty(run_dir)
                    if mine:  # not another run's registry (the run id in use)
                        registry.remove()
                    if isinstance(exc, signals.LabInterrupted):
                        signals.interruption(exc)  # taken: a campaign's next run
                raise
            signals.interruption(exc)
            got = [exc.signum]
        outcome = RunOutcome(run_dir, ok=False)
        runlog: RunLog | None = None
        try:
            if got:  # its handler now: LabInterrupted, handled as for any step below
                signal.raise_signal(got[0])
            write_json_atomic(run_dir / "experiment.json", prep.spec.model_dump(mode="json"))
            write_json_atomic(run_dir / "plan.json", plan_to_dict(prep.plan))
            runlog = RunLog(run_dir)
            progress = runlog.wrap(progress)
            runlog.log.info("run %s of %s (%s), scale %g, seed %d", run_id, prep.spec.name,
                            prep.source, prep.spec.scale, prep.spec.seed)
            prep = _with_alto_and_tls(prep, run_dir, lab_id, runlog)
            _lab_run(prep, run_dir, lab_id, manifest, outcome, progress, backend, runlog,
                     controls)
            _release_owner(lab_id)
            outcome.workloads = manifest["workloads"]
            if analyze and outcome.exit_code < 128:  # interrupted: stop (aitb analyze)
                _analyze(run_dir, manifest, outcome, progress)
        except signals.LabInterrupted as exc:
            _interrupted_after_lab(exc, run_dir, manifest, outcome, runlog, analyze)
            _release_owner(lab_id)
        except Exception:  # an internal error: the manifest has its final status
            _release_owner(lab_id)
            raise
        finally:
            if runlog is not None:
                runlog.close()
            for c in (controls or {}).values():
                c.close()
    return outcome


def _with_alto_and_tls(prep: Prepared, run_dir: Path, lab_id: str, runlog: RunLog
                       ) -> Prepared:
    """Write the run's ALTO maps and, when the experiment or some workload uses TLS, its
    certificate; returns ``prep`` with the agents' TLS options."""
    try:
        write_alto(run_dir, prep.plan, prep.spec.alto.pids)
    except PathError as exc:  # a plan with a routing hole still runs; its maps cannot exist
        runlog.log.warning("no ALTO maps: %s", exc)
    # the agents' TLS 1.3 (traffic_gen/tls.py), for the experiment or some workloads
    if uses_tls(prep.spec.transport, prep.spec.workloads):
        prep = dataclasses.replace(prep, options=dataclasses.replace(
            prep.options, tls={**write_run_certificate(run_dir, f"aitb-{lab_id}"),
                               "pairs": workload_tls_pairs(
                                   prep.spec.transport, prep.plan, prep.spec.workloads,
                                   prep.workloads, prep.source)}))
    return prep


def _release_owner(lab_id: str) -> None:
    """Remove the lab's registry once the manifest holds the run's final status, if its
    teardown left only the owner records (a failed teardown keeps everything for `aitb
    clean`)."""
    reg = Registry(state_dir(), lab_id)
    if reg.dir.exists() and reg.spent():
        reg.remove()


def _interrupted_after_lab(exc: signals.LabInterrupted, run_dir: Path,
                           manifest: dict[str, Any], outcome: RunOutcome,
                           runlog: RunLog | None, analyze: bool) -> None:
    """A signal that arrived outside the lab (its teardown is done, or it never came up):
    the manifest says ``interrupted`` with the signal, error.json holds it, and the outcome
    carries 128+signal. Further signals are held while this is written."""
    signals.interruption(exc)  # taken: no later run (a campaign's next point) sees it
    with signals.held():
        outcome.ok = False
        outcome.exit_code = exc.exit_code
        outcome.error = outcome.error or str(exc)
        outcome.workloads = manifest["workloads"]
        if analyze and not manifest.get("analysis", {}).get("ok"):  # cut short or not begun
            outcome.report = None
            manifest["analysis"] = {"ok": False, "report": None, "error": str(exc)}
        manifest.update(status="interrupted", ended_at=_now(), error=outcome.error)
        write_json_atomic(run_dir / "error.json", {"error": outcome.error,
                                                   "type": type(exc).__name__})
        write_json_atomic(run_dir / "manifest.json", manifest)
        if runlog is not None:  # None: the signal came before the run log was opened
            runlog.log.error("run interrupted: %s", exc)
            runlog.log.info("status %s", manifest["status"])


def _local_lab_run(prep: Prepared, run_dir: Path, lab_id: str, manifest: dict[str, Any],
                   progress: Progress, backend: str, monitors: list[FidelityMonitor]) -> None:
    """The lab on this machine: up, fidelity probes (its monitor appended to ``monitors`` as
    soon as it exists), capture and sampling, every workload, down. Raises what they raise."""
    progress(f"bringing up lab {prep.plan.name} ({len(prep.plan.nodes)} nodes)")
    lab = make_lab(prep.plan, backend, run_id=lab_id, state_dir=state_dir(),
                   line_cpu=prep.spec.delay_line_cpu)
    # aitb clean marks this run killed if its process dies without a status: execute
    # wrote the registry (naming the run directory) before the run directory existed
    lab.registry_created = True
    lab.keep_owner = True  # removed by execute once the manifest has its final status
    with lab:
        manifest["lab_timings_s"] = dict(lab.timings)
        # which delay line each direction got (auto resolved at bring-up), also in plan.json
        manifest["delay_lines"] = lab.delay_lines()
        manifest["delay_line_cpu"] = lab.line_cpu
        # each host's congestion control as the kernel applies it (default: its sysctl)
        manifest.update(congestion_control_record(prep.plan, prep.spec.transport,
                                                  lab.read_sysctl))
        write_json_atomic(run_dir / "plan.json", plan_to_dict(lab.plan))
        if lab.ovs_datapaths:  # switch -> system/netdev, read back at bring-up
            manifest["ovs_datapaths"] = dict(lab.ovs_datapaths)
        monitor = FidelityMonitor(prep.plan, lab, progress).before()
        monitors.append(monitor)
        with observing(prep.observe, lab, run_dir, manifest, progress), \
                serving_alto(prep.spec.alto, lab, prep.plan, run_dir, manifest, progress), \
                live_alto(prep.spec.alto, prep.plan, run_dir, manifest,
                          float(prep.spec.alto.refresh), progress):
            try:
                with playing_traces(lab, run_dir, manifest, progress,
                                    prep.events) as player:
                    _replay_all(prep, lab, run_dir, lab_id, manifest, progress, player)
            finally:
                monitor.after()
        progress("tearing down")


def _lab_run(prep: Prepared, run_dir: Path, lab_id: str, manifest: dict[str, Any],
             outcome: RunOutcome, progress: Progress, backend: str, runlog: RunLog,
             controls: dict[str, Control] | None = None) -> None:
    """Lab up, fidelity probes, capture and sampling, every workload, lab down; then records
    merged, fidelity.json and the manifest written, also after a failure (kept in error.json
    and ``outcome``). Only KeyboardInterrupt propagates. With ``controls`` (a cluster
    experiment) the lab is the machines' (orchestration.cluster.run), each observed and
    checked on its machine."""
    monitors: list[FidelityMonitor] = []  # the local lab's, once made (also after a failure)
    observed = Observed()  # a cluster's: each machine's fidelity data
    try:
        if controls is not None:
            cluster_lab_run(prep, controls, lab_id, manifest, progress,
                            lambda lab, player: _replay_all(prep, lab, run_dir, lab_id,
                                                            manifest, progress, player),
                            run_dir, observed)
        else:
            _local_lab_run(prep, run_dir, lab_id, manifest, progress, backend, monitors)
        late = swallowed()  # an interrupt that some handler on the way caught and dropped
        if late is not None:
            raise late
        outcome.ok = True
    except (Exception, KeyboardInterrupt) as raised:  # only failures and interrupts stay
        exc = interruption(raised)
        if not isinstance(exc, AitbError | KeyboardInterrupt):
            # a bug, not a user mistake: the manifest and error.json still say what it was
            # (with the traceback), then it propagates to the CLI's internal-error report
            outcome.error = f"internal error: {type(exc).__name__}: {exc}"
            runlog.log.error("run failed: %s", outcome.error)
            write_json_atomic(run_dir / "error.json", {
                "error": outcome.error, "type": type(exc).__name__,
                "traceback": "".join(traceback.format_exception(exc))})
            raise
        outcome.error = str(exc) or type(exc).__name__
        outcome.exit_code = getattr(exc, "exit_code", 130)  # KeyboardInterrupt: SIGINT
        runlog.log.error("run failed: %s", outcome.error)
        write_json_atomic(run_dir / "error.json", {"error": outcome.error,
                                                   "type": type(exc).__name__})
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        merge_records(run_dir, prep.spec.scale)
        if monitors:
            _fidelity(monitors[0], run_dir, manifest, outcome, progress)
        elif controls is not None and "lab_timings_s" in manifest:  # the cluster came up
            _verdict(write_cluster_fidelity(observed, manifest, run_dir), manifest, outcome,
                     progress)
        manifest.update(status=run_status(outcome.ok, outcome.exit_code), ended_at=_now(),
                        error=outcome.error)
        write_json_atomic(run_dir / "manifest.json", manifest)
        runlog.log.info("status %s", manifest["status"])


def run_status(ok: bool, exit_code: int) -> str:
    """The manifest's ``status``: ``ok``, ``interrupted`` (SIGINT/SIGTERM: exit code >= 128)
    or ``failed``."""
    return "ok" if ok else "interrupted" if exit_code >= 128 else "failed"


def _analyze(run_dir: Path, manifest: dict[str, Any], outcome: RunOutcome,
             progress: Progress) -> None:
    """analysis.analyze_run on the finished run: tables/, metrics.json, report.html. Its
    result goes into the manifest's ``analysis`` ({ok, report, error}) and the outcome; a
    failure of the analysis keeps the run (records intact, `aitb analyze` can redo it).
    While it runs, ``analysis`` says ``{"ok": null, "running": {"pid", "started_at"}}`` on
    disk: a process killed meanwhile (SIGKILL, nothing can write) leaves a run that is ``ok``
    and an analysis visibly unfinished, never an ``ok`` that pretends to have metrics."""
    from analysis import analyze_run  # pandas, matplotlib: loaded only when analysing

    progress("analysing")
    manifest["analysis"] = {"ok": None, "report": None, "error": None,
                            "running": {"pid": os.getpid(), "started_at": _now()}}
    write_json_atomic(run_dir / "manifest.json", manifest)
    try:
        analyze_run(run_dir)
        late = swallowed()  # an interrupt that a library on the way caught and dropped
        if late is not None:
            raise late
        outcome.report = run_dir / "report.html"
    except signals.LabInterrupted:
        raise  # the run's signal path (execute) records it
    except Exception as exc:  # noqa: BLE001 - recorded in the manifest, reported by the CLI
        real = interruption(exc)
        if isinstance(real, signals.LabInterrupted):
            raise real from None
        outcome.analysis_error = f"{type(exc).__name__}: {exc}"
    manifest["analysis"] = {"ok": outcome.analysis_error is None,
                            "report": "report.html" if outcome.report else None,
                            "error": outcome.analysis_error}
    write_json_atomic(run_dir / "manifest.json", manifest)


def analyze_finished(run_dir: Path, progress: Progress = lambda _m: None
                     ) -> tuple[Path | None, str | None]:
    """Analyse a run that finished elsewhere (the VM path: the run inside the VM, this on the
    host): writes tables/, metrics.json, report.html and the manifest's ``analysis``; returns
    (report path, None) or (None, the analysis error). Needs no root."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    outcome = RunOutcome(run_dir, ok=manifest.get("status") == "ok")
    _analyze(run_dir, manifest, outcome, progress)
    return outcome.report, outcome.analysis_error
