"""Ownership records of one run: ``<state_dir>/<run_id>/registry.jsonl`` and ``plan.json``.

Every object a run creates is appended (write, flush, fsync) before or the moment it exists,
so that after a SIGKILL of the owner ``aitb clean`` can remove exactly those objects by name
(namespaces) or by pid and start time (processes), and nothing else. Records::

    {"kind": "run", "run_id": ..., "owner_pid": ..., "owner_start": ..., "time": ...}
    {"kind": "netns", "node": ..., "name": ...}
    {"kind": "ifb", "node": ..., "ifname": ...}            (deleted with its namespace)
    {"kind": "process", "node": ..., "pid": ..., "start": ..., "argv": [...],
     "signal": "KILL"}                                        (optional; default TERM)
    {"kind": "detached"}                                    (deploy left it up on purpose)
    {"kind": "ovs", "node": ..., "datapath": "system"|"netdev"}   (a fact, nothing to remove)
    {"kind": "run_dir", "path": ...}      (an `aitb run`'s folder: clean marks it killed)
    {"kind": "path", "node": ..., "path": ...}   (removed: under /var/tmp/frr, or a temporary
                                          directory's aitb-<word>-<run id>; testbed.lab.clean)

The registry directory itself appears complete (written as owned scratch, models.owned, and
renamed into place: :meth:`Registry.create`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from models.errors import LabError
from models.owned import make_owned_dir, pid_alive, pid_start_time
from models.plan import LabPlan, plan_from_dict, plan_to_dict

__all__ = ["unknown_name", "Registry", "state_dir", "pid_start_time", "pid_alive", "RUN_ID_RE",
           "DEFAULT_STATE_DIR"]

DEFAULT_STATE_DIR = Path("/run/aitb")


def state_dir() -> Path:
    """Where runs keep their registries: ``$AITB_STATE_DIR`` if set, else /run/aitb. Every
    command (run, campaign, topo deploy, clean) reads it here."""
    return Path(os.environ.get("AITB_STATE_DIR") or str(DEFAULT_STATE_DIR))
RUN_ID_RE = re.compile(r"^[a-z0-9]{1,12}$")


def unknown_name(message: str) -> LabError:
    """A LabError for an unknown run id or node: bad input, so the CLI exits with 2."""
    err = LabError(message)
    err.exit_code = 2
    return err


def _append(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append ``records`` to the registry file ``path`` durably (one write, flush, fsync)."""
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    with open(path, "ab+") as f:
        if f.seek(0, os.SEEK_END) > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":  # a torn line from a crash: start a fresh one
                data = b"\n" + data
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class Registry:
    """The records of run ``run_id`` under ``state_dir``."""

    def __init__(self, state_dir: Path, run_id: str) -> None:
        if not RUN_ID_RE.match(run_id):
            raise LabError(f"run id {run_id!r} must be 1-12 characters of [a-z0-9]")
        self.dir = Path(state_dir) / run_id
        self.run_id = run_id
        self.path = self.dir / "registry.jsonl"

    def create(self, plan: LabPlan, records: Iterable[dict[str, Any]] = ()) -> None:
        """Start the run: directory, plan.json and the owner record (this process), with
        ``records`` (e.g. the run directory ``aitb clean`` marks killed) in the same write.
        The directory appears complete or not at all: it is written as owned scratch
        (``<state_dir>/aitb-reg-<pid>.<start>-*``, models.owned) and renamed to its run id,
        so a SIGKILL at any instant leaves a run ``aitb clean`` finds by its registry or
        scratch it sweeps, never a bare directory. Raises LabError if the run id is already
        in use."""
        in_use = LabError(f"run id {self.run_id} is already in use ({self.dir} exists)")
        if self.dir.exists():
            raise in_use
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        staging = make_owned_dir("reg", self.dir.parent)
        try:
            os.chmod(staging, 0o755)  # as a plain mkdir by root: readable, as before
            (staging / "plan.json").write_text(json.dumps(plan_to_dict(plan)))
            pid = os.getpid()
            _append(staging / self.path.name,
                    [{"kind": "run", "run_id": self.run_id, "owner_pid": pid,
                      "owner_start": pid_start_time(pid), "time": time.time()}, *records])
            os.rename(staging, self.dir)  # fails on a directory with anything in it
        except BaseException as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOTEMPTY, errno.EEXIST,
                                                          errno.ENOTDIR):
                raise in_use from None
            raise

    def write_plan(self, plan: LabPlan) -> None:
        """(Re)write the run's plan.json (what attach, inspect and exec read)."""
        (self.dir / "plan.json").write_text(json.dumps(plan_to_dict(plan)))

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Append ``records`` durably (one write, flush, fsync)."""
        _append(self.path, records)

    def records(self) -> list[dict[str, Any]]:
        """All records in order; a torn last line (crash mid-write) is ignored."""
        out = []
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        for line in lines:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def plan(self) -> LabPlan:
        """The run's plan (plan.json); raises LabError if it is missing."""
        try:
            return plan_from_dict(json.loads((self.dir / "plan.json").read_text()))
        except FileNotFoundError:
            raise LabError(f"run {self.run_id} has no plan.json in {self.dir}") from None

    def owner(self) -> tuple[int | None, int | None, bool]:
        """(owner pid, its start time, detached?) of the run."""
        pid = start = None
        detached = False
        for r in self.records():
            if r["kind"] == "run":
                pid, start = r["owner_pid"], r["owner_start"]
            elif r["kind"] == "detached":
                detached = True
        return pid, start, detached

    def owner_alive(self) -> bool:
        """True if the owner process still runs and the run was not detached."""
        pid, start, detached = self.owner()
        return not detached and pid is not None and pid_alive(pid, start)

    OWNER_KINDS = ("run", "run_dir")

    def spend(self) -> None:
        """Keep only the owner records (``run``, ``run_dir``): everything else was removed.
        An `aitb run` holds its registry so until its manifest has its final status: if it
        is SIGKILLed meanwhile, ``aitb clean`` still finds the run (nothing left to remove)
        and marks its manifest killed. Atomic (write, fsync, rename)."""
        keep = [r for r in self.records() if r.get("kind") in self.OWNER_KINDS]
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write("".join(json.dumps(r) + "\n" for r in keep).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def spent(self) -> bool:
        """True if the registry holds nothing but owner records (or no longer exists)."""
        return all(r.get("kind") in self.OWNER_KINDS for r in self.records())

    def remove(self) -> None:
        """Delete the run's directory (after a complete teardown)."""
        if self.dir.exists():
            shutil.rmtree(self.dir)

    @staticmethod
    def runs(state_dir: Path) -> list[str]:
        """Run ids with a registry under ``state_dir``, sorted (not a registry still being
        created: :meth:`create`)."""
        try:
            return sorted(p.name for p in Path(state_dir).iterdir()
                          if RUN_ID_RE.match(p.name) and (p / "registry.jsonl").exists())
        except FileNotFoundError:
            return []
