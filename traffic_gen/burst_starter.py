"""Synchronized starts by hand-off: one starter thread puts the first bytes of every timed
flow into the kernel at the burst's instant.

Why: with one agent process per emulated host, a burst of 64 senders on 2 cores starts only as
fast as the scheduler can wake 64 processes; even bare processes that do nothing but wake at
one instant spread over ~3.4 ms here (bench/start_skew.py measures that floor). The sockets,
however, need not be written by their agent: an agent hands a duplicate of each outgoing TCP
socket's descriptor to the controller's starter (``SCM_RIGHTS`` over a Unix ``SOCK_SEQPACKET``
socket, unix(7)). Before a timed transfer the sender worker *arms* it (connection, instant,
byte count); at the instant the starter writes the first segment of every armed flow in one
tight loop (recording the time of each write: the flow's actual start), then tops each flow
up to the armed byte count, and tells each agent how many bytes it wrote. The worker then
sends the rest. Only the byte count of a transfer matters on the wire (the data is zeros, no
framing), so the split is invisible to the receiver. This is the software analogue of a
NIC's scheduled transmission (SO_TXTIME with the etf qdisc, absent from this kernel).

The controller runs one starter process per core (``python -m traffic_gen.burst_starter``;
processes, not threads, because a thread spinning towards an instant holds the interpreter lock that
another would need); each agent spreads its connections over them, so the kernel work of the
first writes (~10-15 us per send through a veth pair here) runs on all cores at once.
The sockets stay in their hosts' namespaces: the starter only writes to them, so lab traffic
still crosses only the lab's links. Messages are JSON, one per datagram:
agent -> starter: ``{"register": [conn ids]}`` (descriptors attached; answered with
``{"registered": n}``), ``{"arm": id, "conn": cid, "t": s, "bytes": n}``;
starter -> agent: ``{"kicked": id, "t": s, "bytes": n}`` or ``{"kicked": id, "error": text}``.
"""

from __future__ import annotations

import argparse
import ctypes
import heapq
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traffic_gen.transfers import set_scheduler

__all__ = ["KickServer", "KickClient", "FIRST_BYTES", "main"]

FIRST_BYTES = 1448  # first pass: one full-sized segment per flow (1500-byte MTU, TCP options)
_MAX_FDS = 200  # descriptors per SCM_RIGHTS message (the kernel's limit is 253, SCM_MAX_FD)
_MSG_BYTES = 1 << 16
_ZEROS = memoryview(bytes(1 << 20))
_PRECISE_S = 0.002  # the last stretch before an instant is slept with nanosleep, not epoll


@dataclass(order=True)
class _Arm:
    t: float
    seq: int
    conn: socket.socket = field(compare=False)
    size: int = field(compare=False)
    reply: socket.socket = field(compare=False)
    arm_id: int = field(compare=False)


