"""Host CPU load during a run: a thread reads the busy share of all cores (psutil, from
/proc/stat) every ~100 ms. Inside the stock-kernel VM it reads the guest's CPUs."""

from __future__ import annotations

import threading
import time

import psutil

__all__ = ["CpuSampler"]


class CpuSampler:
    """Samples ``psutil.cpu_percent()`` (busy percent of all cores since the previous
    sample) every ``interval_s`` seconds in a daemon thread between :meth:`start` and
    :meth:`stop`. ``samples``: list of (time.time() seconds, busy percent). ``without``: a
    CPU left out of the share (the native delay line's own, testbed.lab.lab.Lab line_cpu: its
    helpers spin there, busy by design, and the lab's other work runs elsewhere)."""

    def __init__(self, interval_s: float = 0.1, without: int | None = None) -> None:
        self.interval_s = interval_s
        self.without = without
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CpuSampler:
        """Begin sampling (the first window starts now)."""
        self._busy()  # primes the counter: the next call covers [now, ..]
        self._thread = threading.Thread(target=self._loop, name="aitb-cpu", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append((time.time(), self._busy()))

    def _busy(self) -> float:
        if self.without is None:
            return float(psutil.cpu_percent(interval=None))
        rest = [p for i, p in enumerate(psutil.cpu_percent(interval=None, percpu=True))
                if i != self.without]
        return sum(rest) / len(rest) if rest else 0.0

    def stop(self) -> list[tuple[float, float]]:
        """End sampling; returns the samples: (window end, time.time() seconds; busy
        percent of all cores over the preceding ``interval_s``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return list(self.samples)
