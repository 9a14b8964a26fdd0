"""A discarded run's directory is deleted only once the process writing it has ended
(orchestration.campaign.state): a real child process holds the writer lock and writes into the
run directory after the resume began; the resume waits for it, then deletes, and nothing is
recreated. No root, no network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from models.errors import LabError
from orchestration.campaign.state import CampaignState, wait_for_writer

# the dying point: takes the lock, says so, waits for the go (a file), writes a late manifest
WRITER = """
import sys, time
from pathlib import Path
from orchestration.campaign.state import holding_writer_lock
point_dir, run_dir, go = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
with holding_writer_lock(point_dir, run_dir.name):
    print("held", flush=True)
    while not go.exists():
        time.sleep(0.01)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_text('{"status": "interrupted"}')
"""


def _state(root: Path) -> tuple[CampaignState, Path]:
    state = CampaignState.open(root, "c", "c.yaml", "fp")
    run_dir = root / "p000" / "exp" / "rep0-abc123"
    state.start("p000/rep0", run_dir, 1)
    run_dir.mkdir(parents=True)
    return state, run_dir


def _writer(root: Path, run_dir: Path, go: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root / "p000"), str(run_dir),
                             str(go)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_discard_waits_for_the_writer_then_deletes(tmp_path):
    state, run_dir = _state(tmp_path)
    go = tmp_path / "go"
    proc = _writer(tmp_path, run_dir, go)
    try:
        go.touch()  # the writer's late write happens while discard waits on its lock
        assert state.discard_unfinished() == [run_dir]
        assert proc.poll() is not None  # it had ended before the deletion
    finally:
        proc.kill()
        proc.wait()
    assert not run_dir.exists() and not (tmp_path / "p000" / ".rep0-abc123.writer").exists()
    assert state.data["runs"] == {}


def test_a_writer_that_never_ends_is_named_and_nothing_is_deleted(tmp_path):
    state, run_dir = _state(tmp_path)
    proc = _writer(tmp_path, run_dir, tmp_path / "never")
    try:
        with pytest.raises(LabError, match=f"written by process {proc.pid}"):
            wait_for_writer(run_dir, wait_s=0.5)
        assert run_dir.exists()
    finally:
        proc.kill()
        proc.wait()
    wait_for_writer(run_dir, wait_s=0.5)  # killed: the kernel released its lock


def test_no_lock_file_no_wait(tmp_path):
    wait_for_writer(tmp_path / "p" / "exp" / "rep0-000000", wait_s=0.0)


def test_a_writer_that_ends_normally_removes_its_lock(tmp_path):
    from orchestration.campaign.state import holding_writer_lock

    with holding_writer_lock(tmp_path / "p000", "rep0-abc123"):
        assert (tmp_path / "p000" / ".rep0-abc123.writer").read_text() == str(os.getpid())
    assert not (tmp_path / "p000" / ".rep0-abc123.writer").exists()
