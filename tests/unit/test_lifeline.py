"""Children that cannot outlive their owner unseen (models.lifeline.spawn): dying with a
SIGKILLed owner, registered before they exec, never run if the owner dies before it has
registered them, and no Python code between fork and exec; the controller and the lab's
launcher use it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + 30  # a bound for a hang, not a margin: a loaded box
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _gone(pid)


def _owner(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_child_dies_with_a_sigkilled_parent():
    code = ("import signal, sys, time\n"
            "from models.lifeline import spawn\n"
            "p = spawn([sys.executable, '-c', 'import time; time.sleep(120)'],"
            " pdeathsig=signal.SIGKILL)\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(120)\n")
    owner = _owner(code)
    child = int(owner.stdout.readline())
    try:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        assert _wait_gone(child)
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


def test_registered_child_is_in_the_registry_before_it_execs(tmp_path):
    from models.lifeline import spawn

    reg = tmp_path / "registry.jsonl"
    reg.write_text('{"kind": "run"}\n')
    code = "import sys; sys.stdout.write(open(sys.argv[1]).read())"

    def register(pid, start):
        with reg.open("a") as f:
            f.write(json.dumps({"kind": "process", "node": "h0", "pid": pid,
                                "start": start}) + "\n")

    proc = spawn([sys.executable, "-c", code, str(reg)], register=register,
                 stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    lines = [json.loads(ln) for ln in out.splitlines()]
    assert lines[0] == {"kind": "run"}
    assert lines[1]["kind"] == "process" and lines[1]["pid"] == proc.pid  # what it read
    assert lines[1]["start"] > 0


def test_a_child_whose_registration_fails_never_runs(tmp_path):
    from models.lifeline import spawn

    marker = tmp_path / "ran"

    def register(pid, start):
        raise OSError("registry full (test)")

    with pytest.raises(OSError, match="registry full"):
        spawn([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], register=register)
    assert not marker.exists()


def test_an_owner_killed_before_it_registered_the_child_leaves_nothing_running(tmp_path):
    """The owner is SIGKILLed at the worst instant: the child exists, the registry does not
    know it yet. The program must never run, and the held child must end by itself."""
    marker = tmp_path / "ran"
    code = ("import os, signal, sys\n"
            "from models.lifeline import spawn\n"
            "def register(pid, start):\n"
            "    print(pid, flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "spawn(['touch', sys.argv[1]], register=register)\n")
    owner = _owner(code, str(marker))
    child = int(owner.stdout.readline())
    owner.wait()
    assert owner.returncode == -signal.SIGKILL
    assert _wait_gone(child)
    assert not marker.exists()


def test_no_python_code_runs_between_fork_and_exec(tmp_path):
    """A multi-threaded parent: the child of Lab.popen_host and of a launcher's popen_host
    must run no Python code before exec. An after-in-child fork hook is Python run exactly
    there (with a preexec_fn, Popen runs them); it leaves a marker file if it ever runs."""
    marker = tmp_path / "python-ran-in-child"
    code = ("import os, sys, threading, time\n"
            "from pathlib import Path\n"
            "from models.plan import LabPlan, NodePlan\n"
            "from testbed.lab.lab import Lab\n"
            "from traffic_gen.launch import LocalLauncher\n"
            "stop = threading.Event()\n"
            "threading.Thread(target=stop.wait, daemon=True).start()  # multi-threaded\n"
            "os.register_at_fork(after_in_child=lambda: open(sys.argv[1], 'w').close())\n"
            "lab = Lab(LabPlan('x', nodes=(NodePlan('h1', 'host'),), links=()), 'forkx',"
            " Path(sys.argv[2]))\n"
            "lab.registry.create(lab.plan)\n"
            "a = lab.popen_host(['true'])\n"
            "b = LocalLauncher().popen_host(['true'])\n"
            "print(a.wait(), b.wait(), flush=True)\n"
            "print(sum(r['kind'] == 'process' for r in lab.registry.records()))\n")
    owner = _owner(code, str(marker), str(tmp_path / "state"))
    out, err = owner.communicate(timeout=120)
    assert owner.returncode == 0, err
    assert out.split() == ["0", "0", "1"]  # both ran; the lab's is registered
    assert not marker.exists()


def test_a_missing_program_is_refused_as_popen_would(tmp_path):
    from models.lifeline import spawn

    with pytest.raises(FileNotFoundError):
        spawn(["aitb-no-such-program-xyz"], register=lambda pid, start: None)
    with pytest.raises(PermissionError):
        spawn([str(tmp_path)])


def test_controller_starts_starters_through_the_launcher(tmp_path):
    from traffic_gen import controller

    seen = []

    class Launcher:
        def popen_host(self, argv, **kw):
            seen.append(argv)
            raise OSError("stop here (test)")

    ctl = object.__new__(controller.Controller)
    ctl.run_dir, ctl.kick_procs, ctl.kick_paths = tmp_path, [], []
    ctl.sock_path = tmp_path / "ctl.sock"
    ctl.launcher = Launcher()

    class Opt:
        python, spin_s, rt_priority, agent_start_timeout_s = sys.executable, 2e-4, 0, 1.0

    ctl.opt = Opt()
    with pytest.raises(OSError):
        ctl._start_kickers()
    assert seen and "traffic_gen.burst_starter" in seen[0]


def test_lab_launcher_registers_starters_and_ties_them_to_the_owner():
    import signal as sig

    from traffic_gen.launch import LabLauncher

    got = {}

    class Lab:
        def popen_host(self, argv, **kw):
            got.update(kw, argv=argv)
            return "proc"

    assert LabLauncher(Lab()).popen_host(["x"], stdout=None) == "proc"
    assert got["pdeathsig"] == sig.SIGKILL and got["record"] == {"role": "starter"}
