"""A run whose process was SIGKILLed stays ``running`` in its manifest until ``aitb clean``
removes its lab: then it says ``killed`` (the registry names the run directory)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
TOPOLOGY = ROOT / "topologies" / "examples" / "single_switch.yaml"
EXPERIMENT = ROOT / "examples" / "ring_allreduce_quick.yaml"


def _owner_that_dies(state: Path, run_id: str, body: str, *args: Path) -> str:
    """Run, as a separate process that then exits (a dead owner), ``body`` after
    ``reg = Registry(state, run_id)``; ``sys.argv[2]`` is the topology, ``sys.argv[3:]``
    ``args``. Returns its stdout."""
    code = ("import sys\nfrom pathlib import Path\nfrom testbed.lab.registry import Registry\n"
            "from testbed.lab.clean import teardown\nfrom topologies import load_topology\n"
            f"reg = Registry(Path(sys.argv[1]), {run_id!r})\n" + body)
    return subprocess.run([sys.executable, "-c", code, str(state), str(TOPOLOGY),
                           *map(str, args)], check=True, timeout=120, capture_output=True,
                          text=True).stdout


def test_clean_marks_a_dead_owners_run_killed(tmp_path):
    state, run_dir = tmp_path / "state", tmp_path / "results" / "e" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"status": "running"}))
    ok_dir = tmp_path / "results" / "e" / "r2"
    ok_dir.mkdir()
    (ok_dir / "manifest.json").write_text(json.dumps({"status": "ok"}))
    # what only the live run used: its controller's socket, an unfinished atomic write
    wl = run_dir / "workloads" / "0-w"
    wl.mkdir(parents=True)
    os.mknod(wl / "ctl.sock", 0o600 | stat.S_IFSOCK)  # (a bind: sun_path too short here)
    (wl / ".flows.jsonl.a1b2c3d4").write_text("{")
    (wl / "flows.jsonl").write_text("{}\n")
    # an owner that registers a lab with no objects and its run directories, then dies
    _owner_that_dies(state, "hostile1", "reg.create(load_topology(sys.argv[2]))\n"
                     "reg.append([{'kind': 'run_dir', 'path': sys.argv[3]},"
                     " {'kind': 'run_dir', 'path': sys.argv[4]}])\n", run_dir, ok_dir)
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", "--json"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "AITB_STATE_DIR": str(state)})
    assert out.returncode == 0, out.stderr
    assert [r["run_id"] for r in json.loads(out.stdout)["removed"]] == ["hostile1"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "killed" and "aitb clean" in manifest["error"]
    assert sorted(p.name for p in wl.iterdir()) == ["flows.jsonl"]
    assert json.loads((ok_dir / "manifest.json").read_text())["status"] == "ok"


def test_resume_removes_the_lab_of_the_discarded_run(tmp_path, monkeypatch):
    from orchestration.campaign.state import remove_labs_of
    from testbed.lab.registry import Registry

    state, run_dir = tmp_path / "state", tmp_path / "results" / "c" / "p0-r0"
    run_dir.mkdir(parents=True)
    _owner_that_dies(state, "hostile2", "reg.create(load_topology(sys.argv[2]))\n"
                     "reg.append([{'kind': 'run_dir', 'path': sys.argv[3]}])\n", run_dir)
    monkeypatch.setenv("AITB_STATE_DIR", str(state))
    assert remove_labs_of([tmp_path / "results" / "c" / "other"], print) == []
    assert remove_labs_of([run_dir], print) == ["hostile2"]
    assert Registry.runs(state) == []


def test_a_run_killed_after_its_teardown_is_still_found_and_marked(tmp_path):
    """An `aitb run` tears its lab down keeping the owner records (Registry.spend) until its
    manifest has its final status; SIGKILLed in between, `aitb clean` still marks it."""
    state, run_dir = tmp_path / "state", tmp_path / "results" / "e" / "r3"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"status": "running"}))
    out = _owner_that_dies(
        state, "hostile3",
        "reg.create(load_topology(sys.argv[2]), [{'kind': 'run_dir', 'path': sys.argv[3]}])\n"
        "reg.append([{'kind': 'netns', 'node': 'h1', 'name': 'aitb-hostile3-gone'}])\n"
        "report = teardown(reg, keep_owner=True)\n"
        "assert not report.failures and reg.spent(), report\n"
        "print(sorted(r['kind'] for r in reg.records()))\n", run_dir)
    assert out.strip() == "['run', 'run_dir']"  # the owner died here, status unwritten
    cleaned = subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", "hostile3"],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "AITB_STATE_DIR": str(state)})
    assert cleaned.returncode == 0, cleaned.stderr
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "killed"
    assert not (state / "hostile3").exists()


# `aitb run`'s execute, SIGKILLed right after it created the run directory ("dir") or
# right after its first manifest ("manifest"): before the lab, before any namespace
KILLED_AT = """
import os, signal, sys
from pathlib import Path
from orchestration.run import runner
point = sys.argv[1]
real_create, real_write = runner.create_run_dir, runner.write_json_atomic
def create(*args):
    made = real_create(*args)
    if point == "dir":
        os.kill(os.getpid(), signal.SIGKILL)
    return made
def write(path, data):
    real_write(path, data)
    if point == "manifest" and path.name == "manifest.json":
        os.kill(os.getpid(), signal.SIGKILL)
runner.create_run_dir, runner.write_json_atomic = create, write
runner.execute(runner.prepare(Path(sys.argv[2])), Path(sys.argv[3]))
"""


@pytest.mark.parametrize("point", ["dir", "manifest"])
def test_a_run_killed_before_its_lab_is_found_by_clean(tmp_path, point):
    """The registry naming the run directory exists before the directory: a SIGKILL right
    after the directory (or its first manifest) was made still leaves a run that `aitb
    clean` finds; it removes the empty directory or marks the manifest killed. (The
    registry used to be written by the lab's bring-up: such a run stayed `running`, or an
    empty directory, with nothing registered.)"""
    state, results = tmp_path / "state", tmp_path / "results"
    env = {**os.environ, "AITB_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    died = subprocess.run([sys.executable, "-c", KILLED_AT, point, str(EXPERIMENT),
                           str(results)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert died.returncode == -signal.SIGKILL, died.stderr
    [run_dir] = results.glob("*/*")
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", "--json"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert [r["run_id"] for r in json.loads(out.stdout)["removed"]] == \
        [run_dir.name.rsplit("-", 1)[-1]]
    if point == "dir":
        assert not run_dir.exists()
    else:
        assert json.loads((run_dir / "manifest.json").read_text())["status"] == "killed"
    assert not any(state.iterdir())
