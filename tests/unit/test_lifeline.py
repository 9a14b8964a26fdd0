"""Starters die with a SIGKILLed owner: aitb.lifeline's preexec_fn, and the controller uses it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_child_dies_with_a_sigkilled_parent():
    code = ("import subprocess, sys, time\n"
            "from aitb.lifeline import die_with_parent\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
            " preexec_fn=die_with_parent())\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(120)\n")
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(owner.stdout.readline())
    try:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 30  # the kernel signals at once; 30 s: a loaded box
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child)
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


def test_registered_child_is_in_the_registry_before_it_execs(tmp_path):
    from aitb.lifeline import registered

    reg = tmp_path / "registry.jsonl"
    reg.write_text('{"kind": "run"}')  # a torn last line: the child starts a fresh one
    code = "import sys; sys.stdout.write(open(sys.argv[1]).read())"
    out = subprocess.run([sys.executable, "-c", code, str(reg)], capture_output=True,
                         text=True, check=True,
                         preexec_fn=registered(reg, {"kind": "process", "node": "h0"}))
    lines = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert lines[0] == {"kind": "run"}
    assert lines[1]["kind"] == "process" and lines[1]["node"] == "h0"
    assert lines[1]["start"] > 0 and lines[1]["pid"] > 0  # what it read: itself, pre-exec


def test_registered_child_without_a_registry_never_runs(tmp_path):
    from aitb.lifeline import registered

    marker = tmp_path / "ran"
    with pytest.raises(subprocess.SubprocessError):
        subprocess.run([sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                       preexec_fn=registered(tmp_path / "missing.jsonl", {"kind": "process"}))
    assert not marker.exists()


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
