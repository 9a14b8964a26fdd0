"""``aitb run`` of an experiment with a ``cluster:`` section: the lab over the machines
(orchestration/cluster/), the workloads replayed by the local controller with every agent on
its node's machine (orchestration.cluster.lab), records into the one run directory.

:func:`check_cluster` (at prepare time, pure but for reading the key files): the cluster's
issues, its key files, the placement (by ``place``, else by site, else the planner's cut), the
cut links' MTU, and what a cluster run cannot do yet (kind app, alto.serve, link traces, a
node_down's ``agent:``, the mininet backend), each naming the file and key.
:func:`cluster_lab_run`:
bring-up (the underlay's delay measured and accounted, orchestration.cluster.underlay),
observation (capture, counter sampling and the fidelity monitor on every machine, copied back
and merged on the driver's clock: orchestration.observe.cluster), the ``events:`` played
by each machine on its part and merged into one events.jsonl
(orchestration.events.cluster), replay, teardown of every
machine's part (also after a failure, or when a machine is lost: the run then fails naming
it); per-workload end counters (``counters_end.json``, every machine's ``aitb topo
inspect``). :func:`write_cluster_fidelity`: fidelity.json from the machines' parts and the
cluster's own checks (orchestration.fidelity.cluster).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from models.errors import AitbError, LabError, SpecError, SpecIssue
from models.plan import LabPlan
from models.rundir import read_jsonl
from models.specfile import with_lines
from orchestration.cluster.control import Control
from orchestration.cluster.lab import ClusterLab
from orchestration.cluster.spec import ClusterSpec, cluster_issues, key_problems
from orchestration.cluster.tunnels import place, tunnels
from orchestration.events.cluster import ClusterPlayer, playing_cluster_events
from orchestration.fidelity.cluster import cluster_fidelity
from orchestration.observe.cluster import Observed, observing_cluster

__all__ = ["check_cluster", "cluster_lab_run", "write_cluster_fidelity"]


def check_cluster(spec: Any, plan: LabPlan, source: str, doc: Any, backend: str,
                  cluster_source: str | None = None) -> dict[str, str]:
    """node -> machine for ``spec`` (an ExperimentSpec with ``cluster``) on ``plan``. Raises
    SpecError naming ``source`` (``cluster_source`` for the cluster section's own keys, when
    it came from the topology file), the key path and its line for every problem (module
    docstring). Creates nothing."""
    cluster: ClusterSpec = spec.cluster
    csource = cluster_source or source
    issues = cluster_issues(cluster, csource) + key_problems(cluster, csource)
    if backend != "native":
        issues.append(SpecIssue(f"a cluster lab runs on the native backend, not {backend}",
                                file=source, key_path=("backend",)))
    for i, entry in enumerate(spec.workloads):
        if entry.kind == "app":
            issues.append(SpecIssue("kind app does not run on a cluster lab yet (only the "
                                    "traffic generator's agents start on other machines)",
                                    file=source, key_path=("workloads", i, "kind")))
    if spec.alto.serve:
        issues.append(SpecIssue("alto.serve does not run on a cluster lab yet", file=source,
                                key_path=("alto", "serve")))
    if plan.traces:
        issues.append(SpecIssue("link traces do not play on a cluster lab yet", file=source,
                                key_path=("topology",)))
    for i, ev in enumerate(getattr(spec, "events", None) or ()):
        if ev.kind == "node_down" and ev.agent is not None:  # the controller's pid signal
            issues.append(SpecIssue(
                f"events[{i}] (node_down of {ev.node}, agent: {ev.agent}) cannot play on a "
                "cluster lab yet: the node's agents run on their machine, started over SSH, "
                "and their pids are that machine's (links only: leave out agent)",
                file=source, key_path=("events", i, "agent")))
    if plan.routing is not None:  # the daemons' sessions would cross the machines' tunnels
        issues.append(SpecIssue("routing: frr does not run on a cluster lab yet (its routers "
                                "get static routes only there)", file=source,
                                key_path=("topology", "routing")))
    where: dict[str, str] = {}
    if not issues:
        try:
            where = place(plan, cluster)
            tunnels(plan, where, cluster)
        except SpecError as exc:
            issues += [SpecIssue(i.message, file=csource if i.key_path[:1] == ("cluster",)
                                 else source, key_path=i.key_path) for i in exc.issues]
    if not issues:
        for i, m in enumerate(cluster.machines):
            if m.name not in where.values():
                issues.append(SpecIssue(f"machine {m.name} gets no node of the lab",
                                        file=csource, key_path=("cluster", "machines", i)))
    if issues:
        raise with_lines(SpecError(issues), doc, source)
    return where


def cluster_lab_run(prep: Any, controls: dict[str, Control], lab_id: str,
                    manifest: dict[str, Any], progress: Callable[[str], None],
                    replay_all: Callable[[ClusterLab, ClusterPlayer | None], None],
                    run_dir: Path,
                    observed: Observed) -> None:
    """Bring the lab up over the machines, observe it (``observed`` gets each machine's
    fidelity data), play ``prep.events`` on the machines (``manifest["events"]``,
    events.jsonl), ``replay_all(lab, player)`` (the runner's replay of every workload, the
    player None without events), tear every
    part down; the manifest's ``cluster`` records machines, clock offsets before and after
    with their uncertainty, the underlay's round trips and the cut links' delay accounting,
    bring-up times, lost machines; ``capture`` and ``counters`` what was observed. Raises
    LabError naming a lost machine or a failed teardown, else what the replay raised."""
    cluster = prep.spec.cluster
    lab = ClusterLab(prep.plan, cluster, dict(prep.machines), lab_id, controls,
                     probe_interval_s=cluster.probe_interval_s,
                     probe_timeout_s=cluster.probe_timeout_s)
    progress(f"bringing up lab {prep.plan.name} ({len(prep.plan.nodes)} nodes) over "
             f"{len(controls)} machines: " + ", ".join(controls))
    failure: AitbError | None = None
    try:
        lab.up()
        manifest["lab_timings_s"] = dict(lab.timings)
        manifest["cluster"] = lab.record()
        progress(f"cluster up in {lab.timings['up_s']:.2f} s ({lab.cluster.deploy}); "
                 "underlay RTT " + ", ".join(
                     f"{k} {v['min_rtt_s'] * 1e3:.3f} ms"
                     for k, v in manifest["cluster"]["underlay"].items()))
        try:
            with observing_cluster(lab, prep.observe, run_dir, manifest, progress) as got:
                observed.fidelity, observed.cut_rtts = got.fidelity, got.cut_rtts
                with playing_cluster_events(lab, prep.events, run_dir, manifest,
                                            progress) as player:
                    replay_all(lab, player)
        except AitbError as exc:  # a lost machine, found by the watchdog or at teardown,
            failure = exc         # is the cause to name
    finally:
        progress("tearing down")
        errors = lab.down()
        manifest["cluster"] = lab.record()
    if lab.lost:
        said = lab.lost_message()
        raise LabError(said + (f" ({failure})" if failure and str(failure) != said else ""))
    if failure is not None:
        raise failure
    if errors:
        raise LabError("; ".join(f"machine {m}: teardown: {e}" for m, e in errors.items()))



def write_cluster_fidelity(observed: Observed, manifest: dict[str, Any], run_dir: Path
                           ) -> dict[str, Any]:
    """Write ``run_dir/fidelity.json`` of a cluster run (orchestration.fidelity.cluster) from
    the machines' parts, the manifest's ``cluster`` block and the merged flows and collectives
    (run after the records are merged); returns it."""
    from models.rundir import write_json_atomic

    doc = cluster_fidelity(observed.fidelity, manifest["cluster"],
                           read_jsonl(run_dir / "flows.jsonl"),
                           read_jsonl(run_dir / "collectives.jsonl"), observed.cut_rtts)
    write_json_atomic(run_dir / "fidelity.json", doc)
    return doc