class KickServer(threading.Thread):
    """The starter (controller side). Listens on ``path`` (a Unix SOCK_SEQPACKET socket);
    ``spin_s`` and ``rt_priority`` as in ReplayOptions (the starter thread spins the last
    ``spin_s`` before an instant at SCHED_FIFO ``rt_priority``; needs root). Side effects: the
    socket file at ``path`` (removed by :meth:`close`) and duplicates of the agents' sockets
    (closed by :meth:`close`)."""

    def __init__(self, path: Path, spin_s: float, rt_priority: int | None) -> None:
        super().__init__(daemon=True, name="kick-server")
        self.path, self.spin_s, self.rt_priority = path, spin_s, rt_priority
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.srv.bind(str(path))
        self.srv.listen(1024)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.srv, selectors.EVENT_READ)
        self.conns: dict[str, socket.socket] = {}
        self.armed: list[_Arm] = []
        self.seq = 0
        self.stopping = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        """Serve until :meth:`close`; any unexpected error is kept in ``error``. With
        ``rt_priority`` the thread runs at SCHED_FIFO throughout: it sleeps in ``select``
        between instants, so it costs nothing then, and its wake-up before an instant is not
        delayed behind ordinary tasks (on 2 cores shared by 64 agents it would be)."""
        try:
            if self.rt_priority:
                set_scheduler(os.SCHED_FIFO, self.rt_priority)
            while not self.stopping.is_set():
                if self.armed and self.armed[0].t - self.spin_s - time.time() < _PRECISE_S:
                    # the last stretch: nanosleep, not epoll (whose timeout is whole ms)
                    time.sleep(max(0.0, self.armed[0].t - self.spin_s - time.time()))
                else:
                    for key, _ in self.sel.select(self._timeout()):
                        self._readable(key.fileobj)  # type: ignore[arg-type]
                self._fire_due()
        except Exception as exc:  # noqa: BLE001 - reported by the controller
            self.error = f"{type(exc).__name__}: {exc}"

    def _timeout(self) -> float:
        """How long to wait for messages: until the last stretch before the next instant
        (epoll_wait rounds its timeout up to whole milliseconds), at most 0.1 s."""
        if not self.armed:
            return 0.1
        return max(0.0, min(0.1, self.armed[0].t - self.spin_s - _PRECISE_S - time.time()))

    def _readable(self, sock: socket.socket) -> None:
        if sock is self.srv:
            conn, _ = self.srv.accept()
            self.sel.register(conn, selectors.EVENT_READ)
            return
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, _MSG_BYTES, _MAX_FDS)
        except OSError:
            data, fds = b"", []
        if not data:
            self.sel.unregister(sock)
            sock.close()
            return
        self._handle(sock, json.loads(data), fds)

    def _handle(self, sock: socket.socket, msg: dict[str, Any], fds: list[int]) -> None:
        if "register" in msg:
            for cid, fd in zip(msg["register"], fds, strict=True):
                self.conns[cid] = socket.socket(fileno=fd)
            sock.send(json.dumps({"registered": len(fds)}).encode())
        elif "arm" in msg:
            conn = self.conns.get(msg["conn"])
            if conn is None:
                _reply(sock, {"kicked": msg["arm"], "error": f"unknown connection {msg['conn']}"})
                return
            self.seq += 1
            heapq.heappush(self.armed, _Arm(msg["t"], self.seq, conn, int(msg["bytes"]), sock,
                                            msg["arm"]))

    def _fire_due(self) -> None:
        if not self.armed or self.armed[0].t - self.spin_s > time.time():
            return
        t = self.armed[0].t
        due = []
        while self.armed and self.armed[0].t <= t:
            due.append(heapq.heappop(self.armed))
        while time.time() < t:
            pass
        _fire(due)

    def close(self) -> None:
        """Stop serving; close every descriptor and the socket file."""
        self.stopping.set()
        if self.is_alive():
            self.join(timeout=1.0)
        for s in [*self.conns.values(), *(k.fileobj for k in list(self.sel.get_map().values()))]:
            s.close()  # type: ignore[union-attr]
        self.sel.close()
        self.conns.clear()
        self.path.unlink(missing_ok=True)


