"""Thread fan-out, the one copy: run a function once per item, one thread each, wait for all,
re-raise the first error (in the order errors happened).

Why not :class:`concurrent.futures.ThreadPoolExecutor`: every item needs its own thread at
once (gather roles and replays block on each other), and the threads are daemons, so a process
that gives up waiting (an aborted agent) can exit without joining threads stuck in a socket;
an executor's workers are joined at interpreter exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

__all__ = ["FanOut", "fan_out"]

T = TypeVar("T")
R = TypeVar("R")


class FanOut(Generic[T, R]):
    """``fn(item)`` for each of ``items`` started at once, one daemon thread each; the caller
    may do other work before :meth:`join`."""

    def __init__(self, fn: Callable[[T], R], items: Iterable[T]) -> None:
        self.items: list[T] = list(items)
        self.results: dict[int, R] = {}
        self.errors: list[BaseException] = []  # in the order they were raised
        self._threads = [threading.Thread(target=self._run, args=(fn, i), daemon=True)
                         for i in range(len(self.items))]
        for t in self._threads:
            t.start()

    def _run(self, fn: Callable[[T], R], i: int) -> None:
        try:
            self.results[i] = fn(self.items[i])
        except BaseException as exc:  # noqa: BLE001 - re-raised by join() in the caller
            self.errors.append(exc)

    def join(self, prefer: Callable[[BaseException], bool] | None = None) -> list[R]:
        """Wait for every thread; return the results in item order, or raise the first error
        (the first one ``prefer`` accepts, if any does)."""
        for t in self._threads:
            t.join()
        if self.errors:
            chosen = [e for e in self.errors if prefer is None or prefer(e)]
            raise (chosen or self.errors)[0]
        return [self.results[i] for i in range(len(self.items))]


def fan_out(fn: Callable[[T], R], items: Sequence[T], *,
            prefer: Callable[[BaseException], bool] | None = None,
            inline_single: bool = False) -> list[R]:
    """``fn(item)`` for every item concurrently (see :class:`FanOut`); results in item order.
    ``inline_single``: one item runs in the caller's thread. Raises the first error."""
    if inline_single and len(items) == 1:
        return [fn(items[0])]
    return FanOut(fn, items).join(prefer)
