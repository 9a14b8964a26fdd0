"""What one rank does in one phase: compute (sleep) and step plans over the agent's workers."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from traffic_gen.algorithms.steps import split_bytes
from traffic_gen.endpoints import Endpoints
from traffic_gen.gather_root import run_gathers
from traffic_gen.timed import run_timed
from traffic_gen.transfers import Job, Shared, sleep_until
from traffic_gen.wire import Step

__all__ = ["run_rank", "run_xfer"]


def run_rank(rank: int, node: str, ops: list[dict[str, Any]], t0: float, eps: Endpoints,
             shared: Shared, emit: Callable[[dict[str, Any]], None]) -> None:
    """Run ``ops`` (wire form, program.py) for ``rank`` from host-clock time ``t0``; emit one
    rank_op record per op. Raises Abort when the run fails elsewhere."""
    if ops and ops[0]["t"] == "gather":  # a gather phase holds only gathers (program.py)
        run_gathers(rank, node, ops, t0, eps, shared, emit)
        return
    for n, op in enumerate(ops):
        live = 1.0
        if op["t"] == "compute":
            if n == 0:
                sleep_until(t0, shared.spin_s)
            ts = time.time()
            live = shared.live_factor(rank)  # an events: straggler, from this op on
            time.sleep(op["duration_s"] * live)
        elif op.get("kind") == "timed":  # open-loop messages: at_s counts from the op's start
            ts = t0 if n == 0 else time.time()
            run_timed(rank, op, ts, eps, shared)
        else:
            ts = t0 if n == 0 else time.time()
            run_xfer(rank, op, t0 if n == 0 else 0.0, eps, shared)
        emit({"half": "rank_op", "rank": rank, "node": node, "iteration": op["it"],
              "op_index": op["op"], "kind": op.get("kind", "compute"), "label": op["label"],
              "t_start": ts, "t_end": time.time(),
              "slowdown": op.get("slowdown", 1.0) * live})


def _countdown(n: int, ev: threading.Event) -> Callable[[], None]:
    left, lock = [n], threading.Lock()

    def done() -> None:
        with lock:
            left[0] -= 1
            if left[0] == 0:
                ev.set()
    return done


def run_xfer(rank: int, op: dict[str, Any], start_at: float, eps: Endpoints,
             shared: Shared) -> None:
    """Submit every step of ``op`` to the connection workers in order (a step striped over the
    pair's connections) and wait until all are done. Steps without dependencies start at
    ``start_at`` (0: at once)."""
    events = [threading.Event() for _ in op["steps"]]
    seq: Counter[tuple[str, int, str]] = Counter()
    for i, (kind, peer, size, deps, tag, proto, rate) in enumerate(map(Step._make, op["steps"])):
        src, dst = (rank, peer) if kind == "send" else (peer, rank)
        workers = eps.workers(kind, src, dst, proto)
        parts = split_bytes(size, len(workers))
        k = seq[(kind, peer, proto)]
        seq[(kind, peer, proto)] += 1
        done = _countdown(len(workers), events[i])
        for c, (w, part) in enumerate(zip(workers, parts, strict=True)):
            meta = {"iteration": op["it"], "op_index": op["op"], "id": op["id"],
                    "op_kind": op["kind"], "step": tag, "src_rank": src, "dst_rank": dst,
                    "size_bytes": part, "conn": c, "proto": proto, "rate_bps": rate}
            key = f"{op['it']}/{op['op']}/{src}/{dst}/{proto}/{k}/{c}"
            w.submit(Job(part, [events[d] for d in deps], done, key, meta,
                         start_at if not deps else 0.0))
    for ev in events:
        shared.wait(ev)
