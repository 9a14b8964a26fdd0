"""The ``aitb`` process's exit status tells the truth about SIGINT and SIGTERM at any instant,
interpreter exit included: 130 and 143 (128 + the signal), never death by the signal.

:func:`install` (first thing in :func:`orchestration.cli.entry.main`) puts the outermost
handlers in place, the ones ``testbed.lab.signals.raising``/``held`` restore when they end:

- while the command runs, SIGINT raises KeyboardInterrupt (Python's own behaviour) and
  SIGTERM raises ``SystemExit(143)`` (it used to kill the process outright: default
  action), so ``finally`` blocks run and the exit status says what happened;
- a handler's exception that Python can only drop (raised inside a finalizer the garbage
  collector ran: "Exception ignored in ..." and a traceback, the Ctrl-C lost) is not
  printed; the signal is sent again once the main thread is out of the hook (``_unraisable``);
- once the command has its status (:func:`supervise` got it; or the signal lands inside the
  supervisor's own frames), a signal is only recorded, never raised into the exit path.

The interpreter's exit then runs as usual (non-daemon threads joined, atexit callbacks such
as logging's flush) with these handlers still installed, and the last atexit callback (this
module's, registered first) flushes stdout and stderr and ends the process with
``os._exit``: the status, or 128 + the first signal recorded after the command ended (if the
status is not already 130/143). CPython's own finalisation, which would set SIGINT and
SIGTERM back to their default action (death by the signal) before the process is gone, never
runs. A second late signal ends the process at once (an exit stuck joining a thread), with
the first one's status. Forked children that run Python (pyroute2's helpers) are left
alone: the handlers give them the default action and the atexit callback does nothing there.
"""

from __future__ import annotations

import _thread
import atexit
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

__all__ = ["install", "supervise"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
INTERRUPTED = {128 + s for s in SIGNALS}

_state: dict[str, object] = {"owner": None, "final": False, "code": 1, "unraisable": None,
                             "stdout_id": None}
_late: list[int] = []  # signals recorded once the command had its status


def install() -> None:
    """Install the outermost SIGINT/SIGTERM handlers and the last atexit callback (see the
    module doc). Call once, before anything else registers atexit callbacks. Side effects:
    two signal handlers, one atexit callback, this process's exit via ``os._exit``."""
    if _state["owner"] is not None:
        return
    _state["owner"] = os.getpid()
    _state["stdout_id"] = _stdout_id()
    for s in SIGNALS:
        signal.signal(s, _handler)
    atexit.register(_last)
    _state["unraisable"] = sys.unraisablehook
    sys.unraisablehook = _unraisable


def _unraisable(info: Any) -> None:
    """A signal handler's exception raised where Python can only drop it (a ``__del__`` or
    weakref callback run by the garbage collector, at any instant): it printed a
    KeyboardInterrupt traceback and the Ctrl-C was lost. The signal is sent again from a
    short thread, so that the main thread's handler runs outside the finalizer; anything
    else goes to the previous hook."""
    signum = _signal_of(info.exc_value, info.exc_traceback)
    if signum is None or os.getpid() != _state["owner"]:
        _state["unraisable"](info)  # type: ignore[operator]
        return
    # not threading.Thread.start(): it waits for the thread, and the signal would land there
    _thread.start_new_thread(_resend, (threading.main_thread().ident, signum))


def _resend(main: int, signum: int) -> None:
    """Send ``signum`` to this process once the main thread has left :func:`_unraisable`."""
    while _in_hook(sys._current_frames().get(main)):  # noqa: SLF001 - the only way to look
        time.sleep(0.001)
    os.kill(os.getpid(), signum)


def _in_hook(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code is _unraisable.__code__:
            return True
        frame = frame.f_back
    return False


def _signal_of(exc: BaseException | None, tb: TracebackType | None) -> int | None:
    """The signal whose handler (this module's, or testbed.lab.signals' ``raising``) raised
    ``exc`` (its innermost frame is that handler), else None."""
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or exc is None:
        return None
    code = tb.tb_frame.f_code
    if code is _handler.__code__:
        return signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
    ours = code.co_name == "handler" and code.co_filename.endswith(
        os.path.join("testbed", "signals.py"))
    signum = getattr(exc, "signum", None)
    return signum if ours and isinstance(signum, int) else None


def _handler(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _state["owner"]:  # a forked child running Python: the default action
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _state["final"] or (frame is not None and frame.f_code in _OWN_CODE):
        if _late and _state["final"]:  # a second one: the exit is stuck (a thread that
            os._exit(128 + _late[0])   # never ends?): end now, with the first one's status
        _late.append(signum)
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def supervise(body: Callable[[], None]) -> None:
    """Run ``body`` (the CLI) and record its exit status: 0 if it returns, ``SystemExit``'s
    code, 130 for a KeyboardInterrupt nothing caught (one line, "interrupted", instead of a
    traceback). Returns normally; the process then exits with that status (or a late
    signal's, see the module doc)."""
    code: object = 1
    try:
        body()
        code = 0
    except SystemExit as exc:
        code = 0 if _reader_gone() else exc.code
    except BrokenPipeError:
        code = 0
    except KeyboardInterrupt:
        code = 130
        sys.stderr.write("interrupted\n")
    finally:
        if _reader_gone():
            _quiet_stdout()
        _finish(code)


def _stdout_id() -> tuple[int, int] | None:
    """(device, inode) of what stdout's descriptor refers to; None if it has none."""
    try:
        st = os.fstat(sys.__stdout__.fileno())
    except (OSError, AttributeError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _reader_gone() -> bool:
    """True when the reader of stdout went away (``aitb pcap F | head -1``): writing to it
    failed with EPIPE here, in click (which exits 1 behind a PacifyFlushWrapper) or in rich
    (which points stdout at /dev/null and exits 1). Such a command ends quietly with exit 0,
    as ``git log | head`` does, instead of a BrokenPipeError traceback or exit 1."""
    if type(sys.stdout).__name__ == "PacifyFlushWrapper":
        return True
    if isinstance(sys.exc_info()[1], BrokenPipeError):
        return True
    now = _stdout_id()
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return now != _state["stdout_id"] and now == (null.st_dev, null.st_ino)


def _quiet_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so the interpreter's last flush of what is still
    buffered cannot fail again (the Python documentation's recipe for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass


def _finish(code: object) -> None:
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, status 1 (as Python)
        sys.stderr.write(f"{code}\n")
        code = 1
    _state["code"] = code
    _state["final"] = True


def _last() -> None:
    """The last atexit callback: flush, then ``os._exit`` with the status."""
    if os.getpid() != _state["owner"]:
        return
    _state["final"] = True
    code = _state["code"] if isinstance(_state["code"], int) else 1
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            if code == 0:
                code = 120  # what CPython exits with when it cannot flush stdout
    # pthread_sigmask runs every handler already due (CPython checks for signals after it);
    # one that comes after it stays pending for this thread (or runs in another's C handler)
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    pending = sorted(set(SIGNALS) & signal.sigpending())
    if (_late or pending) and code not in INTERRUPTED:
        code = 128 + (_late or pending)[0]
    os._exit(code & 0xFF)


_OWN_CODE = {supervise.__code__, _finish.__code__, _last.__code__}
