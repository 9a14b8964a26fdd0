"""The run directory ``results/<experiment>/<run-id>/``, the one module that owns its contract:
created exclusively (runs never overwrite each other), its record files' names
(:data:`RECORD_FILES`), JSONL appended and read one way (:func:`append_jsonl`,
:func:`read_jsonl`), JSON written atomically with one NaN policy (:func:`write_json_atomic`:
NaN and infinities become null, "no value"), and ``manifest.json`` (what ran, where, with which
software and kernel). Every writer and reader of a run directory, in every layer, uses these."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import re
import secrets
import stat
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from models import __version__
from models.atomic import write_text_atomic

__all__ = ["RECORD_FILES", "append_jsonl", "read_jsonl", "mark_killed", "remove_dead_files",
           "finite", "new_run_id", "create_run_dir", "write_json_atomic", "host_facts",
           "git_revision"]

PROJECT_DIR = Path(__file__).resolve().parents[1]

# record kind -> its JSONL file in the run directory (one line per record, models.records and
# models.requests; ``apps`` are the lines of ``kind: app`` workloads)
RECORD_FILES: dict[str, str] = {
    "flows": "flows.jsonl", "collectives": "collectives.jsonl", "bursts": "bursts.jsonl",
    "timeline": "timeline.jsonl", "failures": "failures.jsonl", "rounds": "rounds.jsonl",
    "requests": "requests.jsonl", "apps": "apps.jsonl"}


def append_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Append ``rows`` to ``path`` as one strict-JSON line each (NaN -> null, as
    :func:`write_json_atomic`), creating the file; flushed when this returns."""
    with path.open("a", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(finite(row), default=str, allow_nan=False) + "\n")


def read_jsonl(path: Path, warnings: list[str] | None = None) -> list[dict[str, Any]]:
    """The JSON objects of the lines of ``path``, in order; [] if the file is absent. Blank
    lines are skipped. A line that is not a JSON object (a run killed mid-write) raises
    ValueError naming ``path`` and the line number, unless ``warnings`` is given: then it is
    skipped and named there."""
    if not path.is_file():
        return []
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                problem = None if isinstance(rec, dict) else "not a JSON object"
            except json.JSONDecodeError as exc:
                problem = f"not JSON ({exc.msg})"
            if problem is None:
                rows.append(rec)
            elif warnings is None:
                raise ValueError(f"{path}:{lineno}: {problem}")
            else:
                warnings.append(f"{path}:{lineno}: skipped, {problem}")
    return rows


def new_run_id() -> str:
    """``YYYYmmddTHHMMSS-xxxxxx``: sortable by start time; the 6 hex digits (also the lab's
    owner mark) make two runs started in the same second distinct."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def create_run_dir(results_dir: Path, experiment: str, run_id: str) -> Path:
    """Create ``results_dir/experiment/run_id`` and return it. Raises FileExistsError if it
    already exists (never reuses a run directory)."""
    parent = results_dir / experiment
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / run_id
    path.mkdir()
    return path


def finite(value: Any) -> Any:
    """``value`` with NaN/inf floats as None, recursively: strict JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def write_json_atomic(path: Path, data: Any, indent: int = 2) -> None:
    """:func:`write_text_atomic` of ``data`` as indented, strict JSON (NaN and infinities,
    which JSON cannot hold, become null: the one NaN policy of a run directory)."""
    text = json.dumps(finite(data), indent=indent, default=str, allow_nan=False)
    write_text_atomic(path, text + "\n")


def remove_if_empty(run_dir: Path) -> bool:
    """Delete ``run_dir`` if it holds nothing but the temporary files of an unfinished atomic
    write (``.name.xxxx``, :mod:`models.atomic`): a run killed between creating its directory
    and writing its first manifest. Returns whether it was removed."""
    try:
        entries = list(run_dir.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return False
    if any(not (p.name.startswith(".") and p.is_file()) for p in entries):
        return False
    for p in entries:
        p.unlink(missing_ok=True)
    run_dir.rmdir()
    return True


def mark_killed(run_dir: Path, by: str) -> bool:
    """Set the manifest of ``run_dir`` from ``running`` to ``killed`` (its process ended
    without writing a status: SIGKILL, a power cut), naming ``by`` (who found it, e.g. "aitb
    clean") in ``error``; a run directory killed before its first manifest (empty, see
    :func:`remove_if_empty`) is removed. Returns whether it changed anything; an unreadable
    manifest or another status is left alone."""
    path = run_dir / "manifest.json"
    if not path.exists():
        return remove_if_empty(run_dir)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or manifest.get("status") != "running":
        return False
    manifest.update(status="killed", error="the run's process ended without a status "
                    f"(killed); its lab was removed by {by}", ended_at=time.time())
    write_json_atomic(path, manifest)
    remove_dead_files(run_dir)
    return True


_ATOMIC_TMP_RE = re.compile(r"\..+\.[a-z0-9_]{8}")  # models.atomic's mkstemp(prefix=".<name>.")


def remove_dead_files(run_dir: Path) -> list[Path]:
    """Remove, anywhere under the directory of a run whose process is dead, what only a live
    run uses: Unix sockets (the controller's ``ctl.sock``, its starters' ``kick<k>.sock``:
    nothing listens on them any more) and the temporary files of unfinished atomic writes
    (``.<name>.XXXXXXXX``, models.atomic). Returns the paths removed; one that cannot be
    removed is skipped. Never follows a symbolic link."""
    removed = []
    for top, _dirs, files in os.walk(run_dir):
        for name in files:
            path = Path(top) / name
            try:
                mode = path.lstat().st_mode
                if stat.S_ISSOCK(mode) or (stat.S_ISREG(mode) and _ATOMIC_TMP_RE.fullmatch(name)):
                    path.unlink()
                    removed.append(path)
            except OSError:
                continue
    return removed


def git_revision() -> str | None:
    """The checkout's commit (with ``-dirty`` if modified), or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(PROJECT_DIR), "describe", "--always", "--dirty",
                              "--abbrev=12"], capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def host_facts() -> Mapping[str, Any]:
    """aitb version, git revision, kernel release, CPU model and count, whether this runs in
    the stock-kernel VM (AITB_IN_VM) and with which acceleration."""
    return {"aitb_version": __version__, "git_revision": git_revision(),
            "kernel": platform.release(), "machine": platform.machine(),
            "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "vm": os.environ.get("AITB_IN_VM") or None}
