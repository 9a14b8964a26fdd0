"""Children that cannot outlive their owner unseen, started without any Python code between
fork and exec.

A ``preexec_fn`` runs Python in the forked child of a possibly multi-threaded parent: the
child holds a copy of every lock another thread held at fork time (logging's, an import
lock, an allocator's), and Python warns that this can deadlock. :func:`spawn` instead execs
a tiny C wrapper first (``models/lifeline_hold.c``, built on first use into
``<repo>/build/aitb-hold`` like the delay-line helper), which does the rest with system
calls only:

- ``pdeathsig``: ``PR_SET_PDEATHSIG`` (prctl(2)) as the wrapper's first act, then exit 1 if
  the parent is already gone (the race prctl(2) documents). The kernel sends the signal
  when the *thread* that forked the child ends, not the process: start such children from a
  thread that outlives them.
- ``register``: the wrapper waits on a pipe before it execs the program. The parent calls
  ``register(pid, start)`` (start: clock ticks since boot, proc(5) field 22), e.g. a durable
  registry append, and only then tells it to go. If the parent dies first (SIGKILL at any
  instant) the pipe reads EOF and the program never runs; so a child is in the registry
  before it can outlive its parent, and ``aitb clean`` ends it by pid and start time.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["spawn", "hold_binary", "HOLD_SOURCE", "HOLD_BINARY"]

HOLD_SOURCE = Path(__file__).with_name("lifeline_hold.c")
HOLD_BINARY = Path(__file__).resolve().parents[1] / "build" / "aitb-hold"
_CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra"]
_build_lock = threading.Lock()


class HoldBuildError(OSError):
    """The wrapper could not be compiled; the message names what to install."""


def hold_binary(binary: Path = HOLD_BINARY, source: Path = HOLD_SOURCE) -> Path:
    """The path of an up-to-date wrapper, compiled with the system C compiler if it is
    missing or older than its source (atomically: a concurrent starter never sees half a
    binary). Raises HoldBuildError (an OSError) without a compiler or if it fails."""
    with _build_lock:
        try:
            if binary.stat().st_mtime >= source.stat().st_mtime:
                return binary
        except FileNotFoundError:
            pass
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            raise HoldBuildError(errno.ENOENT, "no C compiler (cc) to build the process "
                                 f"wrapper {binary}: install the Debian package gcc")
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_name(f"{binary.name}.tmp{os.getpid()}")
        res = subprocess.run([cc, *_CFLAGS, "-o", str(tmp), str(source)], capture_output=True,
                             text=True, check=False)
        if res.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise HoldBuildError(errno.EINVAL, f"{cc} failed to build {binary}: "
                                 f"{res.stderr.strip()}")
        os.replace(tmp, binary)
        return binary


def _check_program(program: str, env: Mapping[str, str] | None, cwd: Any) -> None:
    """Raise the OSError Popen would raise for a program that cannot be started (the
    wrapper itself always starts, so the parent checks first): FileNotFoundError for one
    that is not there, PermissionError for one that is not executable."""
    if os.sep in program:
        path = program if os.path.isabs(program) or cwd is None else os.path.join(cwd, program)
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
        return
    search = (os.environ if env is None else env).get("PATH", os.defpath)
    if shutil.which(program, path=search) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def spawn(argv: Sequence[str], register: Callable[[int, int | None], None] | None = None,
          pdeathsig: int | None = None,
          popen: Callable[..., subprocess.Popen[Any]] | None = None,
          **kw: Any) -> subprocess.Popen[Any]:
    """Start ``argv`` (a list, never a shell string) through the wrapper (see the module
    doc); ``kw`` go to ``popen`` (default ``subprocess.Popen``; e.g. a callable that starts
    it from a thread inside a network namespace), ``pass_fds`` included; ``preexec_fn`` is
    refused. With ``register``, ``register(pid, start)`` is called before the program may
    exec; if it raises, the child ends without running the program and the exception
    propagates. With ``pdeathsig``, the child gets that signal when the calling thread
    ends. Raises FileNotFoundError/PermissionError (as Popen would) for a program that is
    missing or not executable, HoldBuildError if the wrapper cannot be built. The returned
    Popen's pid is the program's (the wrapper execs it); its ``args`` start with the
    wrapper's."""
    if isinstance(argv, str) or not argv:
        raise TypeError("argv must be a non-empty list of strings, not a shell string")
    argv = [str(a) for a in argv]
    if kw.get("preexec_fn") is not None:
        raise TypeError("spawn runs no preexec_fn: nothing may run between fork and exec")
    _check_program(argv[0], kw.get("env"), kw.get("cwd"))
    hold = str(hold_binary())
    go_r, go_w = os.pipe() if register is not None else (-1, -1)  # both close-on-exec here
    try:
        pass_fds = (*kw.pop("pass_fds", ()), *((go_r,) if go_r >= 0 else ()))
        wrapped = [hold, str(go_r), str(os.getpid()), str(int(pdeathsig or 0)), *argv]
        proc = (popen or subprocess.Popen)(wrapped, pass_fds=pass_fds, **kw)
    except BaseException:
        if go_w >= 0:
            os.close(go_w)
        raise
    finally:
        if go_r >= 0:
            os.close(go_r)
    if register is None:
        return proc
    try:
        register(proc.pid, _start_time(proc.pid))
    except BaseException:
        os.close(go_w)  # EOF: the wrapper exits 1, the program never runs
        proc.wait()
        raise
    try:
        os.write(go_w, b"g")
    except BrokenPipeError:
        pass  # the wrapper is already gone (signalled): the caller sees it exit
    finally:
        os.close(go_w)
    return proc
