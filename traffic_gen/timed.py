"""Run one rank's part of a Timed op (open-loop messages: requests, token streams, background
flows) over the agent's connection workers.

All steps are handed to the workers at once, so many messages are in flight together (unlike
a collective, whose steps the rank runs as one unit). Each message uses the first connection
of its (src, dst) pair, so a pair's messages keep their order on both ends (a message that is
due while the previous one on the same pair is still being sent waits for it, as on one
TCP connection). Timing: a step with ``at_s`` leaves no earlier than ``t0 + at_s``; a step
with ``gap_s`` leaves no earlier than ``gap_s`` after the last of its dependencies completed
(the completing worker sets the start time before it signals the dependency).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from traffic_gen.endpoints import Endpoints
from traffic_gen.transfers import Job, Shared
from traffic_gen.wire import TimedStep

__all__ = ["run_timed"]


def _done(ev: threading.Event, waiting: list[Job]) -> Any:
    def done() -> None:
        now = time.time()
        for job in waiting:  # set their start time before they may run (they wait for ev)
            gap = job.meta["gap_s"]
            if gap:
                job.start_at = max(job.start_at, now + gap)
        ev.set()
    return done


def run_timed(rank: int, op: dict[str, Any], t0: float, eps: Endpoints,
              shared: Shared) -> None:
    """Submit every step of ``op`` (wire form, traffic_gen.timed_plan) for ``rank``; times
    ``at_s`` count from host-clock ``t0`` (s). Returns when every step is done; raises Abort
    when the run fails elsewhere, OSError for a missing connection."""
    steps = [TimedStep._make(st) for st in op["steps"]]
    events = [threading.Event() for _ in steps]
    dependants: list[list[Job]] = [[] for _ in steps]
    jobs: list[tuple[Any, Job]] = []
    seq: Counter[tuple[str, int]] = Counter()
    for kind, peer, size, deps, tag, proto, rate, at_s, gap_s, flow in steps:
        src, dst = (rank, peer) if kind == "send" else (peer, rank)
        worker = eps.workers(kind, src, dst, proto)[0]
        k = seq[(kind, peer)]
        seq[(kind, peer)] += 1
        meta = {"iteration": op["it"], "op_index": op["op"], "id": op["id"], "op_kind": "timed",
                "step": tag, "src_rank": src, "dst_rank": dst, "size_bytes": size, "conn": 0,
                "proto": proto, "rate_bps": rate, "flow": flow, "gap_s": gap_s,
                "background": op.get("background", False)}
        start = t0 + at_s if (at_s is not None and kind == "send") else 0.0
        job = Job(size, [events[d] for d in deps], lambda: None,
                  f"{op['it']}/{op['op']}/{src}/{dst}/{proto}/{k}/0", meta, start)
        for d in deps:
            dependants[d].append(job)
        jobs.append((worker, job))
    for i, (worker, job) in enumerate(jobs):
        job.done = _done(events[i], dependants[i])
        worker.submit(job)
    for ev in events:
        shared.wait(ev)
