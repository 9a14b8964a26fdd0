"""Loopback tests: agents run in the current namespace and bind 127.0.0.x (loopback only)."""

import os
import signal

import pytest

from traffic_gen.launch import LocalLauncher


class RecordingLauncher(LocalLauncher):
    """LocalLauncher that remembers every process it started (to check none is left)."""

    def __init__(self):
        self.procs = {}

    def popen(self, node, argv, **kw):
        p = super().popen(node, argv, **kw)
        self.procs[node] = p
        return p


@pytest.fixture
def launcher():
    lau = RecordingLauncher()
    yield lau
    leftover = [n for n, p in lau.procs.items() if p.poll() is None]
    for p in lau.procs.values():  # never leave a process behind, even if the test failed
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    assert not leftover, f"agent processes left running: {leftover}"


@pytest.fixture
def addresses():
    return {f"h{i}": f"127.0.0.{i + 1}" for i in range(16)}
