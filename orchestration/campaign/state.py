"""The campaign state file ``results/<campaign>/campaign-state.json``: which runs are done.

Written atomically (models.rundir.write_json_atomic) before a run starts (status
``running``, with its run directory) and after it ends (``ok`` or ``failed``). A re-run of the
same campaign reads it: ``ok`` runs are skipped and never touched; ``running`` runs (the process
died or was interrupted) and ``failed`` runs are discarded (their run directory deleted) and
redone. A run directory is deleted only once no process writes it: the process doing a run
holds its writer lock (:func:`holding_writer_lock`) while it writes, so a killed campaign's
point that is still tearing its lab down is waited for, never raced. The state also holds the
campaign's fingerprint (points, base experiment, seed policy): resuming into a folder whose
fingerprint differs is refused, so that results of two different campaigns never mix.

:class:`CampaignState` owns the steps of a campaign invocation, in this order: :meth:`open`,
:meth:`resume` (tear down what killed runs left, discard their directories), :meth:`todo`
(the runs not done yet), per run :meth:`begin` and :meth:`end` (or :meth:`forget`, for a run
to be handed out again), and :meth:`completed_rows` for the aggregate. The runner
(orchestration.campaign.runner) and the executors only call these.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models.errors import LabError, SpecError, SpecIssue
from models.rundir import write_json_atomic

if TYPE_CHECKING:
    from orchestration.campaign.sweep import Run

__all__ = ["STATE_FILE", "WRITER_WAIT_S", "CampaignResult", "CampaignState", "Progress",
           "fingerprint", "holding_writer_lock", "remove_labs_of", "wait_for_writer"]

Progress = Callable[[str], None]

STATE_FILE = "campaign-state.json"
WRITER_WAIT_S = 600.0  # longest a resumed campaign waits for a dying point's teardown


def _writer_lock(point_dir: Path, run_id: str) -> Path:
    return point_dir / f".{run_id}.writer"


@contextmanager
def holding_writer_lock(point_dir: Path, run_id: str) -> Iterator[None]:
    """Hold an exclusive flock on ``point_dir/.<run_id>.writer`` (this pid written in it)
    while the run ``point_dir/<experiment>/<run_id>`` is written; the kernel releases it when
    this process ends, however it ends (SIGKILL included). Creates ``point_dir``; removes the
    lock file when the block ends (its writes done), before releasing the lock."""
    point_dir.mkdir(parents=True, exist_ok=True)
    lock = _writer_lock(point_dir, run_id)
    with lock.open("a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.truncate(0)
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)


def wait_for_writer(run_dir: Path, wait_s: float = WRITER_WAIT_S) -> None:
    """Return once no process holds the writer lock of ``run_dir``
    (``<point_dir>/<experiment>/<run_id>``), removing the lock file; at once if there is none.
    Raises :class:`LabError` naming the writer's pid if it still holds it after ``wait_s``."""
    lock = _writer_lock(run_dir.parent.parent, run_dir.name)
    try:
        fh = lock.open("r")
    except FileNotFoundError:
        return
    with fh:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabError(
                        f"{run_dir} is still being written by process {fh.read().strip()} "
                        f"(the point of an earlier campaign run) after {wait_s:.0f} s; "
                        "wait for it to end, or end that process, then resume") from None
                time.sleep(0.2)
        lock.unlink(missing_ok=True)


