"""Children that cannot outlive their owner unseen: ``preexec_fn`` s for ``subprocess.Popen``
that run in the forked child before it execs.

:func:`die_with_parent` sets ``PR_SET_PDEATHSIG`` (prctl(2)), then exits at once if the parent
is already gone (the race prctl(2) documents). The kernel sends the signal when the *thread*
that forked the child ends, not the process: start such children from a thread that outlives
them (the controller's thread, which ends them itself before it returns).

:func:`registered` closes the fork -> registry gap: the child appends its own record (pid and
start time, proc(5) field 22) to the owner's registry file, fsyncs it, and only then checks
that its parent still lives (else exits with status 1 before exec). So whatever instant the
owner is SIGKILLed at, a child either ends itself or is in the registry before the owner's
death can be noticed by ``aitb clean``, which ends it by pid and start time.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["die_with_parent", "registered"]

PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h
_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``sig`` when the calling thread of this process
    ends, and exits with status 1 before exec if this process has already ended."""
    parent = os.getpid()
    prctl = _LIBC.prctl

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def _own_start_time() -> int:
    """This process's start time in clock ticks since boot (/proc/self/stat field 22)."""
    fd = os.open("/proc/self/stat", os.O_RDONLY)
    try:
        stat = os.read(fd, 4096)
    finally:
        os.close(fd)
    return int(stat.rpartition(b")")[2].split()[19])


def registered(registry_path: Path | str, record: Mapping[str, Any],
               pdeathsig: int | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` that appends ``record`` plus this child's ``pid`` and ``start`` as
    one JSON line to ``registry_path`` (which must exist: it is never created here), with
    fsync, then exits with status 1 if the parent has already ended. With ``pdeathsig``,
    first sets PR_SET_PDEATHSIG as :func:`die_with_parent` does (mind its thread caveat).
    If the record cannot be written while the parent lives, Popen raises
    ``subprocess.SubprocessError`` in the parent (nothing runs). Side effect: one line in
    the registry file per child."""
    parent = os.getpid()
    head = json.dumps(dict(record))
    if not head.startswith("{") or head == "{}":
        raise ValueError("record must be a non-empty mapping")
    head_b = head[:-1].encode()
    path = os.fsencode(str(registry_path))
    prctl = _LIBC.prctl

    def preexec() -> None:
        if pdeathsig is not None:
            prctl(PR_SET_PDEATHSIG, pdeathsig, 0, 0, 0)
        pid = os.getpid()
        line = head_b + b', "pid": %d, "start": %d}\n' % (pid, _own_start_time())
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn line: start afresh
                    line = b"\n" + line
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            if os.getppid() != parent:
                os._exit(1)
            raise
        if os.getppid() != parent:  # the owner died before or while we wrote: end here
            os._exit(1)

    return preexec