def _fire(due: list[_Arm]) -> None:
    """Write the first segment of every due flow, then top each up; reply to each."""
    starts, sent, errors = [], [0] * len(due), [""] * len(due)
    for i, a in enumerate(due):  # the critical loop: nothing but clock and send
        starts.append(time.time())
        try:
            sent[i] = a.conn.send(_ZEROS[:min(a.size, FIRST_BYTES)], socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass
        except OSError as exc:
            errors[i] = f"{type(exc).__name__}: {exc}"
    for i, a in enumerate(due):
        if not errors[i] and sent[i] and a.size > sent[i]:
            sent[i] += _send_some(a.conn, a.size - sent[i])
    for i, a in enumerate(due):
        msg = {"kicked": a.arm_id, "t": starts[i], "bytes": sent[i]}
        if errors[i]:
            msg["error"] = errors[i]
        _reply(a.reply, msg)


def _send_some(conn: socket.socket, size: int) -> int:
    """Write up to ``size`` zero bytes without blocking; the count written."""
    done = 0
    while done < size:
        try:
            n = conn.send(_ZEROS[:min(size - done, len(_ZEROS))], socket.MSG_DONTWAIT)
        except (BlockingIOError, OSError):
            break
        if not n:
            break
        done += n
    return done


def _reply(sock: socket.socket, msg: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:
        pass  # the agent is gone; the controller notices through its control socket


class KickClient:
    """The agent's side: registers descriptors, arms transfers, waits for their kick.
    ``paths``: the starters' sockets; ``kick_bytes``: how many bytes of a timed transfer the
    starter writes (its first pass writes at most :data:`FIRST_BYTES`, its second tops up to
    ``kick_bytes``). Raises OSError if a starter cannot be reached."""

    def __init__(self, paths: list[str], kick_bytes: int) -> None:
        self.kick_bytes = kick_bytes
        self.socks = []
        for path in paths:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.connect(path)
            self.socks.append(sock)
        self.route: dict[str, socket.socket] = {}
        self.lock = threading.Lock()
        self.waiting: dict[int, tuple[threading.Event, list[dict[str, Any]]]] = {}
        self.next_id = 0

    def register(self, conns: dict[str, socket.socket]) -> None:
        """Hand duplicates of ``conns`` (connection id -> connected TCP socket) to the
        starters, spread by a hash of the id; returns when they have them. Raises OSError if a
        starter is gone."""
        n = len(self.socks)
        items = sorted(conns.items())
        for k, sock in enumerate(self.socks):
            # by a hash of the run-wide connection id, so that agents with one connection
            # each still spread over every starter
            mine = [(cid, s) for cid, s in items if zlib.crc32(cid.encode()) % n == k]
            for i in range(0, len(mine), _MAX_FDS):
                self._register(sock, mine[i:i + _MAX_FDS])
            self.route.update((cid, sock) for cid, _ in mine)
            threading.Thread(target=self._read, args=(sock,), daemon=True,
                             name="kick-client").start()

    @staticmethod
    def _register(sock: socket.socket, part: list[tuple[str, socket.socket]]) -> None:
        socket.send_fds(sock, [json.dumps({"register": [c for c, _ in part]}).encode()],
                        [s.fileno() for _, s in part])
        reply = json.loads(sock.recv(_MSG_BYTES) or b"{}")
        if reply.get("registered") != len(part):
            raise OSError(f"a starter took {reply} of {len(part)} connections")

    def _read(self, sock: socket.socket) -> None:
        while data := _recv(sock):
            msg = json.loads(data)
            with self.lock:
                ev, box = self.waiting.pop(msg["kicked"])
            box.append(msg)
            ev.set()

    def arm(self, conn: str, t: float, size: int) -> tuple[threading.Event, list[dict[str, Any]]]:
        """Ask the starter to write the first ``min(size, kick_bytes)`` bytes on ``conn`` at
        host-clock time ``t``; returns an event set when it did and a box holding its
        reply (``t``, ``bytes``, maybe ``error``). Raises OSError if the starter is gone."""
        ev, box = threading.Event(), []  # type: ignore[var-annotated]
        with self.lock:
            self.next_id += 1
            arm_id = self.next_id
            self.waiting[arm_id] = (ev, box)
        sock = self.route.get(conn, self.socks[0])  # unknown: the starter says so
        sock.send(json.dumps({"arm": arm_id, "conn": conn, "t": t,
                              "bytes": min(size, self.kick_bytes)}).encode())
        return ev, box

    def close(self) -> None:
        """Close the connections to the starters."""
        for sock in self.socks:
            sock.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(_MSG_BYTES)
    except OSError:
        return b""


def _die_with_parent() -> None:
    """SIGTERM when the controller that started this process dies (prctl(2)
    PR_SET_PDEATHSIG), so that no starter outlives its run."""
    pr_set_pdeathsig = 1
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def main(argv: list[str] | None = None) -> int:
    """A starter process: ``python -m traffic_gen.burst_starter --path SOCK [--spin-s S]
    [--rt-priority P]``. Serves until SIGTERM/SIGINT, then removes its socket; exit code 1
    if it failed (the reason on stderr)."""
    ap = argparse.ArgumentParser(prog="traffic_gen.burst_starter")
    ap.add_argument("--path", required=True, type=Path)
    ap.add_argument("--spin-s", type=float, default=0.0)
    ap.add_argument("--rt-priority", type=int, default=None)
    args = ap.parse_args(argv)
    _die_with_parent()
    server = KickServer(args.path, args.spin_s, args.rt_priority)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stopping.set())
    try:
        server.run()
    finally:
        server.close()
    if server.error:
        print(f"starter failed: {server.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
