"""``aitb campaign``: many runs of one experiment over a parameter sweep, resumable.

campaign file -> points (grid x zip) -> every point validated and built (prepare_spec, nothing
created) -> runs (points x repetitions, repetition-major) -> each run a normal run directory
``results/<campaign>/<point-id>/<experiment>/rep<k>-<hex6>/`` (runner.execute) -> campaign
state after every run (campaign_state) -> ``aggregate.parquet``/``aggregate.csv`` and plots.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from models.errors import AitbError, LabError
from orchestration.campaign.aggregate import write_tables
from orchestration.campaign.load import Campaign, load
from orchestration.campaign.plots import write_plots
from orchestration.campaign.point import interrupted, run_point
from orchestration.campaign.state import CampaignResult, CampaignState, Progress, fingerprint
from orchestration.campaign.sweep import Run, plain
from testbed.lab.signals import LabInterrupted

__all__ = ["Campaign", "CampaignInterrupted", "CampaignResult", "Progress", "load",
           "run_campaign"]


class Executor(Protocol):
    """Does a campaign's runs not yet done (``todo``, in order), each through ``state``
    (:meth:`CampaignState.begin` before, :meth:`CampaignState.end` after); raises
    CampaignInterrupted on a signal."""

    def run(self, c: Campaign, todo: list[Run], state: CampaignState,
            result: CampaignResult, progress: Progress) -> None:
        """Do ``todo``."""


class CampaignInterrupted(AitbError):
    """SIGINT/SIGTERM during a campaign: the current run was discarded-to-be; exit 128 +
    the signal (130, 143), as ``aitb run`` does."""

    exit_code = 130

    def __init__(self, message: str, exit_code: int = 130) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _fingerprint(c: Campaign) -> str:
    return fingerprint({p.id: p.values for p in c.points}, plain(c.src.base_doc), c.spec.seeds)


def _one_run(c: Campaign, run: Run, state: CampaignState, result: CampaignResult,
             progress: Progress) -> None:
    point_dir, run_id = state.begin(run, c.prepared[run.point.id].spec.name)
    progress(f"run {run.key} ({run.point.label() or 'base'}, seed {run.seed})")
    outcome = run_point(c, run.point, run.seed, point_dir, run_id, progress)
    if interrupted(outcome):
        raise CampaignInterrupted(f"interrupted during run {run.key}; run the same command "
                                  "again to resume (that run is redone)",
                                  outcome.exit_code or 130)
    state.end(result, run.key, outcome.ok, outcome.error, progress)


def run_campaign(c: Campaign, results: Path, progress: Progress = lambda _m: None,
                 executor: Executor | None = None) -> CampaignResult:
    """Run every run of ``c`` not yet completed under ``results/<campaign>/`` (needs root),
    then write the aggregate tables and plots. Completed runs (state ``ok``) are skipped and
    not touched; runs left running or failed by an earlier invocation are discarded and
    redone. Raises :class:`CampaignInterrupted` on SIGINT/SIGTERM (state stays consistent),
    :class:`SpecError` if ``results/<campaign>`` holds a different campaign. ``executor``
    (orchestration.campaign.executors) does the runs not yet done; None: one after the other
    in this process. The steps are the state's (orchestration.campaign.state)."""
    root = results / c.spec.name
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root):
        state = CampaignState.open(root, c.spec.name, c.src.source, _fingerprint(c))
        result = state.resume(progress)
        try:
            todo = state.todo(c.runs, result)
            if executor is None:
                for run in todo:
                    _one_run(c, run, state, result, progress)
            else:
                executor.run(c, todo, state, result, progress)
        except (KeyboardInterrupt, LabInterrupted) as exc:  # the latter: before a manifest
            raise CampaignInterrupted("interrupted; run the same command again to resume",
                                      getattr(exc, "exit_code", 130)) from None
        finish(c, state, result)
    return result


@contextmanager
def _exclusive(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``root/.lock`` (flock; released when the process ends, even
    if killed), so that two invocations never work on one campaign folder at once. Raises
    :class:`LabError` if another holds it."""
    with (root / ".lock").open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LabError(f"another aitb campaign is working on {root}; wait for it or "
                           "stop it first") from None
        yield


def finish(c: Campaign, state: CampaignState, result: CampaignResult) -> None:
    """Aggregate the completed runs into tables and plots under the campaign folder."""
    rows = state.completed_rows(c.runs, result)
    if not rows:
        return
    table = write_tables(state.root, rows, c.spec.swept())
    result.tables = [state.root / n for n in ("aggregate.parquet", "aggregate.csv", "runs.csv")]
    result.plots = write_plots(state.root, c.spec, table)
