"""Scratch named by its owner (models.owned): a SIGKILLed owner's directories go at the next
sweep or `aitb clean`; a live owner's, a reused pid's owner and names of any other shape stay.
Owners are real processes started here and killed by their pid."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from models import owned

ROOT = Path(__file__).resolve().parents[2]

# an owner: makes its scratch as the code under test does, prints the path, then waits
OWNER = """
import sys, time
from pathlib import Path
kind, where = sys.argv[1], Path(sys.argv[2])
if kind == "task":  # a campaign worker's task folder (orchestration.campaign.executors)
    from models.owned import owned_tempdir
    cm = owned_tempdir("task", where)
    path = cm.__enter__()
    (path / "task.json").write_text("{}")
elif kind == "point":
    from models.owned import make_owned_dir
    path = make_owned_dir("point", where)
else:  # the controller's short socket directory for a run directory too deep for sun_path
    import tempfile
    tempfile.tempdir = str(where)
    from traffic_gen.controller import Controller
    deep = where / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True, exist_ok=True)
    ctl = Controller(deep, "k1ll3d", None, {"h1": "198.18.0.1"}, None)
    srv = ctl._listen()
    path = ctl.sock_dir
    assert (path / "ctl.sock").exists()
print(path, flush=True)
time.sleep(600)
"""


class Owner:
    """An owner process of ``kind`` scratch under ``where``; ``path`` is what it made."""

    def __init__(self, kind: str, where: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", OWNER, kind, str(where)],
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.path = Path(self.proc.stdout.readline().strip())

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def end(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self.proc.stdout.close()


@pytest.fixture
def owners():
    made: list[Owner] = []
    yield lambda kind, where: made.append(Owner(kind, where)) or made[-1]
    for o in made:
        o.end()


@pytest.fixture
def short_tmp():
    """A folder of this test with a short path: a socket path must fit sun_path (108 bytes),
    a pytest-xdist worker's tmp_path is longer."""
    path = Path(tempfile.mkdtemp(prefix="owned-test-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("kind", ["task", "point", "controller"])
def test_sweep_removes_a_killed_owners_scratch_and_keeps_a_live_ones(short_tmp, owners, kind):
    tmp_path = short_tmp
    dead, live = owners(kind, tmp_path), owners(kind, tmp_path)
    for o in (dead, live):  # the mark is in the name from the start: pid and start time
        assert o.path.parent == tmp_path and o.path.is_dir(), o.path
        tag, pid, start = owned.owner_of(o.path.name)
        assert (pid, start) == (o.proc.pid, owned.pid_start_time(o.proc.pid))
        assert tag == {"task": "task", "point": "point", "controller": "k1ll3d"}[kind]
    dead.kill()
    assert dead.path.exists()  # nothing removes it on its own
    assert owned.sweep([tmp_path]) == [dead.path]
    assert not dead.path.exists() and live.path.is_dir()
    assert owned.sweep([tmp_path]) == []


def test_sweep_keeps_what_it_did_not_make(tmp_path, owners):
    victim = owners("task", tmp_path)
    victim.kill()
    mark = victim.path.name
    keep = [tmp_path / "aitb-task-abc", tmp_path / "aitb-e16382-dc1-l1",  # other shapes
            tmp_path / "aitb-task-12.34"]
    for p in keep:
        p.mkdir()
    other_user = tmp_path / mark.replace("task", "cal")
    other_user.mkdir()
    if os.geteuid() == 0:
        os.chown(other_user, 65534, 65534)
    else:
        other_user.rmdir()
        other_user = keep[0]
    link = tmp_path / mark.replace("task", "vm")
    link.symlink_to(victim.path)
    me = tmp_path / f"aitb-cal-{owned.owner_mark()}-abcdefgh"  # this process: alive
    me.mkdir()
    assert owned.sweep([tmp_path]) == [victim.path]
    assert all(p.exists() for p in [*keep, other_user, me]) and link.is_symlink()


def test_a_reused_pid_is_not_the_owner(tmp_path):
    """A mark with a live pid but another start time names a process that is gone."""
    start = owned.pid_start_time(os.getpid())
    reused = tmp_path / f"aitb-task-{os.getpid()}.{start + 1}-abcdefgh"
    mine = tmp_path / f"aitb-task-{os.getpid()}.{start}-abcdefgh"
    reused.mkdir()
    mine.mkdir()
    assert owned.sweep([tmp_path]) == [reused]
    assert mine.exists()


def test_sweep_of_one_owner_leaves_the_other_dead_owners(tmp_path, owners):
    a, b = owners("point", tmp_path), owners("point", tmp_path)
    start_a = owned.pid_start_time(a.proc.pid)
    a.kill()
    b.kill()
    assert owned.sweep([tmp_path], owner=(a.proc.pid, start_a)) == [a.path]
    assert b.path.exists()


def test_owned_tempdir_removes_its_directory_on_error(tmp_path):
    with pytest.raises(RuntimeError), owned.owned_tempdir("task", tmp_path) as d:
        (d / "x").write_text("x")
        raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("tag", ["", "UPPER", "a-b", "x" * 17])
def test_bad_tags_are_refused(tmp_path, tag):
    with pytest.raises(ValueError, match="owned scratch tag"):
        owned.make_owned_dir(tag, tmp_path)
    assert owned.tag_or(tag, "ctl") == "ctl"


def test_aitb_clean_removes_a_killed_workers_task_folder_and_keeps_a_live_ones(tmp_path,
                                                                            owners):
    """`aitb clean` (no run id) sweeps the temporary directory: a campaign worker's task
    folder, left by a SIGKILL, goes; a live worker's stays."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    dead, live = owners("task", scratch), owners("task", scratch)
    dead.kill()
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state"), "TMPDIR": str(scratch),
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", "--json"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert str(dead.path) in json.loads(out.stdout)["orphans"]["paths"]
    assert not dead.path.exists() and (live.path / "task.json").exists()


# a lab's owner SIGKILLed inside Registry.create: its files written, the rename not done
KILLED_IN_CREATE = """
import os, signal, sys
from pathlib import Path
from testbed.lab import registry
from topologies import load_topology
registry.os.rename = lambda a, b: os.kill(os.getpid(), signal.SIGKILL)
registry.Registry(Path(sys.argv[1]), "half1").create(load_topology(sys.argv[2]))
"""


def test_a_registry_half_created_is_scratch_that_aitb_clean_removes(tmp_path):
    """The state directory never holds a bare run directory that no registry names (a
    SIGKILL between its mkdir and the owner record used to leave one that `aitb clean`
    could not see): the registry is written in owned scratch and renamed into place."""
    from testbed.lab.registry import Registry

    state = tmp_path / "state"
    env = {**os.environ, "AITB_STATE_DIR": str(state), "PYTHONPATH": str(ROOT),
           "TMPDIR": str(tmp_path)}
    died = subprocess.run([sys.executable, "-c", KILLED_IN_CREATE, str(state),
                           str(ROOT / "topologies" / "examples" / "single_switch.yaml")],
                          env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert died.returncode == -signal.SIGKILL, died.stderr
    [left] = state.iterdir()
    assert owned.owner_of(left.name)[0] == "reg" and owned.owner_dead(left.name)
    assert sorted(p.name for p in left.iterdir()) == ["plan.json", "registry.jsonl"]
    assert Registry.runs(state) == [] and not (state / "half1").exists()
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", "--json"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["orphans"]["paths"] == [str(left)]
    assert list(state.iterdir()) == []


def test_a_run_id_in_use_is_refused_and_leaves_no_scratch(tmp_path):
    from models.errors import LabError
    from testbed.lab.registry import Registry
    from topologies import load_topology

    plan = load_topology(ROOT / "topologies" / "examples" / "single_switch.yaml")
    Registry(tmp_path, "used1").create(plan)
    with pytest.raises(LabError, match="run id used1 is already in use"):
        Registry(tmp_path, "used1").create(plan)
    assert [p.name for p in tmp_path.iterdir()] == ["used1"]
    assert Registry(tmp_path, "used1").owner()[0] == os.getpid()


# a Ray worker's task body (orchestration.campaign.executors.run_on_worker) on a machine
# that does not see the results folder; the point process is a stand-in that waits
WORKER = """
import sys
from orchestration.campaign.executors import run_on_worker
from orchestration.campaign.point import RunTask
sys.executable = sys.argv[1]
run_on_worker(RunTask("/nonexistent/c.yaml", "p0/rep0", "p0", 1, "rep0-abcdef", "unused"),
              sys.argv[2], "token")
"""


def _children(pid: int) -> list[tuple[int, int | None]]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [(int(c), owned.pid_start_time(int(c))) for c in text.split()]


def test_a_killed_campaign_workers_point_and_task_folders_go_at_aitb_clean(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    fake = tmp_path / "point"
    fake.write_text("#!/bin/sh\nexec sleep 600\n")
    fake.chmod(0o755)
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state"), "TMPDIR": str(scratch),
           "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(fake), str(tmp_path / "res")],
                              env=env, cwd=ROOT)
    point: list[tuple[int, int | None]] = []
    try:
        deadline = time.monotonic() + 60  # a bound only
        while not point and time.monotonic() < deadline and worker.poll() is None:
            tasks = list(scratch.glob(f"aitb-task-{worker.pid}.*/task.json"))
            point = _children(worker.pid) if tasks else []
            time.sleep(0.02)
        assert point, "the worker never started its point"
        left = sorted(p.name for p in scratch.iterdir())
        assert [n.split("-")[1] for n in left] == ["point", "task"], left
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        out = subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", "--json"],
                             capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert sorted(Path(p).name for p in json.loads(out.stdout)["orphans"]["paths"]
                      if Path(p).parent == scratch) == left
        assert list(scratch.iterdir()) == []
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        for pid, start in point:  # the stand-in gets SIGTERM from setpriv --pdeathsig
            if owned.pid_alive(pid, start):
                os.kill(pid, signal.SIGKILL)


def test_teardown_removes_a_registered_run_marked_temporary_path_and_refuses_others(
        tmp_path, monkeypatch):
    """A cluster part's observation folder (/tmp/aitb-observe-<part>, registered before it
    exists) goes with the part's teardown; a registered path of another run or of any other
    name is refused, named in the failures, and left."""
    from testbed.lab.clean import teardown
    from testbed.lab.registry import Registry
    from topologies import load_topology

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mine, other, plain = (tmp_path / "aitb-observe-ab12", tmp_path / "aitb-observe-zz99",
                          tmp_path / "observe-ab12")
    for p in (mine, other, plain):
        (p / "captures").mkdir(parents=True)
    reg = Registry(tmp_path / "state", "ab12")
    reg.create(load_topology(ROOT / "topologies" / "examples" / "single_switch.yaml"),
               [{"kind": "path", "node": "(root namespace)", "path": str(p)}
                for p in (mine, other, plain)])
    report = teardown(reg)
    assert not mine.exists() and other.is_dir() and plain.is_dir()
    assert [f.split()[1] for f in report.failures] == [str(other), str(plain)]
