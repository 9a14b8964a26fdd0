"""Children that die with their parent from their first instruction: a ``preexec_fn`` for
``subprocess.Popen`` that sets ``PR_SET_PDEATHSIG`` (prctl(2)) in the forked child before it
execs, then exits at once if the parent is already gone (the race prctl(2) documents).

The kernel sends the signal when the *thread* that forked the child ends, not the process:
start such children from a thread that outlives them (the controller's thread, which ends
them itself before it returns). A child started this way cannot outlive a SIGKILLed owner,
whether or not the owner had registered it anywhere yet.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

__all__ = ["die_with_parent"]

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
