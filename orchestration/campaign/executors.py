"""Where a campaign's runs happen: ``local`` (one after the other in this process, the
default: orchestration.campaign.runner) or ``ray`` (each run a Ray task on any machine of a Ray
cluster whose workers have aitb set up and run as root).

Ray executor. The driver (``aitb campaign``) keeps the state file and the aggregate exactly as
the local executor does: it marks a run ``running`` when it hands it to Ray and ``ok``/``failed``
when the report comes back, so a crash of the driver leaves the state the local executor's crash
leaves (those runs are discarded and redone on resume; completed ones are not touched). Seeds come
from the campaign's runs, as locally. Each task runs the point in a child process
(``python -m orchestration.campaign.point``) that gets SIGTERM when the worker dies
(``setpriv --pdeathsig``): the runner then tears its lab down. A task whose worker or machine
died is redone with a fresh run id (``attempts`` in all).

Concurrency: a task asks Ray for ``cpus_per_point`` CPUs (default 1), so a machine started with
``ray start --num-cpus C`` runs at most C / cpus_per_point points at once. Labs of concurrent
points never collide (their namespaces and interfaces carry the run id), but they share the
CPUs: HTB dequeues, the native delay line and the agents all run on them, and the fidelity
check calls a run untrustworthy once the CPU saturates (orchestration/fidelity/run.py). One
point per core is the most that keeps that budget; give a point more CPUs for large labs.

Copy-back: orchestration.campaign.copyback (in place where the worker sees the results folder,
else a tarball's bytes through Ray's object store).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import shutil
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.errors import LabError
from models.owned import make_owned_dir, owned_tempdir
from orchestration.campaign.copyback import mark_results, pack, sees_results, unpack
from orchestration.campaign.load import Campaign
from orchestration.campaign.point import RunReport, RunTask
from orchestration.campaign.runner import (
    CampaignInterrupted,
    CampaignResult,
    Progress,
    record,
)
from orchestration.campaign.state import CampaignState, wait_for_writer
from orchestration.campaign.sweep import Run

__all__ = ["EXECUTORS", "RayExecutor", "WorkerReply", "run_on_worker", "slots"]

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class WorkerReply:
    """What a Ray task returns: the run's report and, when the worker did not see the
    results folder, the run directory as gzip'd tar bytes (copyback.pack)."""

    report: RunReport
    archive: bytes | None
    stderr_tail: str


