"""A replay that fails while its agents start ends the agents that never connected at once:
they cannot hear the controller's ``abort``, so waiting ``stop_timeout_s`` for them only
delayed the failure (an `aitb run` interrupted then took 5-6 s more to exit)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from traffic_gen.controller import Controller, RunFailed
from traffic_gen.replay import ReplayOptions

SILENT = [sys.executable, "-c", "import time; time.sleep(600)"]  # never connects


class SilentLauncher:
    """Starts a process that never says hello, whatever the agent argv."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def popen(self, node, argv, **kw):
        self.procs.append(subprocess.Popen(SILENT, **kw))
        return self.procs[-1]

    def popen_host(self, argv, **kw):
        raise AssertionError("no starter in sleep mode")


@pytest.mark.timeout(120)
def test_agents_that_never_said_hello_are_killed_without_the_stop_timeout(tmp_path):
    # waiting out the stop timeout for the silent agents would take 60 s; the failure comes
    # 0.5 s (the start timeout) after they started, so half that bound is a wide margin
    opts = ReplayOptions(agent_start_timeout_s=0.5, stop_timeout_s=60, start_mode="sleep")
    launcher = SilentLauncher()
    ctl = Controller(tmp_path, "ab0rt1", launcher, {"h1": "198.18.0.1", "h2": "198.18.0.2"},
                     opts)
    written = []
    t0 = time.monotonic()
    try:
        with pytest.raises(RunFailed, match="timeout waiting for 'hello'"):
            ctl.run(SimpleNamespace(phases=()), {}, SimpleNamespace(write=written.extend))
        assert time.monotonic() - t0 < 30, "the abort waited the stop timeout for them"
        assert [p.returncode for p in launcher.procs] == [-signal.SIGKILL] * 2
        assert len(written) == 1 and "hello" in written[0].detail
    finally:
        for p in launcher.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
