"""Starters die with a SIGKILLed owner: aitb.lifeline's preexec_fn, and the controller uses it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


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


def test_controller_starts_starters_with_the_lifeline(monkeypatch, tmp_path):
    from traffic_gen import controller

    seen = []

    def fake_popen(argv, **kw):
        seen.append(kw.get("preexec_fn"))
        raise OSError("stop here (test)")

    monkeypatch.setattr(controller.subprocess, "Popen", fake_popen)
    ctl = object.__new__(controller.Controller)
    ctl.run_dir, ctl.kick_procs, ctl.kick_paths = tmp_path, [], []
    ctl.sock_path = tmp_path / "ctl.sock"

    class Opt:
        python, spin_s, rt_priority, agent_start_timeout_s = sys.executable, 2e-4, 0, 1.0

    ctl.opt = Opt()
    try:
        ctl._start_kickers()
    except OSError:
        pass
    assert seen and callable(seen[0]) and seen[0].__qualname__.startswith("die_with_parent")
