"""The shared traffic engine: one process holds the sockets of many emulated hosts.

``python -m traffic_gen.engine --control CTL.sock --node NAME=/run/netns/NS ...``

Runs in the root namespace. A socket keeps the network namespace it was created in
(network_namespaces(7)), so for every host the engine enters the host's namespace (setns(2)
on the namespace file, this thread only), creates the host's listening and connecting
sockets, and goes back; the sockets then work from any namespace. Everything after that
happens on one thread, event-driven (epoll(7)): no thread per connection, no process per
host, so a ring step wakes one process per CPU instead of one per host.

To the controller every hosted node is an ordinary agent: the engine opens one control
connection per node and speaks the agent's messages on it (controller.py: ``hello``,
``setup``/``listening``, ``peers``/``connected``, ``start``/``phase_done``, ``ping``/``pong``,
``slowdown``, ``stop``/``abort``), so the controller's phases, merge and records (flows,
collectives, bursts, timeline; models/records.py) are the per-host agents' own. The data
plane replays the same compiled programs (program.py): per connection a FIFO of jobs, each
waiting for the steps it depends on (the per-host agent's worker threads, transfers.py),
senders writing from one zero buffer, receivers reading into one scratch buffer; every
sending record is closed when its last byte is acknowledged (TCP_INFO polled in the loop,
ackwatch.AckTracker). Timed starts (a burst's instant): the engine wakes ``spin_s`` early,
spins to the instant, then writes the first ``kick_bytes`` (the initial window, RFC 6928) of
every flow due then, one after another, before the rest of any of them.

What it replays: compute, collectives (every algorithm), send_recv and bursts over TCP.
What it refuses (an ``error`` naming the op; orchestration refuses these before the run):
UDP flows, TLS, gathers (FL rounds) and timed messages; those need the per-host agents.
"""

from __future__ import annotations

import argparse
import ctypes
import heapq
import json
import os
import select
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from traffic_gen.algorithms.steps import split_bytes
from traffic_gen.tcpinfo import (
    _FMT,
    NO_RTT_SAMPLE,
    TCP_INFO_FIELDS,
    TCPI_OPT_ECN,
    TcpKnobs,
    apply_knobs,
    namespace_sysctls,
)
from traffic_gen.transfers import OVERDUE_ADVICE, set_scheduler

__all__ = ["Engine", "main", "UNSUPPORTED"]

_HEADER = struct.Struct("!III")
# one send or recv call moves at most this much (the agents' 4 MiB buffers, transfers.py,
# are per agent; an engine's two are resident once for all its hosts, and a send call of a
# MiB already fills any socket buffer the scaled experiments use)
BUFFER_BYTES = 1 << 20
_SETTLE_S = 0.02  # as the per-host agent: no end-of-phase work until t0 + this
_WATCH_S = 0.25  # how often transfer deadlines are checked
_ACK_NAP_MIN_S, _ACK_NAP_MAX_S = 0.0005, 0.01  # ackwatch's polling bounds
_CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)
_IN, _OUT = select.EPOLLIN, select.EPOLLOUT

UNSUPPORTED = "UDP flows, TLS, gathers (FL rounds) and timed messages"
"""What the shared engine does not replay (the per-host agents do)."""


def setns(fd: int, what: str) -> None:
    """Move the calling thread into the network namespace open at ``fd`` (setns(2)).
    Raises OSError naming ``what``."""
    if _LIBC.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into {what}: {os.strerror(err)}")


class EngineError(Exception):
    """A node's failure to report to the controller (the dict is the error message)."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(info.get("detail", "failed"))
        self.info = info


class Loop:
    """epoll plus a timer heap, on the calling thread."""

    def __init__(self) -> None:
        self.ep = select.epoll()
        self.cbs: dict[int, Callable[[int], None]] = {}
        self.masks: dict[int, int] = {}
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0
        self.on_error: Callable[[Any, Exception], None] = _reraise

    def watch(self, fd: int, mask: int, cb: Callable[[int], None]) -> None:
        """Call ``cb(events)`` while ``fd`` is ready for ``mask`` (0: not watched)."""
        self.cbs[fd] = cb
        old = self.masks.get(fd)
        if old == mask:
            return
        if not mask:
            if old:
                self.ep.unregister(fd)
            self.masks.pop(fd, None)
        elif old:
            self.ep.modify(fd, mask)
            self.masks[fd] = mask
        else:
            self.ep.register(fd, mask)
            self.masks[fd] = mask

    def forget(self, fd: int) -> None:
        """Stop watching ``fd`` (before it is closed)."""
        if self.masks.pop(fd, None):
            self.ep.unregister(fd)
        self.cbs.pop(fd, None)

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Call ``fn()`` at host-clock time ``t`` (s) or as soon after as the loop can."""
        self.seq += 1
        heapq.heappush(self.timers, (t, self.seq, fn))

    def once(self, running: Callable[[], bool]) -> None:
        """One round: run due timers, wait for events until the next timer, dispatch."""
        now = time.time()
        while self.timers and self.timers[0][0] <= now:
            fn = heapq.heappop(self.timers)[2]
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - reported by on_error
                self.on_error(fn, exc)
            now = time.time()
        if not running():
            return
        wait = max(0.0, self.timers[0][0] - now) if self.timers else 1.0
        for fd, ev in self.ep.poll(min(wait, 1.0)):
            cb = self.cbs.get(fd)
            if cb is not None and fd in self.masks:
                try:
                    cb(ev)
                except Exception as exc:  # noqa: BLE001 - reported by on_error
                    self.on_error(cb, exc)


