"""Capture, counter sampling and the fidelity monitor of a cluster run, around its workloads:
each machine observes its own part (``aitb topo observe``, orchestration.observe.cluster_part),
and afterwards its directory comes back over SSH and is merged into the run directory on the
driver's clock (orchestration.observe.cluster_collect).

    with observing_cluster(lab, observe, run_dir, manifest, progress) as parts:
        replay every workload
    parts.fidelity      # machine -> that part's fidelity.json (machine clock, its links)

Every machine starts observing (all at once, one thread each) before the first workload and
stops after the last one, also when the replay fails; a machine lost mid-run contributes
nothing (its observer's channel is gone) and the run already fails naming it. The traffic
windows each machine's CPU samples are judged in are the workloads' (timeline records, driver
clock) moved onto the machine's clock.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from analysis.fidelity import traffic_windows
from models.errors import AitbError, LabError
from models.fanout import fan_out
from models.owned import make_owned_dir
from orchestration.cluster.cut_rtt import cut_rtt_check, probe_cut_links
from orchestration.cluster.lab import ClusterLab, uncertainty_s
from orchestration.observe.cluster_collect import Part, RemoteObserver, fetch_dir, merge_parts
from orchestration.observe.cluster_part import remote_dir
from orchestration.observe.local import warn_incomplete

__all__ = ["observing_cluster", "Observed", "remote_dir"]


@dataclass
class Observed:
    """What the machines' observers left: per machine its part's fidelity.json; per cut
    link its end-to-end RTT entry (orchestration.cluster.cut_rtt.cut_rtt_check)."""

    fidelity: dict[str, dict[str, Any]] = field(default_factory=dict)
    cut_rtts: dict[str, dict[str, Any]] = field(default_factory=dict)


def _timeline(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((run_dir / "workloads").glob("*/timeline.jsonl")):
        with path.open(encoding="utf-8") as fh:
            out += [json.loads(line) for line in fh if line.strip()]
    return out


@contextmanager
def observing_cluster(lab: ClusterLab, cfg: Any, run_dir: Path, manifest: dict[str, Any],
                      progress: Callable[[str], None]) -> Iterator[Observed]:
    """Observe every machine's part of ``lab`` (up) as ``cfg`` (an ObserveConfig of
    orchestration.observe.local) says, around the body (module docstring); writes
    ``run_dir/captures/``, ``run_dir/counters/`` and the manifest's ``capture`` and
    ``counters`` entries. Raises LabError naming the machine whose observer failed to start
    or stop (a failure to stop after the body's own exception is added to it as a note)."""
    d = lab.deployed
    assert d is not None
    observed = Observed()
    manifest["capture"] = {"enabled": bool(cfg.points)}
    manifest["counters"] = {"enabled": cfg.counters is not None}
    names = [m.name for m in lab.cluster.machines]

    def config(name: str) -> dict[str, Any]:
        points = [[p.node, p.ifname, p.link] for p in cfg.points if lab.where[p.node] == name]
        c = cfg.counters
        return {"dir": remote_dir(d.run_ids[name]), "points": points,
                "capture": asdict(cfg.capture), "fidelity": True,
                "counters": None if c is None else {"interval_s": c.interval_s, "tcp": c.tcp}}

    started: dict[str, RemoteObserver] = {}

    def start(name: str) -> None:
        started[name] = RemoteObserver(lab.controls[name], lab.cluster.aitb, d.run_ids[name],
                                       config(name))

    progress(f"observing on {len(names)} machines: capture on {len(cfg.points)} "
             f"interface(s), counters {'on' if cfg.counters else 'off'}, fidelity probes")
    cut = [c["link"] for c in d.cut_links]
    try:
        fan_out(start, names, inline_single=True)
        if cut:  # before the workloads, as a local run's RTT probes
            progress(f"fidelity: probing the end-to-end RTT of {len(cut)} cut link(s)")
            probed = probe_cut_links(lab.plan, cut, lab.where, d.run_ids, lab.controls,
                                     lab.cluster.aitb, lab.cluster.python)
            observed.cut_rtts = {c: cut_rtt_check(lab.plan, c, probed.get(c)) for c in cut}
    except BaseException:
        for obs in started.values():
            obs.close()
        for name in names:  # what they made before the failure (removal is best effort:
            with contextlib.suppress(AitbError):  # the start's error is the one to report)
                lab.controls[name].run(["rm", "-rf", "--", remote_dir(d.run_ids[name])])
        raise
    progress("observing")
    try:
        yield observed
    except BaseException as exc:
        for problem in _stop(lab, started, run_dir, manifest, observed, progress):
            exc.add_note(problem)
        raise
    problems = _stop(lab, started, run_dir, manifest, observed, progress)
    if problems:
        raise LabError("; ".join(problems))


def _stop(lab: ClusterLab, started: dict[str, RemoteObserver], run_dir: Path,
          manifest: dict[str, Any], observed: Observed,
          progress: Callable[[str], None]) -> list[str]:
    d = lab.deployed
    assert d is not None
    windows = traffic_windows(_timeline(run_dir))
    live = [n for n in started if n not in lab.lost]
    problems: list[str] = []
    summaries: dict[str, dict[str, Any]] = {}

    def stop(name: str) -> None:
        off = d.offsets[name].offset_s
        try:
            summaries[name] = started[name].stop([(a + off, b + off) for a, b in windows])
        except AitbError as exc:
            problems.append(str(exc))

    progress(f"stopping the observers on {len(live)} machine(s)")
    fan_out(stop, live, inline_single=True)
    lab.measure_after()  # the traffic is over: the second offset, for the drift
    for name in started:
        if name not in live:
            started[name].close()
    for name, s in summaries.items():
        problems += [f"machine {name}: {e}" for e in s["errors"]]
    problems += _collect(lab, run_dir, live, observed, manifest)
    progress("captures and counters of the machines copied back and merged")
    return problems


def _collect(lab: ClusterLab, run_dir: Path, names: list[str], observed: Observed,
             manifest: dict[str, Any]) -> list[str]:
    """Copy every machine's observation back, merge it into the run directory; problems."""
    d = lab.deployed
    assert d is not None
    problems: list[str] = []
    staging = make_owned_dir("observed")
    try:
        parts = []
        for name in names:
            try:
                fetch_dir(lab.controls[name], remote_dir(d.run_ids[name]), staging / name)
            except AitbError as exc:
                problems.append(str(exc))
                continue
            fid = staging / name / "fidelity.json"
            if fid.exists():
                observed.fidelity[name] = json.loads(fid.read_text())
            before = d.offsets[name]
            rate, ref_s = lab.drift(name)
            parts.append(Part(name, staging / name, before.offset_s,
                              uncertainty_s(before, lab.after.get(name)),
                              frozenset(n for n, w in lab.where.items() if w == name),
                              rate, ref_s))
        try:
            merged = merge_parts(run_dir, parts)
        except (OSError, ValueError) as exc:
            raise LabError(f"merging the machines' captures and counters: "
                           f"{type(exc).__name__}: {exc}") from None
        _summaries(manifest, merged, [p.machine for p in parts])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return problems


def _summaries(manifest: dict[str, Any], merged: dict[str, Any], machines: list[str]) -> None:
    index, sampler = merged["capture"], merged["counters"]
    if index is not None:
        def total(key: str) -> int | None:
            values = [i[key] for i in index["interfaces"]]
            return None if None in values else sum(values)
        warn_incomplete(index)
        manifest["capture"].update(
            index="captures/index.json", snaplen=index["snaplen"], machines=machines,
            interfaces=[f"{i['node']}:{i['ifname']}" for i in index["interfaces"]],
            packets_captured=total("packets_captured"),
            packets_dropped_by_kernel=total("packets_dropped_by_kernel"),
            clock="moved onto the driver's clock by each machine's offset, interpolated "
                  "between its measurements before and after the run (constant drift)")
    if sampler is not None:
        manifest["counters"].update({k: v for k, v in sampler.items() if k != "machines"},
                                    dir="counters", machines=machines)
