"""``aitb campaign``: many runs of one experiment over a parameter sweep, resumable.

campaign file -> points (grid x zip) -> every point validated and built (prepare_spec, nothing
created) -> runs (points x repetitions, repetition-major) -> each run a normal run directory
``results/<campaign>/<point-id>/<experiment>/rep<k>-<hex6>/`` (runner.execute) -> campaign
state after every run (campaign_state) -> ``aggregate.parquet``/``aggregate.csv`` and plots.
"""

from __future__ import annotations

import fcntl
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from models.errors import AitbError, LabError
from orchestration.campaign.aggregate import run_summary, run_trust, write_tables
from orchestration.campaign.load import Campaign, load
from orchestration.campaign.plots import write_plots
from orchestration.campaign.point import interrupted, run_point
from orchestration.campaign.state import CampaignState, fingerprint
from orchestration.campaign.sweep import Run, plain
from testbed.lab.signals import LabInterrupted

__all__ = ["Campaign", "CampaignInterrupted", "CampaignResult", "load", "run_campaign"]

Progress = Callable[[str], None]


class Executor(Protocol):
    """Does a campaign's runs not yet done (``todo``, in order), marking each in ``state``
    (start before, finish after) and ``result``; raises CampaignInterrupted on a signal."""

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


@dataclass
class CampaignResult:
    """What a campaign did: runs done before (skipped) and now, failures, discarded run
    directories, files written."""

    root: Path
    skipped: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    discarded: list[Path] = field(default_factory=list)
    tables: list[Path] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    # completed runs (keys) the fidelity check called untrustworthy: first reason each
    untrustworthy: dict[str, str] = field(default_factory=dict)


def _fingerprint(c: Campaign) -> str:
    return fingerprint({p.id: p.values for p in c.points}, plain(c.src.base_doc), c.spec.seeds)


def _one_run(c: Campaign, run: Run, state: CampaignState, result: CampaignResult,
             progress: Progress) -> None:
    run_id = f"rep{run.rep}-{secrets.token_hex(3)}"
    point_dir = state.root / run.point.id
    state.start(run.key, point_dir / c.prepared[run.point.id].spec.name / run_id, run.seed)
    progress(f"run {run.key} ({run.point.label() or 'base'}, seed {run.seed})")
    outcome = run_point(c, run.point, run.seed, point_dir, run_id, progress)
    if interrupted(outcome):
        raise CampaignInterrupted(f"interrupted during run {run.key}; run the same command "
                                  "again to resume (that run is redone)",
                                  outcome.exit_code or 130)
    record(state, result, run.key, outcome.ok, outcome.error, progress)


def record(state: CampaignState, result: CampaignResult, key: str, ok: bool,
           error: str | None, progress: Progress) -> None:
    """Mark run ``key`` ended in the state file and in ``result``."""
    state.finish(key, ok, error)
    if ok:
        result.ran.append(key)
    else:
        result.failed[key] = error or "failed"
        progress(f"run {key} failed: {error}")


def run_campaign(c: Campaign, results: Path, progress: Progress = lambda _m: None,
                 executor: Executor | None = None) -> CampaignResult:
    """Run every run of ``c`` not yet completed under ``results/<campaign>/`` (needs root),
    then write the aggregate tables and plots. Completed runs (state ``ok``) are skipped and
    not touched; runs left running or failed by an earlier invocation are discarded and
    redone. Raises :class:`CampaignInterrupted` on SIGINT/SIGTERM (state stays consistent),
    :class:`SpecError` if ``results/<campaign>`` holds a different campaign. ``executor``
    (orchestration.campaign.executors) does the runs not yet done; None: one after the other
    in this process."""
    root = results / c.spec.name
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root):
        state = CampaignState.open(root, c.spec.name, c.src.source, _fingerprint(c))
        remove_labs_of([root / e["run_dir"] for e in state.data["runs"].values()
                        if e["status"] != "ok"], progress)
        result = CampaignResult(root, discarded=state.discard_unfinished())
        for path in result.discarded:
            progress(f"discarded unfinished run {path}")
        try:
            todo = []
            for run in c.runs:
                if state.status(run.key) == "ok":
                    result.skipped.append(run.key)
                else:
                    todo.append(run)
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



def remove_labs_of(run_dirs: list[Path], progress: Callable[[str], None]) -> list[str]:
    """Tear down the labs that unfinished runs ``run_dirs`` left behind (their registry names
    the run directory; testbed.lab.registry) when their owner is dead (a SIGKILLed campaign).
    Returns the run ids removed."""
    from testbed.lab import clean as clean_mod
    from testbed.lab.registry import Registry, state_dir

    wanted = {str(p.resolve()) for p in run_dirs}
    removed = []
    for rid in Registry.runs(state_dir()) if wanted else []:
        reg = Registry(state_dir(), rid)
        if reg.owner_alive() or not any(r.get("kind") == "run_dir" and r.get("path") in wanted
                                        for r in reg.records()):
            continue
        clean_mod.clean(state_dir(), rid)
        removed.append(rid)
        progress(f"removed lab {rid} of a discarded run")
    return removed

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
    rows = []
    for run in c.runs:
        if state.status(run.key) != "ok":
            continue
        run_dir = state.root / state.data["runs"][run.key]["run_dir"]
        summary, origin = run_summary(run_dir)
        trust, why = run_trust(run_dir)
        if trust is False:
            result.untrustworthy[run.key] = why
        rows.append({"point": run.point.id, **run.point.values, "rep": run.rep,
                     "seed": run.seed, "run_dir": str(run_dir), "source": origin,
                     "trustworthy": trust, "untrustworthy_reason": why if trust is False
                     else "", "summary": summary})
    if not rows:
        return
    table = write_tables(state.root, rows, c.spec.swept())
    result.tables = [state.root / n for n in ("aggregate.parquet", "aggregate.csv", "runs.csv")]
    result.plots = write_plots(state.root, c.spec, table)