_INFO = struct.Struct(_FMT)
(_ACKED, _UNACKED, _NOTSENT, _TOTAL_RETRANS, _BYTES_RETRANS, _LOST, _RTT, _RTTVAR, _CWND,
 _RATE, _DSACK, _MIN_RTT, _REORD, _CE, _OPTIONS) = (TCP_INFO_FIELDS.index(k) for k in (
    "bytes_acked", "unacked", "notsent_bytes", "total_retrans", "bytes_retrans", "lost", "rtt",
    "rttvar", "snd_cwnd", "delivery_rate", "dsack_dups", "min_rtt", "reord_seen",
    "delivered_ce", "options"))


def tcp_info_tuple(sock: socket.socket) -> tuple[int, ...]:
    """``struct tcp_info`` of ``sock`` as the tuple of :data:`TCP_INFO_FIELDS` (the dict of
    tcpinfo.read_tcp_info without building it: one reading per poll of every open
    connection)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _INFO.size)
    if len(raw) < _INFO.size:
        raw += bytes(_INFO.size - len(raw))
    return _INFO.unpack(raw)


class Acks:
    """ackwatch.AckTracker for the engine's loop (no lock, no thread, tuples not dicts): the
    transfers of one sending connection waiting for their acknowledgement; a transfer's
    record is emitted at the first reading whose ``tcpi_bytes_acked`` covers its last byte
    (or at its deadline, ``acked`` false), with ``tcp`` as tcpinfo.tcp_info_delta gives it
    (counters differenced against the previous transfer's closing reading), ``t_acked`` and
    ``acked_bytes``."""

    __slots__ = ("sock", "cc", "emit", "open", "written", "base", "last")

    def __init__(self, sock: socket.socket, cc: str, emit: Callable[[Any], None]) -> None:
        self.sock, self.cc, self.emit = sock, cc, emit
        self.open: deque[tuple[Any, int, int, float]] = deque()
        self.written = 0
        self.base: tuple[int, ...] | None = None
        self.last: tuple[int, ...] = ()

    def add(self, rec: Any, size_bytes: int, deadline: float) -> None:
        """A transfer of ``size_bytes`` just written in full; ``rec`` its send half
        ``(entry, t_start, t_sent, cpu_s, connection info)``, emitted as ``("s", *rec,
        tcp values, acked, t_acked, acked_bytes)`` (:func:`half_record` expands it)."""
        self.written += size_bytes
        self.open.append((rec, self.written, size_bytes, deadline))

    def poll(self) -> float:
        """Read TCP_INFO once, close what it shows acknowledged or overdue; returns the nap
        (s) before the next reading: the unacknowledged rest at the delivery rate, within
        0.5 to 10 ms (ackwatch's bounds). Raises OSError if the socket cannot be read."""
        assert self.base is not None
        info = tcp_info_tuple(self.sock)
        acked, now = info[_ACKED] - self.base[_ACKED], time.time()
        while self.open and (self.open[0][1] <= acked or now >= self.open[0][3]):
            rec, end, size, _ = self.open.popleft()
            b = self.last
            retrans = info[_BYTES_RETRANS] - b[_BYTES_RETRANS]
            mr = info[_MIN_RTT]
            tcp = (info[_TOTAL_RETRANS] - b[_TOTAL_RETRANS], retrans, size + retrans,
                   info[_LOST], info[_RTT] / 1e6, info[_RTTVAR] / 1e6, info[_CWND],
                   info[_RATE] * 8, self.cc, info[_DSACK] - b[_DSACK],
                   mr / 1e6 if 0 < mr < NO_RTT_SAMPLE else None, info[_REORD] - b[_REORD],
                   info[_CE] - b[_CE], bool(info[_OPTIONS] & TCPI_OPT_ECN))
            self.emit(("s", *rec, tcp, end <= acked, now, acked))
            self.last = info
        if not self.open:
            return _ACK_NAP_MAX_S
        left = self.open[0][1] - acked
        return min(max(left / (info[_RATE] or 1), _ACK_NAP_MIN_S), _ACK_NAP_MAX_S)


TCP_KEYS = ("total_retrans", "bytes_retrans", "bytes_sent", "lost", "rtt_s", "rttvar_s",
            "snd_cwnd", "delivery_rate_bps", "congestion_control", "dsack_dups", "min_rtt_s",
            "reord_seen", "delivered_ce", "ecn")
"""The ``tcp`` of a send half (models.records.TcpInfo's fields, as tcpinfo.tcp_info_delta)."""


def entry_meta(e: tuple[Any, ...]) -> dict[str, Any]:
    """The record fields of plan entry ``e`` (ranks.run_xfer's ``meta``)."""
    (it, opi, ident, kind, proto, rate), tag, src, dst, c, _k = e[3]
    return {"iteration": it, "op_index": opi, "id": ident, "op_kind": kind, "step": tag,
            "src_rank": src, "dst_rank": dst, "size_bytes": e[1], "conn": c, "proto": proto,
            "rate_bps": rate}


def entry_key(e: tuple[Any, ...]) -> str:
    """The key joining the two halves of entry ``e``'s flow record (ranks.run_xfer's)."""
    (it, opi, _i, _kind, proto, _rate), _tag, src, dst, c, k = e[3]
    return f"{it}/{opi}/{src}/{dst}/{proto}/{k}/{c}"


def half_record(h: Any) -> dict[str, Any]:
    """A kept half as the per-host agent's record dict: ``("s", entry, t_start, t_sent,
    cpu_s, info, tcp, acked, t_acked, acked_bytes)``, ``("r", entry, t_first_byte, t_end,
    cpu_s, info)`` or a dict (kept as it is). Records are kept as tuples until their phase
    is reported: an engine holds every half of its hosts for a phase."""
    if type(h) is dict:
        return h
    if h[0] == "s":
        _, e, t0, t_sent, cpu, info, tcp, acked, t_acked, acked_bytes = h
        return {"half": "send", "key": entry_key(e), "t_start": t0, "t_sent": t_sent,
                "cpu_s": cpu, **entry_meta(e), **info, "tcp": dict(zip(TCP_KEYS, tcp, strict=True)),
                "acked": acked, "t_acked": t_acked, "acked_bytes": acked_bytes}
    _, e, t_first, t_end, cpu, info = h
    out = {"half": "recv", "key": entry_key(e), "t_first_byte": t_first, "t_end": t_end}
    if cpu is not None:
        out["cpu_s"] = cpu
    return {**out, **entry_meta(e), **info}


def _reraise(_cb: Any, exc: Exception) -> None:
    raise exc


class OpPlan:
    """A transfer op of one rank compiled once, before any phase starts (the work of
    ranks.run_xfer that does not depend on time): per step its number of pieces, and per
    connection its entries in order, each ``(step, part bytes, deps, meta, None, free)``
    (``meta``: what :func:`entry_meta` expands into the records' fields; ``free``: no
    dependencies, so it starts at the op's start instant). Tuples, not dicts: an engine holds
    every entry of its hosts' ranks for a phase (65 000 at 128 ranks)."""

    __slots__ = ("parts", "queues")

    def __init__(self, node: Node, rank: int, op: dict[str, Any]) -> None:
        self.parts: list[int] = []
        queues: dict[Conn, list[tuple[Any, ...]]] = {}
        seq: dict[tuple[str, int, str], int] = {}
        it, opi, ident, op_kind = op["it"], op["op"], op["id"], op["kind"]
        for i, st in enumerate(op["steps"]):  # traffic_gen.wire.Step as a JSON list
            kind, peer, size, deps, tag = st[:5]
            proto = st[5] if len(st) > 5 else "tcp"
            rate = st[6] if len(st) > 6 else None
            src, dst = (rank, peer) if kind == "send" else (peer, rank)
            conns = node.conns(kind, src, dst, proto)
            parts = split_bytes(size, len(conns)) if len(conns) > 1 else (size,)
            k = seq.get((kind, peer, proto), 0)
            seq[(kind, peer, proto)] = k + 1
            self.parts.append(len(conns))
            waits = tuple(deps)
            opinfo = (it, opi, ident, op_kind, proto, rate)
            for c, conn in enumerate(conns):
                queues.setdefault(conn, []).append(
                    (i, parts[c], waits, (opinfo, tag, src, dst, c, k), None, not deps))
        self.queues = list(queues.items())


class XferRun:
    """One transfer op of one rank running (ranks.run_xfer): its connections serve their
    entries of the op's plan in order, each once the steps it depends on are done; the op is
    done when every step is."""

    __slots__ = ("rank", "left", "steps_left", "waiters", "start_at")

    def __init__(self, rank: RankRun, plan: OpPlan, start_at: float) -> None:
        self.rank, self.start_at = rank, start_at
        self.left = list(plan.parts)  # per step: pieces not done yet
        self.steps_left = len(self.left)
        self.waiters: dict[int, list[Conn]] = {}
        if not self.left:
            self.steps_left = 1
            rank.node.engine.loop.at(0.0, lambda: self.piece_done(-1))
            return
        for conn, entries in plan.queues:
            conn.load(self, entries)
        for conn, _ in plan.queues:
            conn.kick()

    def blocked(self, deps: tuple[int, ...], conn: Conn) -> bool:
        """Whether a step of ``deps`` is not done; if so ``conn`` is kicked when it is."""
        left = self.left
        for d in deps:
            if left[d]:
                self.waiters.setdefault(d, []).append(conn)
                return True
        return False

    def piece_done(self, step: int) -> None:
        """A piece of ``step`` is done (-1: the op has no step)."""
        if step >= 0:
            self.left[step] -= 1
            if self.left[step]:
                return
            for conn in self.waiters.pop(step, ()):
                conn.kick()
        self.steps_left -= 1
        if self.steps_left == 0:
            self.rank.op_done()


class Conn:
    """A data connection of one node: serves the entries of one op at a time, in order, as
    its socket allows. The head entry's progress: ``left`` bytes, started at ``t0``."""

    def __init__(self, node: Node, sock: socket.socket, info: dict[str, Any]) -> None:
        self.node, self.sock, self.info = node, sock, info
        self.fd = sock.fileno()
        self.xfer: XferRun | None = None
        self.q: list[tuple[Any, ...]] = []
        self.i = 0
        self.started, self.left, self.t0, self.cpu_s, self.deadline = False, 0, 0.0, 0.0, 0.0

    def load(self, xfer: XferRun, entries: list[tuple[Any, ...]]) -> None:
        """Serve ``entries`` of ``xfer`` next (the previous op's are all done)."""
        self.xfer, self.q, self.i, self.started = xfer, entries, 0, False

    def head(self) -> tuple[Any, ...] | None:
        return self.q[self.i] if self.i < len(self.q) else None

    def _begin(self, e: tuple[Any, ...], now: float) -> None:
        self.started, self.t0, self.left, self.cpu_s = True, now, e[1], 0.0
        self.deadline = now + self.node.timeout_s

    def _advance(self) -> None:
        self.i += 1
        self.started = False

    def kick(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def overdue(self, now: float) -> str | None:
        """A failure text if the head entry is past its transfer deadline."""
        e = self.head()
        if e is not None and self.started and now > self.deadline:
            verb = "send" if isinstance(self, SendConn) else "receive"
            return (f"TimeoutError: could not {verb} {e[1]} bytes within timeouts.transfer "
                    f"({self.node.timeout_s:g} s): {e[1] - self.left} moved; "
                    + OVERDUE_ADVICE)
        return None

    def head_meta(self) -> dict[str, Any]:
        e = self.head()
        return entry_meta(e) if e is not None else {}


class SendConn(Conn):
    """Sends its entries in order; each record is emitted once acknowledged (Acks)."""

    def __init__(self, node: Node, sock: socket.socket, info: dict[str, Any], cc: str) -> None:
        super().__init__(node, sock, info)
        self.acks = Acks(sock, cc, node.emit)
        self.due = 0.0  # next ack poll (host clock)

    def kick(self) -> None:
        """Start the head entry if it may start (its dependencies done, its instant come)
        and write what the socket takes."""
        self.pump()

    def first_bytes(self, now: float, kick_bytes: int) -> None:
        """At a timed start: write up to ``kick_bytes`` of the head entry and no more."""
        e = self.head()
        if e is None or self.started:
            return
        self._begin(e, now)
        if self.left:
            self._send(min(self.left, kick_bytes))

    def _send(self, most: int) -> bool:
        """Write up to ``most`` bytes; False when the socket is full."""
        c0 = time.thread_time()
        try:
            sent = self.sock.send(self.node.engine.send_buf[:min(most, BUFFER_BYTES)])
        except BlockingIOError:
            sent = 0
        self.left -= sent
        self.cpu_s += time.thread_time() - c0
        return sent > 0

    def pump(self, _ev: int = 0) -> None:
        """Write as much of the head entries as the socket takes; finish those written."""
        loop = self.node.engine.loop
        while True:
            e = self.head()
            if e is None:
                break
            xfer = self.xfer
            assert xfer is not None
            if not self.started:
                if e[2] and xfer.blocked(e[2], self):
                    break
                if e[5] and xfer.start_at and time.time() < xfer.start_at:
                    self.node.engine.timed_start(xfer.start_at, self)
                    break
                self._begin(e, time.time())
            while self.left:
                if not self._send(self.left):
                    loop.watch(self.fd, _OUT, self.pump)
                    return
            now = time.time()
            self.acks.add((e, self.t0, now, self.cpu_s, self.info), e[1],
                          now + self.node.timeout_s)
            self.node.engine.ack_watch(self)
            self._advance()
            xfer.piece_done(e[0])  # may load the rank's next op here
        loop.watch(self.fd, 0, self.pump)


class RecvConn(Conn):
    """Receives its entries in order; reads only once the head entry's dependencies are done
    (the bytes wait in the kernel meanwhile, as with the per-host agent)."""

    def kick(self) -> None:
        loop = self.node.engine.loop
        while True:
            e = self.head()
            if e is None:
                break
            xfer = self.xfer
            assert xfer is not None
            if not self.started and e[2] and xfer.blocked(e[2], self):
                break
            if e[1] == 0:
                now = time.time()
                self.node.records.append(("r", e, now, now, None, self.info))
                self._advance()
                xfer.piece_done(e[0])
                continue
            loop.watch(self.fd, _IN, self.readable)
            return
        loop.watch(self.fd, 0, self.readable)

    def readable(self, _ev: int) -> None:
        buf = self.node.engine.recv_buf
        while True:
            e = self.head()
            if e is None:
                break
            xfer = self.xfer
            assert xfer is not None
            first = not self.started
            if first:
                if e[2] and xfer.blocked(e[2], self):
                    self.node.engine.loop.watch(self.fd, 0, self.readable)
                    return
                if e[1] == 0:
                    break  # kick() records it
                self.left, self.cpu_s = e[1], 0.0
            now = time.time()
            c0 = time.thread_time()
            try:
                got = self.sock.recv_into(buf, min(self.left, BUFFER_BYTES))
            except BlockingIOError:
                return  # nothing yet: the first byte's instant is when something comes
            if first:  # t_first_byte: when its first bytes were there to read
                self._begin(e, now)
            self.cpu_s += time.thread_time() - c0
            if not got:
                raise EngineError({**entry_meta(e), **self.info, "node": self.node.name,
                                   "detail": "ConnectionError: peer closed the connection "
                                             "mid-transfer"})
            self.left -= got
            if self.left:
                continue
            self.node.records.append(("r", e, self.t0, time.time(), self.cpu_s, self.info))
            self._advance()
            xfer.piece_done(e[0])
        self.kick()


class RankRun:
    """One rank's ops of one phase (ranks.run_rank), driven by events and timers."""

    def __init__(self, node: Node, rank: int, phase: int, ops: list[dict[str, Any]],
                 t0: float) -> None:
        self.node, self.rank, self.phase, self.ops, self.t0 = node, rank, phase, ops, t0
        self.n, self.ts, self.live = 0, 0.0, 1.0

    def next(self) -> None:
        if self.n == len(self.ops):
            self.node.rank_done()
            return
        op, loop = self.ops[self.n], self.node.engine.loop
        if op["t"] == "compute":
            if self.n == 0 and time.time() < self.t0:
                loop.at(self.t0, self._compute)
            else:
                self._compute()
            return
        if op["t"] != "xfer" or op.get("kind") == "timed":
            raise EngineError({"node": self.node.name, "rank": self.rank,
                               "detail": f"the shared traffic engine does not replay "
                                         f"{op.get('kind', op['t'])} ops ({UNSUPPORTED}); "
                                         f"use traffic_engine: per_host"})
        self.ts = self.t0 if self.n == 0 else time.time()
        self.live = 1.0
        XferRun(self, self.node.plan(self.rank, self.phase, self.n, op),
                self.t0 if self.n == 0 else 0.0)

    def _compute(self) -> None:
        op = self.ops[self.n]
        self.ts = time.time()
        self.live = self.node.slowdown.get(self.rank, 1.0)
        self.node.engine.loop.at(self.ts + op["duration_s"] * self.live, self.op_done)

    def op_done(self) -> None:
        op = self.ops[self.n]
        self.node.emit({"half": "rank_op", "rank": self.rank, "node": self.node.name,
                        "iteration": op["it"], "op_index": op["op"],
                        "kind": op.get("kind", "compute"), "label": op["label"],
                        "t_start": self.ts, "t_end": time.time(),
                        "slowdown": op.get("slowdown", 1.0) * self.live})
        self.n += 1
        self.next()


class Node:
    """One emulated host inside the engine: its control connection, sockets and records."""

    def __init__(self, engine: Engine, name: str, netns: str, ctl: socket.socket) -> None:
        self.engine, self.name, self.netns_path, self.ctl = engine, name, netns, ctl
        self.rbuf = b""
        # "": the engine's own namespace (loopback tests)
        self.nsfd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC) if netns else -1
        self.records: list[Any] = []  # half records, as half_record takes them
        self.setup: dict[str, Any] = {}
        self.timeout_s = 30.0
        self.knobs = TcpKnobs()
        self.out: dict[tuple[int, int, str], dict[int, SendConn]] = {}
        self.inn: dict[tuple[int, int, str], dict[int, RecvConn]] = {}
        self.listeners: list[socket.socket] = []
        self.pending: dict[int, tuple[socket.socket, bytes]] = {}  # accepted, header unread
        self.accepted, self.in_tcp = 0, -1
        self.conn_knobs: list[dict[str, Any]] = []
        self.slowdown: dict[int, float] = {}
        self.conn_cache: dict[tuple[str, int, int, str], list[Conn]] = {}
        self.plans: dict[tuple[int, int, int], OpPlan] = {}
        self.ranks_left = 0
        self.phase: tuple[int, float] | None = None
        self.running = False  # a phase started and not reported yet
        self.settled = False  # the phase's records are complete, not sent yet
        self.peers_done = self.said_connected = False
        self.done = False  # failed or closed: no more work, no more reports
        self.closed = False

    # control ------------------------------------------------------------------------
    def send(self, msg: dict[str, Any]) -> None:
        self.ctl.sendall((json.dumps(msg, separators=(",", ":")) + "\n").encode())

    def emit(self, rec: Any) -> None:
        """Keep a half record (a dict, or a tuple half_record expands) until the phase is
        reported."""
        self.records.append(rec)

    def on_control(self, _ev: int) -> None:
        try:
            data = self.ctl.recv(1 << 20)
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        self.rbuf += data
        *lines, self.rbuf = self.rbuf.split(b"\n")
        for line in lines:
            if line.strip() and not self.closed:
                msg = json.loads(line)
                if not self.done or msg["type"] in ("stop", "abort"):
                    self.handle(msg)

    def handle(self, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        if kind == "setup":
            self._on_setup(msg)
        elif kind == "peers":
            self._on_peers(msg)
        elif kind == "start":
            self.engine.start_phase(int(msg["phase"]), float(msg["t0"]))
        elif kind == "slowdown":
            self.slowdown[int(msg["rank"])] = float(msg["factor"])
            self.send({"type": "slowdown_set", "node": self.name, "rank": msg["rank"],
                       "factor": msg["factor"], "t": time.time()})
        elif kind == "ping":
            self.send({"type": "pong", "node": self.name, "seq": msg["seq"]})
        elif kind in ("stop", "abort"):
            self.close()

    def fail(self, info: dict[str, Any]) -> None:
        """Report ``info`` once as this node's error; the controller then aborts the run."""
        if not self.done:
            try:
                self.send({"type": "error", "node": self.name, **info})
            except OSError:
                pass
            self.done = True

    # sockets ------------------------------------------------------------------------
    def _socket(self, kind: int) -> socket.socket:
        """A socket of this host's namespace."""
        if self.nsfd < 0:
            return socket.socket(socket.AF_INET, kind)
        setns(self.nsfd, f"the namespace of node {self.name} ({self.netns_path})")
        try:
            return socket.socket(socket.AF_INET, kind)
        finally:
            setns(self.engine.home_fd, "the engine's own namespace")

    def _on_setup(self, msg: dict[str, Any]) -> None:
        self.setup = msg
        opts = msg["options"]
        if opts.get("tls") or msg.get("udp_in"):
            raise EngineError({"node": self.name, "detail": f"the shared traffic engine does "
                               f"not replay {UNSUPPORTED}; use traffic_engine: per_host"})
        self.timeout_s = float(opts["transfer_timeout_s"])
        self.knobs = TcpKnobs(**opts.get("knobs", {}))
        self.in_tcp = int(msg["in_tcp"])
        ports = {}
        for ip in msg.get("ips") or [msg["ip"]]:
            ls = self._socket(socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            apply_knobs(ls, self.knobs)
            ls.bind((ip, 0))
            ls.listen(1024)
            ls.setblocking(False)
            self.listeners.append(ls)
            ports[ip] = ls.getsockname()[1]
            self.engine.loop.watch(ls.fileno(), _IN, lambda _e, s=ls: self._accept(s))
        self.send({"type": "listening", "node": self.name, "tcp_ports": ports,
                   "udp_ports": {}})

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                s, _ = ls.accept()
            except BlockingIOError:
                return
            s.setblocking(False)
            fd = s.fileno()
            self.pending[fd] = (s, b"")
            self.engine.loop.watch(fd, _IN, lambda _e, fd=fd: self._header(fd))

    def _header(self, fd: int) -> None:
        s, got = self.pending[fd]
        try:
            more = s.recv(_HEADER.size - len(got))
        except BlockingIOError:
            return
        if not more:
            raise EngineError({"node": self.name, "detail": "a peer closed its connection "
                                                            "before its header"})
        got += more
        if len(got) < _HEADER.size:
            self.pending[fd] = (s, got)
            return
        del self.pending[fd]
        self.engine.loop.watch(fd, 0, lambda _e: None)
        src, dst, c = _HEADER.unpack(got)
        peer, here = s.getpeername(), s.getsockname()
        info = {"dst_node": self.name, "dst_ip": here[0], "dport": here[1],
                "src_ip": peer[0], "sport": peer[1]}
        self.inn.setdefault((src, dst, "tcp"), {})[c] = RecvConn(self, s, info)
        self.accepted += 1
        self._maybe_connected()

    def _on_peers(self, msg: dict[str, Any]) -> None:
        allowed = set(self.setup["allowed"])
        bind = self.setup.get("bind") or {}
        for src, dst, c, proto in self.setup["out"]:
            if proto != "tcp":
                raise EngineError({"node": self.name, "detail": f"the shared traffic engine "
                                   f"does not replay {UNSUPPORTED}; use traffic_engine: "
                                   f"per_host"})
            ip, port, dst_node, *given = msg["rank_ep"][str(dst)]
            src_ip = bind.get(str(src)) or (given[0] if given else self.setup["ip"])
            for a in (ip, src_ip):
                if a not in allowed:
                    raise EngineError({"node": self.name, "detail": f"connection setup failed: "
                                       f"node {self.name}: refusing to connect to {a}: not a "
                                       f"lab address", "op": "connect"})
            s = self._socket(socket.SOCK_STREAM)
            s.bind((src_ip, 0))
            readback = apply_knobs(s, self.knobs)
            s.settimeout(30.0)
            s.connect((ip, port))
            s.sendall(_HEADER.pack(src, dst, c))
            s.setblocking(False)
            info = {"src_node": self.name, "dst_node": dst_node, "src_ip": src_ip,
                    "sport": s.getsockname()[1], "dst_ip": ip, "dport": port}
            self.out.setdefault((src, dst, "tcp"), {})[c] = SendConn(
                self, s, info, str(readback["congestion_control"]))
            self.conn_knobs.append({"src_rank": src, "dst_rank": dst, "conn": c, **readback})
        self.peers_done = True
        self._maybe_connected()

    def _maybe_connected(self) -> None:
        """Reply ``connected`` once the outgoing connections are open, every incoming one
        arrived, and every connection header is acknowledged (the ack baselines)."""
        if not self.peers_done or self.accepted < self.in_tcp or self.said_connected:
            return
        for conns in self.out.values():
            for w in conns.values():
                if w.acks.base is None:
                    info = tcp_info_tuple(w.sock)
                    if info[_UNACKED] or info[_NOTSENT]:
                        self.engine.loop.at(time.time() + _ACK_NAP_MIN_S, self._maybe_connected)
                        return
                    w.acks.base = w.acks.last = info
        self._compile(0)
        self.said_connected = True
        if self.nsfd >= 0:
            setns(self.nsfd, f"the namespace of node {self.name}")
        try:
            sysctls = namespace_sysctls()  # /proc/sys/net: the calling thread's namespace
        finally:
            if self.nsfd >= 0:
                setns(self.engine.home_fd, "the engine's own namespace")
        self.send({"type": "connected", "node": self.name,
                   "knobs": {"sysctls": sysctls, "connections": self.conn_knobs}})

    def _compile(self, phase: int) -> None:
        """The transfer ops of this node's ranks in ``phase`` as OpPlans, before the phase
        starts: phase 0 before ``connected``, each next one once the previous is reported
        (while the controller merges); a phase's plans are dropped when it is reported. Ops
        the engine does not replay are refused when their phase runs."""
        for r, prog in self.setup["ranks"].items():
            for n, op in enumerate(prog[phase] if phase < len(prog) else ()):
                if op["t"] == "xfer" and op.get("kind") != "timed":
                    self.plans[(int(r), phase, n)] = OpPlan(self, int(r), op)

    def plan(self, rank: int, phase: int, n: int, op: dict[str, Any]) -> OpPlan:
        """The compiled plan of op ``n`` of ``rank`` in ``phase``."""
        got = self.plans.get((rank, phase, n))
        return got if got is not None else OpPlan(self, rank, op)

    def conns(self, kind: str, src: int, dst: int, proto: str) -> list[Conn]:
        """The connections of channel (src, dst, proto) in connection order (cached)."""
        key = (kind, src, dst, proto)
        got = self.conn_cache.get(key)
        if got is None:
            table: dict[Any, Any] = self.out if kind == "send" else self.inn
            have = table.get((src, dst, proto))
            if not have:
                raise EngineError({"node": self.name, "detail": f"OSError: node {self.name}: "
                                   f"no {proto} connection for rank {src} -> rank {dst}"})
            got = self.conn_cache[key] = [have[c] for c in sorted(have)]
        return got

    # phases -------------------------------------------------------------------------
    def start(self, phase: int, t0: float) -> None:
        """Run ``phase`` from instant ``t0`` (once: a later ``start`` of it is ignored)."""
        if self.done or (self.phase is not None and self.phase[0] >= phase):
            return
        self.phase, self.running = (phase, t0), True
        runs = [RankRun(self, int(r), phase, prog[phase], t0)
                for r, prog in self.setup["ranks"].items() if prog[phase]]
        self.ranks_left = len(runs)
        if not runs:
            self.engine.loop.at(0.0, self._settled)
        for run in runs:
            run.next()

    def rank_done(self) -> None:
        self.ranks_left -= 1
        if self.ranks_left == 0:
            assert self.phase is not None
            self.engine.loop.at(self.phase[1] + _SETTLE_S, self._settled)

    def _settled(self) -> None:
        """End of phase: wait until every sending record is closed, then report."""
        if self.done:
            return
        if any(w.acks.open for conns in self.out.values() for w in conns.values()):
            self.engine.loop.at(time.time() + _ACK_NAP_MIN_S * 4, self._settled)
            return
        self.settled = True
        self.engine.report()

    def report(self) -> None:
        """Send this node's ``phase_done`` with its records."""
        assert self.phase is not None
        self.settled = self.running = False
        recs, self.records = self.records, []
        self.send({"type": "phase_done", "node": self.name, "phase": self.phase[0],
                   "records": [half_record(h) for h in recs]})
        del recs
        self.plans = {k: v for k, v in self.plans.items() if k[1] != self.phase[0]}
        self._compile(self.phase[0] + 1)

    def all_conns(self) -> list[Conn]:
        return [w for t in (self.out, self.inn) for conns in t.values() for w in conns.values()]

    def close(self) -> None:
        """Close every socket of this node (``stop``, ``abort`` or a lost controller)."""
        if self.closed:
            return
        self.done = self.closed = True
        loop = self.engine.loop
        for w in self.all_conns():
            loop.forget(w.fd)
            w.sock.close()
        for s, _ in self.pending.values():
            loop.forget(s.fileno())
            s.close()
        for ls in self.listeners:
            loop.forget(ls.fileno())
            ls.close()
        self.out, self.inn, self.pending, self.listeners = {}, {}, {}, []
        loop.forget(self.ctl.fileno())
        self.ctl.close()
        if self.nsfd >= 0:
            os.close(self.nsfd)


class Engine:
    """The engine's nodes, shared buffers, timed starts and acknowledgement polling."""

    def __init__(self) -> None:
        self.loop = Loop()
        self.home_fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.nodes: list[Node] = []
        self.send_buf = memoryview(bytes(BUFFER_BYTES))
        self.recv_buf = memoryview(bytearray(BUFFER_BYTES))
        self.starts: dict[float, list[SendConn]] = {}
        self.acking: set[SendConn] = set()
        self.ack_timer = False
        self.spin_s, self.kick_bytes = 200e-6, 14480
        self.rt_priority: int | None = None
        self.boosted = False

    def attach(self, control: str, name: str, netns: str) -> None:
        """Open ``name``'s control connection and say hello."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        deadline = time.time() + 10
        while True:
            try:
                sock.connect(control)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        node = Node(self, name, netns, sock)
        self.nodes.append(node)
        self.loop.watch(sock.fileno(), _IN, node.on_control)
        node.send({"type": "hello", "node": name})

    def start_phase(self, phase: int, t0: float) -> None:
        """A node heard ``start``: start the phase on every node of this engine at once.
        The controller sends the same ``start`` (phase, t0) to every node (controller.py
        ``_phase``), one message after another; starting each node as its own message comes
        in spread the ranks' first sends over the controller's loop (tens of ms with 64
        hosts on a loaded machine), starting them together puts them in one pass."""
        for node in self.nodes:
            node.start(phase, t0)

    def report(self) -> None:
        """Send the ``phase_done`` of every settled node once no node of this engine still
        runs the phase. The controller waits for every node's anyway, and sending earlier
        stalled the others' traffic: a node's records (hundreds of half records) are encoded
        and written on the loop's thread, into a control socket the controller drains as
        slowly as its machine lets it (0.9 s stalls of every transfer at 128 hosts)."""
        if any(n.running and not n.settled and not n.done for n in self.nodes):
            return
        for n in self.nodes:
            if n.settled and not n.done:
                n.report()

    # timed starts -----------------------------------------------------------------------
    def timed_start(self, t: float, conn: SendConn) -> None:
        """Start ``conn``'s head job at instant ``t`` together with every other due then."""
        due = self.starts.setdefault(t, [])
        if conn in due:
            return
        if not due:  # epoll's timeout is in whole ms, rounded up: wake a ms early, then spin
            self.loop.at(t - self.spin_s - 0.001, lambda: self._fire(t))
            self._boost(True)
        due.append(conn)

    def _boost(self, on: bool) -> None:
        """SCHED_FIFO at ``rt_priority`` while a timed start is pending (the wake-up before
        the instant then preempts ordinary work, as the per-host agents' waiting threads and
        the starters do, transfers.py and burst_starter.py), back to SCHED_OTHER after it."""
        if not self.rt_priority or on == self.boosted:
            return
        try:
            set_scheduler(os.SCHED_FIFO, self.rt_priority) if on else set_scheduler(
                os.SCHED_OTHER, 0)
            self.boosted = on
        except OSError:
            self.rt_priority = None  # not allowed here (no root): ordinary scheduling

    def _fire(self, t: float) -> None:
        due = self.starts.pop(t, [])
        while time.time() < t:
            pass
        for conn in due:  # the first window of every flow, then the rest
            conn.first_bytes(time.time(), self.kick_bytes)
        if not self.starts:
            self._boost(False)
        for conn in due:
            conn.pump()

    # acknowledgements ---------------------------------------------------------------------
    def ack_watch(self, conn: SendConn) -> None:
        """Poll ``conn``'s TCP_INFO until its open transfers are acknowledged (ackwatch's
        naps: the time the unacknowledged rest needs at the delivery rate, 0.5 to 10 ms)."""
        if conn not in self.acking:
            self.acking.add(conn)
            conn.due = time.time()
        if not self.ack_timer:
            self.ack_timer = True
            self.loop.at(time.time() + _ACK_NAP_MIN_S, self._ack_poll)

    def _ack_poll(self) -> None:
        now, nxt = time.time(), float("inf")
        for conn in list(self.acking):
            if conn.due <= now:
                try:
                    conn.due = now + conn.acks.poll()
                except OSError:
                    conn.acks.open.clear()
                if not conn.acks.open:
                    self.acking.discard(conn)
                    continue
            nxt = min(nxt, conn.due)
        if self.acking:
            self.loop.at(max(nxt, now + _ACK_NAP_MIN_S), self._ack_poll)
        else:
            self.ack_timer = False

    # watchdog -----------------------------------------------------------------------------
    def _watchdog(self) -> None:
        now = time.time()
        for node in self.nodes:
            if node.done:
                continue
            for w in node.all_conns():
                why = w.overdue(now)
                if why:
                    node.fail({**w.head_meta(), **w.info, "detail": why})
                    break
        self.loop.at(now + _WATCH_S, self._watchdog)

    def run(self) -> int:
        """Serve until every node is closed (``stop``, ``abort`` or its controller gone);
        returns 0."""
        self.loop.at(time.time() + _WATCH_S, self._watchdog)
        self.loop.on_error = self._on_error
        while not all(n.closed for n in self.nodes):
            self.loop.once(lambda: not all(n.closed for n in self.nodes))
        return 0

    def _on_error(self, cb: Any, exc: Exception) -> None:
        """A callback raised: fail its node (a connection's, a rank's), else every node."""
        if isinstance(exc, EngineError):
            info = exc.info
        else:
            info = {"detail": f"{type(exc).__name__}: {exc}"}
            conn = getattr(cb, "__self__", None)
            if isinstance(conn, Conn):
                info = {**conn.head_meta(), **conn.info, **info}
        owner = getattr(getattr(cb, "__self__", None), "node", None)
        name = info.get("node") or getattr(owner, "name", None)
        hit = [n for n in self.nodes if n.name == name] or self.nodes
        for n in hit:
            n.fail({**info, "node": n.name})


def main(argv: list[str] | None = None) -> int:
    """Entry point: attach every ``--node NAME=NETNS_PATH`` and serve."""
    ap = argparse.ArgumentParser(prog="traffic_gen.engine")
    ap.add_argument("--control", required=True, help="controller's Unix socket path")
    ap.add_argument("--node", action="append", required=True,
                    help="NAME=PATH: a hosted node and its namespace file (/run/netns/NS)")
    ap.add_argument("--spin-s", type=float, default=200e-6)
    ap.add_argument("--kick-bytes", type=int, default=14480)
    ap.add_argument("--rt-priority", type=int, default=None)
    args = ap.parse_args(argv)
    eng = Engine()
    eng.spin_s, eng.kick_bytes, eng.rt_priority = args.spin_s, args.kick_bytes, args.rt_priority
    for spec in args.node:
        name, _, path = spec.partition("=")
        eng.attach(args.control, name, path)
    return eng.run()


if __name__ == "__main__":
    sys.exit(main())
