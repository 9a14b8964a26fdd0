"""One run of a campaign as a unit of work that any machine with aitb set up can do.

The executors (orchestration.campaign.executors) send a :class:`RunTask` and get a
:class:`RunReport` back; both are plain dataclasses so that they travel as JSON (to a
subprocess) or pickled (to a Ray worker). ``python -m orchestration.campaign.point TASK REPORT``
reads a task from the JSON file TASK, does the run (needs root; creates the lab of the run id,
writes ``<point_dir>/<experiment>/<run_id>/``) and writes the report to the JSON file REPORT.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestration.campaign.load import Campaign, load, prepare_point
from orchestration.campaign.state import holding_writer_lock
from orchestration.campaign.sweep import Point
from orchestration.run.runner import RunOutcome, execute

__all__ = ["RunTask", "RunReport", "run_point", "do_task", "interrupted", "main"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunTask:
    """One run to do: the campaign file (absolute path, present at the same path on the
    machine that does it), the run's key (``p001/rep0``), point id, seed, run id
    (``rep<k>-<hex6>``, also the lab's owner mark) and the folder that receives its run
    directory (``<results>/<campaign>/<point>`` where the results are visible, else a
    scratch folder of the worker)."""

    campaign_file: str
    key: str
    point_id: str
    seed: int
    run_id: str
    point_dir: str


@dataclass(frozen=True)
class RunReport:
    """How a run ended: ``ok``, the error text, whether SIGINT/SIGTERM ended it, its run
    directory relative to the task's ``point_dir`` (``<experiment>/<run_id>``), and the host
    name of the machine that did it."""

    key: str
    ok: bool
    error: str | None
    interrupted: bool
    run_dir: str
    host: str


def interrupted(outcome: RunOutcome) -> bool:
    """Whether the run ended because of SIGINT/SIGTERM (testbed.lab.signals.LabInterrupted,
    which runner.execute records in error.json)."""
    err = outcome.run_dir / "error.json"
    return err.exists() and '"LabInterrupted"' in err.read_text(encoding="utf-8")


def run_point(c: Campaign, point: Point, seed: int, point_dir: Path, run_id: str,
              progress: Progress) -> RunOutcome:
    """Run ``point`` of ``c`` with ``seed`` into ``point_dir/<experiment>/<run_id>/``
    (needs root; the lab exists only while it runs), then analyse it (metrics.json) unless a
    signal ended it. Never raises for a failed run: the outcome says it."""
    prep = prepare_point(c.src, point, seed=seed)
    outcome = execute(prep, point_dir, progress, run_id=run_id)
    if not interrupted(outcome):
        _analyze(outcome.run_dir)
    return outcome


def _analyze(run_dir: Path) -> None:
    """Write metrics.json with analysis.analyze_run when this build has it and the runner has
    not already done so."""
    import analysis

    analyze = getattr(analysis, "analyze_run", None)
    if analyze is not None and not (run_dir / "metrics.json").exists():
        analyze(run_dir)


def do_task(task: RunTask, progress: Progress = lambda _m: None) -> RunReport:
    """Load the campaign named by ``task`` (validating it) and do the run (needs root),
    holding the run's writer lock (orchestration.campaign.state) while it writes the run
    directory, released by the kernel also if this process is killed."""
    import socket

    c = load(Path(task.campaign_file))
    point = next((p for p in c.points if p.id == task.point_id), None)
    if point is None:
        raise LookupError(f"{task.campaign_file} has no point {task.point_id} (the file on "
                          "this machine differs from the driver's)")
    point_dir = Path(task.point_dir)
    with holding_writer_lock(point_dir, task.run_id):
        outcome = run_point(c, point, task.seed, point_dir, task.run_id, progress)
    return RunReport(task.key, outcome.ok, outcome.error, interrupted(outcome),
                     str(outcome.run_dir.relative_to(point_dir)), socket.gethostname())


def main(argv: list[str]) -> int:
    """``python -m orchestration.campaign.point TASK.json REPORT.json``: exit 0 when the
    report was written (whatever the run's result), 2 on bad arguments."""
    if len(argv) != 2:
        print("usage: python -m orchestration.campaign.point TASK.json REPORT.json",
              file=sys.stderr)
        return 2
    task = RunTask(**json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    report = do_task(task, progress=lambda m: print(m, file=sys.stderr, flush=True))
    Path(argv[1]).write_text(json.dumps(dataclasses.asdict(report)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
