"""An agent on its standard input and output (``--control -``, as started over SSH on a
cluster machine) ends cleanly: it ended with "Fatal Python error: _enter_buffered_busy: could
not acquire lock for <stdin> at interpreter shutdown" and SIGABRT (exit -6) whenever its stdin
was still open at exit, the bridge's daemon thread blocked inside ``sys.stdin``'s buffered
reader (traffic_gen/agent.py _StdioBridge). No namespace: the agent only talks on its pipes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _agent() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "traffic_gen.agent", "--control", "-",
                             "--node", "h1"], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(("kind", "code"), [("stop", 0), ("abort", 3)])
def test_told_to_end_while_its_stdin_stays_open_it_exits_without_a_fatal_error(kind, code):
    proc = _agent()
    try:
        assert json.loads(proc.stdout.readline()) == {"type": "hello", "node": "h1"}
        proc.stdin.write(json.dumps({"type": kind}).encode() + b"\n")
        proc.stdin.flush()
        rc = proc.wait(timeout=60)  # a hang, not a time limit
        err = proc.stderr.read().decode()
        assert "Fatal Python error" not in err, err
        assert rc == code, err
        assert proc.stdout.read() == b""  # nothing after the hello, and end of file
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()


def test_end_of_its_stdin_is_its_controller_going_away():
    proc = _agent()
    try:
        assert json.loads(proc.stdout.readline())["type"] == "hello"
        proc.stdin.close()
        rc = proc.wait(timeout=60)
        err = proc.stderr.read().decode()
        assert rc == 3 and "Fatal Python error" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
