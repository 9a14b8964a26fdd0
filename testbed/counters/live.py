"""Live rates from the sampler's rows, for consumers during the run (the live ALTO cost maps,
orchestration/alto/live.py): every ``every_s`` the sampler writes one JSON snapshot.

Snapshot (``counters/live.json``, replaced atomically, models/atomic.py)::

    {"t_s": host-clock seconds of the newest link row, "window_s": seconds since the
     previous snapshot's rows, "seq": 0, 1, ...,
     "interfaces": {"<node> <ifname>": {"tx_bps": bits/s sent in the window,
                                        "backlog_bytes": mean qdisc backlog in the window}}}

``tx_bps`` = 8 x delta(tx_bytes) / delta(t_s) between the interface's link rows at the two
snapshots (the interface counter: bytes that left the interface, the link layer included, as
HTB's rate counts them); ``backlog_bytes``: per sample the largest ``backlog_bytes`` of the
interface's qdiscs (HTB's root holds its leaves' backlog; a leaf alone holds its own), averaged
over the samples of the window. An interface seen for the first time has no rate until the
next snapshot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from models.atomic import write_text_atomic

__all__ = ["LiveRates"]


class LiveRates:
    """Accumulates rows between snapshots and writes ``path`` every ``every_s`` seconds."""

    def __init__(self, path: Path, every_s: float) -> None:
        self.path, self.every_s = path, every_s
        self.base: dict[str, tuple[float, int]] = {}  # key -> (t_s, tx_bytes) at last snapshot
        self.last: dict[str, tuple[float, int]] = {}
        self.backlog: dict[str, list[int]] = {}
        self.t_written: float | None = None
        self.seq = 0

    def add(self, links: list[tuple[Any, ...]], qdiscs: list[tuple[Any, ...]]) -> None:
        """Rows of one sample (the sampler's link and qdisc rows, models/counter_columns.py)."""
        for row in links:
            self.last[f"{row[2]} {row[3]}"] = (row[0], row[5])  # t_s, tx_bytes
        most: dict[str, int] = {}
        for row in qdiscs:
            key = f"{row[2]} {row[3]}"
            most[key] = max(most.get(key, 0), row[12])  # backlog_bytes
        for key, b in most.items():
            self.backlog.setdefault(key, []).append(b)

    def due(self, now_s: float) -> bool:
        """Whether a snapshot is due at host-clock ``now_s``."""
        return self.t_written is None or now_s - self.t_written >= self.every_s

    def write(self, now_s: float) -> None:
        """Write the snapshot of the rows added since the last one (module docstring)."""
        out: dict[str, dict[str, float | None]] = {}
        window = None
        for key, (t, tx) in self.last.items():
            b0 = self.base.get(key)
            rate = None
            if b0 is not None and t > b0[0]:
                rate = 8.0 * (tx - b0[1]) / (t - b0[0])
                window = t - b0[0] if window is None else max(window, t - b0[0])
            samples = self.backlog.get(key, [])
            out[key] = {"tx_bps": rate,
                        "backlog_bytes": sum(samples) / len(samples) if samples else 0.0}
        t_s = max((t for t, _ in self.last.values()), default=now_s)
        write_text_atomic(self.path, json.dumps({"t_s": t_s, "window_s": window,
                                                 "seq": self.seq, "interfaces": out}))
        self.base = dict(self.last)
        self.backlog = {}
        self.t_written = now_s
        self.seq += 1