def fingerprint(points: dict[str, dict[str, Any]], base: Any, seeds: str) -> str:
    """sha256 of the points (id -> swept values), the base experiment mapping (plain JSON
    types) and the seed policy: what must not change between a campaign and its resumption.
    The number of repetitions may grow."""
    text = json.dumps({"points": points, "base": base, "seeds": seeds}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()


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


def remove_labs_of(run_dirs: list[Path], progress: Progress) -> list[str]:
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


class CampaignState:
    """The state of one campaign folder ``root``, and the steps of a campaign invocation
    over it (module docstring): :meth:`open` it, :meth:`resume`, then mark runs."""

    def __init__(self, root: Path, data: dict[str, Any]) -> None:
        self.root = root
        self.data = data

    @property
    def path(self) -> Path:
        """The state file."""
        return self.root / STATE_FILE

    @classmethod
    def open(cls, root: Path, campaign: str, source: str, fp: str) -> CampaignState:
        """Read ``root``'s state (or start one; creates ``root``). Raises :class:`SpecError`
        naming ``source`` when ``root`` holds another campaign or a different version of this
        one (its fingerprint ``fp`` differs)."""
        path = root / STATE_FILE
        if not path.exists():
            root.mkdir(parents=True, exist_ok=True)
            state = cls(root, {"schema_version": 1, "campaign": campaign, "source": source,
                               "fingerprint": fp, "runs": {}})
            state.save()
            return state
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("campaign") != campaign or data.get("fingerprint") != fp:
            which = "another" if data.get("campaign") != campaign \
                else "a different version of this"
            raise SpecError(SpecIssue(
                f"{root} holds results of {which} campaign (points, base experiment or "
                "seed policy differ); keep them: give another --results folder, or rename "
                "the campaign", file=source))
        return cls(root, data)

    def save(self) -> None:
        """Write the state file atomically."""
        write_json_atomic(self.path, self.data)

    def status(self, key: str) -> str | None:
        """``ok``, ``failed``, ``running`` or None (never started) for run ``key``."""
        entry = self.data["runs"].get(key)
        return entry["status"] if entry else None

    def run_dir(self, key: str) -> Path | None:
        """The run directory of ``key``, or None."""
        entry = self.data["runs"].get(key)
        return self.root / entry["run_dir"] if entry else None

    def done(self) -> list[str]:
        """Keys of the runs that completed (status ok)."""
        return [k for k, e in self.data["runs"].items() if e["status"] == "ok"]

    def discard_unfinished(self) -> list[Path]:
        """Delete the run directories of runs left ``running`` or ``failed`` and forget those
        runs (they will be redone), each once its writer has ended (:func:`wait_for_writer`,
        which may raise LabError). Returns the directories deleted. Touches nothing else."""
        gone = []
        for key, entry in list(self.data["runs"].items()):
            if entry["status"] == "ok":
                continue
            path = self.root / entry["run_dir"]
            wait_for_writer(path)
            if path.exists():
                shutil.rmtree(path)
                gone.append(path)
            del self.data["runs"][key]
        self.save()
        return gone

    def resume(self, progress: Progress) -> CampaignResult:
        """The first step of an invocation: tear down the labs that runs left ``running`` or
        ``failed`` by a killed invocation still hold (:func:`remove_labs_of`), then delete
        those runs' directories (:meth:`discard_unfinished`, which may raise LabError).
        Returns the invocation's result, listing what was discarded."""
        remove_labs_of([self.root / e["run_dir"] for e in self.data["runs"].values()
                        if e["status"] != "ok"], progress)
        result = CampaignResult(self.root, discarded=self.discard_unfinished())
        for path in result.discarded:
            progress(f"discarded unfinished run {path}")
        return result

    def todo(self, runs: Sequence[Run], result: CampaignResult) -> list[Run]:
        """``runs`` not completed yet, in order; the completed ones go to
        ``result.skipped``."""
        out = []
        for run in runs:
            if self.status(run.key) == "ok":
                result.skipped.append(run.key)
            else:
                out.append(run)
        return out

    def begin(self, run: Run, experiment: str) -> tuple[Path, str]:
        """Hand out ``run``: a fresh run id (``rep<k>-<hex6>``), marked ``running`` with its
        run directory ``<root>/<point>/<experiment>/<run id>`` before that exists. Returns
        (the point's directory, the run id)."""
        run_id = f"rep{run.rep}-{secrets.token_hex(3)}"
        point_dir = self.root / run.point.id
        self.start(run.key, point_dir / experiment / run_id, run.seed)
        return point_dir, run_id

    def end(self, result: CampaignResult, key: str, ok: bool, error: str | None,
            progress: Progress) -> None:
        """Mark run ``key`` ended, in the state file and in ``result``."""
        self.finish(key, ok, error)
        if ok:
            result.ran.append(key)
        else:
            result.failed[key] = error or "failed"
            progress(f"run {key} failed: {error}")

    def forget(self, key: str) -> None:
        """Delete what a lost run left of its run directory once its writer has ended
        (:func:`wait_for_writer`; a lost worker's point process gets SIGTERM and tears its
        lab down first), and forget the run, so that it can be handed out again."""
        path = self.run_dir(key) or self.root / key
        wait_for_writer(path)
        shutil.rmtree(path, ignore_errors=True)
        self.data["runs"].pop(key, None)
        self.save()

    def completed_rows(self, runs: Sequence[Run], result: CampaignResult) -> list[dict[str, Any]]:
        """One row per completed run of ``runs`` for the aggregate (orchestration.campaign.
        aggregate.write_tables): the point's swept values, repetition, seed, run directory,
        the summary of ``metrics.json`` (or of the records) and the fidelity verdict. Runs
        the fidelity check called untrustworthy also go to ``result.untrustworthy``."""
        # here, not at the top: a point's process imports this module for its writer lock,
        # and the aggregate's pandas/scipy would slow its start
        from orchestration.campaign.aggregate import run_summary, run_trust

        rows = []
        for run in runs:
            if self.status(run.key) != "ok":
                continue
            run_dir = self.root / self.data["runs"][run.key]["run_dir"]
            summary, origin = run_summary(run_dir)
            trust, why = run_trust(run_dir)
            if trust is False:
                result.untrustworthy[run.key] = why
            rows.append({"point": run.point.id, **run.point.values, "rep": run.rep,
                         "seed": run.seed, "run_dir": str(run_dir), "source": origin,
                         "trustworthy": trust, "untrustworthy_reason": why if trust is False
                         else "", "summary": summary})
        return rows

    def start(self, key: str, run_dir: Path, seed: int) -> None:
        """Record that run ``key`` is about to write ``run_dir`` (before it exists)."""
        self.data["runs"][key] = {"status": "running", "seed": seed,
                                  "run_dir": str(run_dir.relative_to(self.root))}
        self.save()

    def finish(self, key: str, ok: bool, error: str | None = None) -> None:
        """Record that run ``key`` ended, successfully or not."""
        self.data["runs"][key].update(status="ok" if ok else "failed", error=error)
        self.save()
