"""The sampling loop: every ``interval_s`` read every namespace, timestamp, store.

Runs in its own process (:mod:`testbed.counters.main`), so its CPU time is its own and the
runner's controller never waits for it. Timestamps are ``time.time()`` (the host clock of the
flow records and the pcaps), one per dump: a namespace's qdisc rows carry the midpoint of its
qdisc dump and ``t_err_s`` half its duration, its link rows those of its link dump
(models/counter_columns.py), so a rate is bytes over the times the counters were actually read,
not over a stamp taken before other dumps (on a loaded host a 10 ms interval stamped a few ms
off its counter read showed 4.8x the line rate), nor over the nominal interval. Samples are
scheduled on a fixed grid; when a sample takes longer than the interval, the next one starts
at once (no catching up in bursts), so the achieved interval in sampler.json says how far a
large lab falls behind the configured one.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.counters.live import LiveRates
from testbed.counters.readers import NamespaceReader
from testbed.counters.store import Store
from testbed.counters.tcpdiag import pace_discovery

__all__ = ["LoopConfig", "Loop", "summary"]

DEFAULT_MAX_ROWS = 20_000_000


@dataclass(frozen=True)
class LoopConfig:
    """What to sample: ``nodes`` as (node, namespace name, read TCP), every ``interval_s``
    seconds, rows into ``out_dir``, at most ``max_rows`` rows in all; with ``live_every_s``
    also a live rates snapshot ``out_dir/live.json`` that often (testbed.counters.live)."""

    nodes: tuple[tuple[str, str, bool], ...]
    interval_s: float
    out_dir: Path
    max_rows: int = DEFAULT_MAX_ROWS
    live_every_s: float | None = None  # write out_dir/live.json this often (counters.live)


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class Loop:
    """One sampler run; :meth:`run` until :attr:`stop` is set (by a signal handler)."""

    config: LoopConfig
    stop: bool = False
    stamps: list[float] = field(default_factory=list)
    readers: list[NamespaceReader] = field(default_factory=list)
    cpu: list[float] = field(default_factory=lambda: [0.0, 0.0])
    limit_reached: bool = False
    tcp_discover_s: float = 0.0

    def open(self) -> None:
        """Open every namespace's sockets (raises LabError for a missing namespace)."""
        self.store = Store(self.config.out_dir, self.config.max_rows)
        self.live = None if self.config.live_every_s is None else \
            LiveRates(self.config.out_dir / "live.json", self.config.live_every_s)
        for node, name, tcp in self.config.nodes:
            r = NamespaceReader(node, name, tcp)
            self.readers.append(r)
            r.open()

    def sample(self) -> None:
        """Read every namespace once."""
        self.stamps.append(time.time())
        q, ln, tc = [], [], []
        for r in self.readers:
            t0 = time.time()
            qdiscs = r.read_qdiscs()
            t1 = time.time()
            links = r.read_links()
            t2 = time.time()
            t, err = (t0 + t1) / 2, (t1 - t0) / 2
            q += [(t, err, r.node, r.ifname(x[0]), *x[1:]) for x in qdiscs]
            t, err = (t1 + t2) / 2, (t2 - t1) / 2
            ln += [(t, err, r.node, r.ifname(x[0]), *x[1:]) for x in links]
            if r.tcp:
                t = time.time()
                tc += [(t, r.node, *x) for x in r.read_tcp()]
        self.store.add("qdisc", q)
        self.store.add("links", ln)
        self.store.add("tcp", tc)
        if self.live is not None:
            self.live.add(ln, q)
            now = time.time()
            if self.live.due(now):
                self.live.write(now)

    def run(self, ready: Any, parent_pid: int) -> None:
        """Sample until :attr:`stop` (or the parent process is gone), then once more, so the
        last row of every object is read after the traffic. ``ready()`` is called after the
        first sample."""
        self.cpu[0] = _cpu_s()
        self.sample()
        self.tcp_discover_s = pace_discovery([r.tcp_reader for r in self.readers if r.tcp])
        ready()
        next_t = time.monotonic()
        while not self.stop and os.getppid() == parent_pid:
            if self.store.full():
                self.limit_reached = True
                break
            next_t += self.config.interval_s
            now = time.monotonic()
            if next_t > now:
                time.sleep(next_t - now)
            else:
                next_t = now
            self.sample()
        self.sample()
        self.cpu[1] = _cpu_s()

    def close(self) -> None:
        """Close sockets and finish the Parquet files."""
        for r in self.readers:
            r.close()
        if hasattr(self, "store"):
            self.store.close()


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))]


def summary(loop: Loop, error: str | None) -> dict[str, Any]:
    """sampler.json: configured and achieved interval (p50/p99/max of the gaps between sample
    starts, seconds, nearest-rank), samples, the loop's own CPU seconds (user+system, from
    getrusage) and their share of one core over the sampling span, rows per table, and why it
    stopped early if it did."""
    gaps = sorted(b - a for a, b in zip(loop.stamps, loop.stamps[1:], strict=False))
    span = loop.stamps[-1] - loop.stamps[0] if len(loop.stamps) > 1 else 0.0
    cpu_s = max(0.0, loop.cpu[1] - loop.cpu[0]) if loop.cpu[1] else _cpu_s() - loop.cpu[0]
    return {"interval_s": loop.config.interval_s, "samples": len(loop.stamps),
            "interval_p50_s": _quantile(gaps, 0.5), "interval_p99_s": _quantile(gaps, 0.99),
            "interval_max_s": gaps[-1] if gaps else None, "cpu_s": cpu_s,
            "cpu_share_of_one_core": cpu_s / span if span > 0 else None,
            "t_first_s": loop.stamps[0] if loop.stamps else None,
            "t_last_s": loop.stamps[-1] if loop.stamps else None,
            "namespaces": len(loop.readers),
            "tcp_namespaces": sum(1 for r in loop.readers if r.tcp),
            "tcp_discover_s": loop.tcp_discover_s,
            "rows": loop.store.rows() if hasattr(loop, "store") else {},
            "max_rows": loop.config.max_rows, "limit_reached": loop.limit_reached,
            "error": error}
