"""Run a ``kind: app`` workload on a live lab: every node's process at once, wait for all
of them (or the first failure, or the timeout), and write the records.

Records (in the workload's directory ``workloads/<i>-<name>/``; the runner merges
``apps.jsonl`` into the run directory): ``apps.jsonl``, one line per node with workload,
node, rank, argv, ``t_start``/``t_end`` (epoch seconds, host clock: just before the start
call, and when the exit was first seen, polled every :data:`POLL_S`, or when aitb had
ended it), ``duration_s``, ``exit_code`` (None if it could not be read), ``killed`` (ended
by aitb because another rank failed or the timeout passed), ``image`` (None: a namespace
host) and ``log`` (relative to the run directory);
``logs/<node>.log`` (stdout and stderr); ``failures.jsonl``.

A non-zero exit or the timeout fails the workload: the failure names the node, argv, exit
status and the log's last lines; the other ranks are then ended (by pid) since a job with a
dead rank cannot finish. Needs root (a lab that is up).
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

from models.errors import AitbError
from models.records import FailureRecord
from orchestration.apps.argv import AppPlan
from orchestration.starting import START_LOCK
from testbed.apps.launch import AppRequest
from traffic_gen.replay import ReplayResult

__all__ = ["POLL_S", "run_app", "log_tail"]

POLL_S = 0.02
TAIL_LINES = 5


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path`` joined by " | " ("" if it cannot be read)."""
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _start_all(lab: Any, app: AppPlan, logs: Path) -> list[Any]:
    requests = [AppRequest(r.node, list(r.argv), dict(r.env), logs / f"{r.node}.log")
                for r in app.ranks]
    with START_LOCK:  # the lab's registry and children: one start at a time
        return lab.exec_apps(requests)


def _watch(procs: list[Any], timeout_s: float) -> tuple[dict[int, float], bool]:
    """Poll until every process ended, one failed, or ``timeout_s`` passed; returns (index ->
    epoch time its end was seen, timed out?)."""
    ends: dict[int, float] = {}
    deadline = time.monotonic() + timeout_s
    while len(ends) < len(procs):
        for i, p in enumerate(procs):
            if i not in ends and p.poll() is not None:
                ends[i] = time.time()
        if any(procs[i].returncode != 0 for i in ends) or len(ends) == len(procs):
            return ends, False
        if time.monotonic() >= deadline:
            return ends, True
        time.sleep(POLL_S)
    return ends, False


def _failure(run_id: str, rank: int, p: Any, detail: str) -> FailureRecord:
    return FailureRecord(run_id=run_id, node=p.node, rank=rank, op="app", t=time.time(),
                         detail=f"{shlex.join(p.argv)}: {detail}; log {p.log}: "
                                f"{log_tail(p.log) or '(empty)'}")


def run_app(lab: Any, app: AppPlan, part: Path, run_dir: Path, run_id: str) -> ReplayResult:
    """Run ``app`` on ``lab`` (see the module doc); records under ``part`` (created), log
    paths relative to ``run_dir``. Returns a ReplayResult (ok, failures naming the nodes).
    Raises AitbError if the lab cannot run applications (a backend without exec_app)."""
    if not hasattr(lab, "exec_apps"):
        raise AitbError(f"workload {app.name}: kind app needs the native backend")
    logs = part / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs = _start_all(lab, app, logs)
    ends, timed_out = _watch(procs, app.timeout_s)
    failures = [_failure(run_id, i, p, f"exited with status {p.returncode}")
                for i, p in enumerate(procs) if i in ends and p.returncode != 0]
    if timed_out:
        failures += [_failure(run_id, i, p, f"still running after the timeout of "
                                            f"{app.timeout_s:g} s")
                     for i, p in enumerate(procs) if i not in ends]
    killed = {i for i, p in enumerate(procs) if i not in ends}
    for i in sorted(killed):
        procs[i].kill()
        ends[i] = time.time()
    _write(app, procs, ends, killed, part, run_dir)
    _write_failures(part, failures)
    return ReplayResult(part, not failures, {"apps": part / "apps.jsonl"}, tuple(failures), {})


def _write(app: AppPlan, procs: list[Any], ends: dict[int, float], killed: set[int],
           part: Path, run_dir: Path) -> None:
    with (part / "apps.jsonl").open("w", encoding="utf-8") as out:
        for i, p in enumerate(procs):
            t0, t1 = p.t_start, ends.get(i)
            out.write(json.dumps({
                "record": "app", "node": p.node, "rank": i, "argv": p.argv,
                "t_start": t0, "t_end": t1, "duration_s": None if t1 is None else t1 - t0,
                "exit_code": p.returncode, "killed": i in killed,
                "image": app.images.get(p.node),
                "log": str(p.log.relative_to(run_dir))}) + "\n")


def _write_failures(part: Path, failures: list[FailureRecord]) -> None:
    with (part / "failures.jsonl").open("w", encoding="utf-8") as out:
        for f in failures:
            out.write(json.dumps(f.to_dict()) + "\n")
