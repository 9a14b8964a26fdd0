"""The native delay-line helpers a process attached to a lab adopts from the registry
(testbed/delay/native.py, a cluster machine's event player): signalled by pid only
while pid and start time still name the helper, a vanished one an error of the change, never
a signal to whatever process holds the pid now. No root, no lab."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from models.errors import LabError
from testbed.delay import native


def test_a_helper_registered_without_a_start_time_is_never_signalled():
    # the registry's start is None when the helper had exited by its registration: its pid
    # may be another process's by now (here: one of this test's own)
    other = subprocess.Popen(["sleep", "30"])
    try:
        adopted = native._Adopted(other.pid, None)
        assert adopted.poll() is not None
        with pytest.raises(LabError, match="gone"):
            adopted.send_signal(signal.SIGHUP)
        assert other.poll() is None  # the SIGHUP did not reach it
    finally:
        other.kill()
        other.wait()


def test_a_helper_gone_between_the_check_and_the_signal_is_a_lab_error(monkeypatch):
    # pid_max + 1 names no process: kill() fails with ESRCH, as for a helper that exited
    # right after its pid and start time were checked
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    monkeypatch.setattr(native, "pid_alive", lambda pid, start: True)
    adopted = native._Adopted(pid, 12345)
    with pytest.raises(LabError, match="gone"):
        adopted.send_signal(signal.SIGHUP)
    assert adopted.poll() == -1