def slots(cluster_cpus: float, cpus_per_point: float) -> int:
    """How many runs to keep in flight: the cluster's CPUs over the CPUs a point asks for
    (at least 1)."""
    return max(1, int(cluster_cpus // cpus_per_point))


def run_on_worker(task: RunTask, results_root: str, token: str) -> WorkerReply:
    """Do ``task`` on this machine (the body of the Ray task; needs root): in place when this
    machine sees ``results_root`` (copyback.sees_results), else in a scratch folder whose run
    directory comes back packed. The run happens in a child process that dies with this one."""
    shared = sees_results(Path(results_root), token)
    # named by this process (models.owned): a worker SIGKILLed mid-run leaves it to `aitb clean`
    scratch = None if shared else make_owned_dir("point")
    local = task if shared else dataclasses.replace(task, point_dir=str(scratch))
    try:
        report, tail = _child(local)
        archive = None if shared or scratch is None else pack(scratch, report.run_dir)
        return WorkerReply(report, archive, tail)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _child(task: RunTask) -> tuple[RunReport, str]:
    """Run ``task`` in ``python -m orchestration.campaign.point`` (SIGTERM to it when this
    process dies or is interrupted). Raises LabError with its stderr when it wrote no report."""
    with owned_tempdir("task") as tmp:  # a killed worker's: `aitb clean` (models.owned)
        task_file, report_file = tmp / "task.json", tmp / "report.json"
        task_file.write_text(json.dumps(dataclasses.asdict(task)), encoding="utf-8")
        argv = ["setpriv", "--pdeathsig", "TERM", sys.executable, "-m",
                "orchestration.campaign.point", str(task_file), str(report_file)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        try:
            _, err = proc.communicate()
        except BaseException:
            proc.terminate()
            proc.wait(timeout=120)
            raise
        tail = err[-4000:]
        if not report_file.exists():
            raise LabError(f"run {task.key}: the point process exited {proc.returncode} "
                           f"without a report: {tail}")
        return RunReport(**json.loads(report_file.read_text(encoding="utf-8"))), tail


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise LabError("--executor ray needs Ray: pip install -e '.[ray]' (make setup "
                       "installs it)") from None
    return ray


class RayExecutor:
    """Runs a campaign's runs as Ray tasks (module docstring). ``address``: a running
    cluster's ``HOST:PORT`` (None: a Ray instance started in this process with this machine's
    CPUs); ``cpus_per_point``: Ray CPUs one run asks for; ``attempts``: tries per run when a
    worker dies."""

    def __init__(self, address: str | None = None, cpus_per_point: float = 1.0,
                 attempts: int = 2) -> None:
        self.address = address
        self.cpus_per_point = cpus_per_point
        self.attempts = attempts

    def run(self, c: Campaign, todo: list[Run], state: CampaignState,
            result: CampaignResult, progress: Progress) -> None:
        """Do ``todo`` on the cluster, keeping ``slots`` runs in flight."""
        if not todo:
            return
        ray = _ray()
        ray.init(address=self.address, log_to_driver=False, include_dashboard=False,
                 configure_logging=False)
        try:
            self._drive(ray, c, todo, state, result, progress)
        finally:
            ray.shutdown()

    def _drive(self, ray: Any, c: Campaign, todo: list[Run], state: CampaignState,
               result: CampaignResult, progress: Progress) -> None:
        token = mark_results(state.root)
        task_fn = ray.remote(num_cpus=self.cpus_per_point, max_retries=0)(run_on_worker)
        width = slots(ray.cluster_resources().get("CPU", 1), self.cpus_per_point)
        progress(f"ray: {width} runs at once ({self.cpus_per_point:g} CPU each)")
        queue = deque((run, 1) for run in todo)
        flying: dict[Any, tuple[Run, int, RunTask]] = {}
        try:
            while queue or flying:
                while queue and len(flying) < width:
                    run, attempt = queue.popleft()
                    task = self._task(c, run, state)
                    progress(f"run {run.key} ({run.point.label() or 'base'}, seed {run.seed})")
                    ref = task_fn.remote(task, str(state.root), token)
                    flying[ref] = (run, attempt, task)
                ready, _ = ray.wait(list(flying), num_returns=1)
                run, attempt, task = flying.pop(ready[0])
                self._collect(ray, ready[0], run, attempt, task, state, result, queue,
                              progress)
        except KeyboardInterrupt:
            for ref in flying:
                ray.cancel(ref)
            raise CampaignInterrupted("interrupted; run the same command again to "
                                      "resume") from None


    def _task(self, c: Campaign, run: Run, state: CampaignState) -> RunTask:
        """A fresh run id for ``run``, marked running in the state file."""
        run_id = f"rep{run.rep}-{secrets.token_hex(3)}"
        point_dir = state.root / run.point.id
        name = c.prepared[run.point.id].spec.name
        state.start(run.key, point_dir / name / run_id, run.seed)
        return RunTask(str(Path(c.src.source).resolve()), run.key, run.point.id, run.seed,
                       run_id, str(point_dir.resolve()))

    def _collect(self, ray: Any, ref: Any, run: Run, attempt: int, task: RunTask,
                 state: CampaignState, result: CampaignResult, queue: deque,
                 progress: Progress) -> None:
        try:
            reply: WorkerReply = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # our code raised on the worker
            record(state, result, run.key, False, str(exc.cause or exc)[-2000:], progress)
            return
        except ray.exceptions.RayError as exc:  # the worker or its machine died
            if attempt < self.attempts:
                _forget(state, run.key)
                progress(f"run {run.key}: worker lost ({type(exc).__name__}); redoing it")
                queue.appendleft((run, attempt + 1))
                return
            record(state, result, run.key, False, f"worker lost: {exc}", progress)
            return
        if reply.archive is not None:
            unpack(reply.archive, Path(task.point_dir), reply.report.run_dir)
        if reply.report.interrupted:
            raise CampaignInterrupted(f"run {run.key} was interrupted on its worker; run the "
                                      "same command again to resume (that run is redone)")
        record(state, result, run.key, reply.report.ok, reply.report.error, progress)


def _forget(state: CampaignState, key: str) -> None:
    """Delete what a lost run left of its run directory (marked when it was handed out) once
    its point process, which gets SIGTERM with its worker and tears its lab down, has ended
    (state.wait_for_writer); forget the run."""
    path = state.run_dir(key) or state.root / key
    wait_for_writer(path)
    shutil.rmtree(path, ignore_errors=True)
    state.data["runs"].pop(key, None)
    state.save()
