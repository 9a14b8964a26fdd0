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
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from models.errors import LabError, SpecError, SpecIssue
from models.rundir import write_json_atomic

__all__ = ["STATE_FILE", "WRITER_WAIT_S", "CampaignState", "fingerprint", "holding_writer_lock",
           "wait_for_writer"]

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


class CampaignState:
    """The state of one campaign folder ``root``; :meth:`open` it, then mark runs."""

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

    def start(self, key: str, run_dir: Path, seed: int) -> None:
        """Record that run ``key`` is about to write ``run_dir`` (before it exists)."""
        self.data["runs"][key] = {"status": "running", "seed": seed,
                                  "run_dir": str(run_dir.relative_to(self.root))}
        self.save()

    def finish(self, key: str, ok: bool, error: str | None = None) -> None:
        """Record that run ``key`` ended, successfully or not."""
        self.data["runs"][key].update(status="ok" if ok else "failed", error=error)
        self.save()
