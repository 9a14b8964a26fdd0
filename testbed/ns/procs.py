"""Processes inside a node's namespace, started and ended by pid.

A child forked by a thread inherits that thread's network namespace, so
:func:`popen_in` calls ``subprocess.Popen`` from a helper thread that has entered the
namespace: no shell, no ``ip netns exec`` process (:meth:`testbed.lab.lab.Lab.popen` starts its
children through :func:`models.lifeline.spawn` with this as the Popen).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from models.errors import CommandError
from testbed.lab.registry import pid_alive
from testbed.ns import netns

__all__ = ["popen_in", "end_process", "run_checked"]

TERM_GRACE_S = 2.0


def popen_in(fd: int, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
    """Start ``argv`` (a list, never a shell string) in namespace ``fd``; ``kw`` go to Popen.
    Raises CommandError naming argv if it cannot be started (for example not installed)."""
    if isinstance(argv, str):
        raise TypeError("argv must be a list of strings, not a shell string")
    try:
        return netns.run_in(fd, lambda: subprocess.Popen(list(argv), **kw))
    except OSError as exc:
        raise CommandError(argv, None, exc.strerror or str(exc)) from None


def end_process(pid: int, start: int | None, proc: subprocess.Popen[Any] | None = None,
                grace_s: float = TERM_GRACE_S, first: int = signal.SIGTERM) -> bool:
    """End process ``pid`` if it is still the one that started at ``start``: signal ``first``
    (SIGTERM; SIGKILL for processes that ignore it, like an interactive shell), wait up
    to ``grace_s``, then SIGKILL. Returns True if it had to be signalled. Reaps ``proc`` if
    given (our own child). Raises OSError if signalling fails for a reason other than the
    process being gone."""
    if not pid_alive(pid, start):
        if proc is not None:
            proc.poll()
        return False
    _signal(pid, first)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return True
        if proc is None and not pid_alive(pid, start):
            return True
        time.sleep(0.02)
    if pid_alive(pid, start):
        _signal(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait(timeout=5)
    return True


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def run_checked(proc: subprocess.Popen[Any], argv: Sequence[str], where: str,
                timeout_s: float) -> subprocess.CompletedProcess[Any]:
    """Wait for ``proc`` (started with pipes) up to ``timeout_s``; raise CommandError naming
    ``where`` and argv on a non-zero exit or a timeout (after killing it)."""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise CommandError([where + ":", *argv], None,
                           f"timed out after {timeout_s:g} s; stderr: {_text(err)}") from None
    if proc.returncode != 0:
        raise CommandError([where + ":", *argv], proc.returncode, _text(err) or _text(out))
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def _text(data: Any) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else str(data)
