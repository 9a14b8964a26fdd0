"""The root (aggregator) role of a deadline-bounded gather, and running a rank's gathers.

The root serves every source on its own thread (model download, then the update upload) and
stops waiting at the first of: every source resolved, ``quorum`` sources finished
(over-commitment, Bonawitz et al. 2019, "Towards Federated Learning at Scale", section 2.2:
the server selects more devices than it needs and stops once enough report), or the round
start plus ``deadline_s``. Every unfinished transfer is then reset (gather.py) and its source
counted as dropped. The root emits one ``round`` half (a RoundRecord, merge.py).
"""

from __future__ import annotations

import math
import select
import threading
import time
from collections.abc import Callable
from typing import Any

from models.fanout import FanOut, fan_out
from traffic_gen.gather import (
    ACCEPTED,
    TICK_S,
    Cut,
    flow_half,
    move,
    reset,
    run_src,
    wait_phase,
)
from traffic_gen.tcpinfo import read_tcp_info, tcp_info_delta
from traffic_gen.tls import wire_bytes
from traffic_gen.transfers import Abort, Shared

__all__ = ["run_root", "run_gathers"]


class _Round:
    """What the root knows of one round; ``lock`` guards finished/dropped."""

    def __init__(self, op: dict[str, Any], t_start: float) -> None:
        self.op, self.t_start = op, t_start
        self.deadline_at = (t_start + op["deadline_s"] if op["deadline_s"] is not None
                            else math.inf)
        self.quorum = op["quorum"] or len(op["srcs"])
        self.lock = threading.Condition()
        self.cut = threading.Event()
        self.finished: list[int] = []
        self.dropped: dict[int, str] = {}
        self.bytes_down, self.bytes_up = op.get("down_before", 0), 0

    def resolved(self) -> bool:
        return len(self.finished) + len(self.dropped) == len(self.op["srcs"])

    def finish(self, src: int) -> bool:
        """Count ``src`` as finished unless the round already stopped waiting for it."""
        with self.lock:
            late = self.cut.is_set() or time.time() > self.deadline_at
            if late or len(self.finished) >= self.quorum:
                self.dropped[src] = "quorum" if len(self.finished) >= self.quorum \
                    else "deadline"
            else:
                self.finished.append(src)
            self.lock.notify_all()
            return src in self.finished

    def drop(self, src: int) -> None:
        with self.lock:
            self.dropped.setdefault(src, "quorum" if len(self.finished) >= self.quorum
                                    else "deadline")
            self.lock.notify_all()

    def add_bytes(self, down: int, up: int) -> None:
        with self.lock:
            self.bytes_down += down
            self.bytes_up += up


def _serve(src: int, node: str, rnd: _Round, eps: Any, shared: Shared,
           emit: Callable[[dict[str, Any]], None]) -> None:
    op = rnd.op

    def stop() -> bool:
        return rnd.cut.is_set() or shared.aborted.is_set()

    try:
        s, tls = eps.inbox.take((op["it"], op["op"], src), stop)
    except (Cut, ConnectionError):  # none arrived in time, or it was reset in its handshake
        rnd.drop(src)
        return
    src_node = op["hosts"][str(src)]
    base, t0 = read_tcp_info(s), time.time()
    down = up = 0
    ok = False
    try:
        down = move(s, op["down_bytes"], True, shared.send_buf, stop)
        while not select.select([s], [], [], TICK_S)[0]:  # the update's first byte
            if stop():
                raise Cut(0)
        t_first = time.time()
        up = move(s, op["up_bytes"], False, shared.recv_buf, stop)
        emit(flow_half("recv", op, s, src, op["root"], "up", op["up_bytes"], (src_node, node),
                       t_first_byte=t_first, t_end=time.time()))
        ok = rnd.finish(src)
    except Cut as c:
        up = c.moved if down == op["down_bytes"] else 0
    except ConnectionError:
        pass  # the source went away: dropped like a late one
    finally:
        info = read_tcp_info(s)
        raw = info["bytes_acked"] - base["bytes_acked"]
        acked = min(raw, op["down_bytes"])  # model bytes delivered (TLS: its records' too)
        wire = wire_bytes(op["down_bytes"]) if tls else op["down_bytes"]
        emit({**flow_half("send", op, s, op["root"], src, "down", op["down_bytes"],
                          (node, src_node), t_start=t0, **tls), "t_sent": time.time(),
              "tcp": tcp_info_delta(base, info, size_bytes=min(raw, wire)).to_dict()})
        rnd.add_bytes(acked, up)
        if ok:
            s.sendall(ACCEPTED)
            s.close()
        else:
            rnd.drop(src)
            reset(s)


def run_root(node: str, op: dict[str, Any], eps: Any, shared: Shared,
             emit: Callable[[dict[str, Any]], None]) -> None:
    """Root role of a gather (wire form: program.py); emits its flow halves and one round
    half. Raises Abort if the run is aborted meanwhile."""
    rnd = _Round(op, shared.phase_t0[op["start_phase"]])
    def serve(src: int) -> None:
        try:
            _serve(src, node, rnd, eps, shared, emit)
        except BaseException:
            rnd.drop(src)
            raise  # by serving.join() below

    serving = FanOut(serve, op["srcs"])
    with rnd.lock:
        while not (rnd.resolved() or len(rnd.finished) >= rnd.quorum
                   or time.time() >= rnd.deadline_at):
            if shared.aborted.is_set():
                raise Abort
            rnd.lock.wait(min(TICK_S, max(rnd.deadline_at - time.time(), 0.0)))
        t_end = time.time()
        rnd.cut.set()
    eps.inbox.close(op["it"], op["op"])
    serving.join()
    emit(_round_half(node, op, rnd, t_end))


def _round_half(node: str, op: dict[str, Any], rnd: _Round, t_end: float) -> dict[str, Any]:
    hosts = op["hosts"]
    return {"half": "round", "round": op["round"], "level": op["level"],
            "iteration": op["it"], "op_index": op["op"], "label": op["label"],
            "t_start": rnd.t_start, "t_end": t_end, "deadline_s": op["deadline_s"],
            "quorum": op["quorum"], "aggregator": node,
            "selected_hosts": [hosts[str(s)] for s in op["srcs"]],
            "finished_hosts": [hosts[str(s)] for s in sorted(rnd.finished)],
            "dropped_hosts": [hosts[str(s)] for s in sorted(rnd.dropped)],
            "drop_reasons": {hosts[str(s)]: r for s, r in sorted(rnd.dropped.items())},
            "bytes_down": rnd.bytes_down, "bytes_up": rnd.bytes_up}


def run_gathers(rank: int, node: str, ops: list[dict[str, Any]], t0: float, eps: Any,
                shared: Shared, emit: Callable[[dict[str, Any]], None]) -> None:
    """Run consecutive gather ops of ``rank`` concurrently from host-clock ``t0`` (a gossip
    node is root of its own gather and source of its peers'); one rank_op record each.
    Raises Abort if the run is aborted; any other error of a role is re-raised."""
    wait_phase(t0, shared)

    def one(op: dict[str, Any]) -> None:
        ts = time.time()
        if op["role"] == "root":
            run_root(node, op, eps, shared, emit)
        else:
            run_src(rank, node, op, eps, shared, emit)
        emit({"half": "rank_op", "rank": rank, "node": node, "iteration": op["it"],
              "op_index": op["op"], "kind": "gather", "label": op["label"], "t_start": ts,
              "t_end": time.time(),
              "slowdown": op.get("slowdown", 1.0) * op.get("live_slowdown", 1.0)})

    fan_out(one, ops, prefer=lambda e: not isinstance(e, Abort))
