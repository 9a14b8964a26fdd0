"""SIGINT/SIGTERM while a lab is being built or held: turn them into an exception so that the
``with`` block unwinds and tears down; hold them during teardown so it is not cut short.
Previous handlers are restored afterwards. Only the main thread can install handlers; in other
threads these context managers do nothing."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from models.errors import LabError

__all__ = ["LabInterrupted", "raising", "held", "interruption", "swallowed"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class LabInterrupted(LabError):
    """SIGINT or SIGTERM arrived; the lab was torn down. Exit code 128+signal (130, 143)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}; the lab was torn down")


_arrived: list[int] = []  # signals turned into LabInterrupted by raising(), in order


def interruption(exc: BaseException) -> BaseException:
    """``exc``, or the :class:`LabInterrupted` it stands for: a library that catches every
    exception (pyroute2's decoder wraps them in its own) can hide the one our handler raised;
    if a signal arrived while ``exc`` was raised, the interrupt is what happened."""
    if _arrived and not isinstance(exc, LabInterrupted):
        return LabInterrupted(_arrived.pop())
    _arrived.clear()
    return exc


def swallowed() -> LabInterrupted | None:
    """The interrupt whose exception some code caught and dropped (an ``except Exception``
    on the way), if a signal arrived under :func:`raising` and was not handled since; it is
    taken (a second call returns None). Callers raise it after their lab is down."""
    if _arrived:
        signum = _arrived.pop()
        _arrived.clear()
        return LabInterrupted(signum)
    return None


def _main() -> bool:
    return threading.current_thread() is threading.main_thread()


def _install(handler: Any) -> dict[int, Any]:
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, handler)
    return previous


def _restore(previous: dict[int, Any]) -> None:
    for s, h in previous.items():
        signal.signal(s, h)


@contextmanager
def raising() -> Iterator[None]:
    """While active, SIGINT/SIGTERM raise :class:`LabInterrupted` in the main thread."""
    if not _main():
        yield
        return

    owner = os.getpid()
    _arrived.clear()

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:  # a forked child (e.g. pyroute2's netns helper): default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        _arrived.append(signum)
        raise LabInterrupted(signum)

    previous = _install(handler)
    try:
        yield
    finally:
        _restore(previous)


@contextmanager
def held() -> Iterator[list[int]]:
    """While active, SIGINT/SIGTERM are recorded (yielded list) instead of interrupting."""
    got: list[int] = []
    if not _main():
        yield got
        return
    owner = os.getpid()

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        got.append(signum)

    previous = _install(handler)
    try:
        yield got
    finally:
        _restore(previous)
