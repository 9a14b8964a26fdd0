"""Close each TCP transfer's record when its last byte is acknowledged.

``send()`` returns once the data is in the socket buffer, long before it is on the wire, so a
TCP_INFO reading taken then (or when the next transfer starts) describes some earlier part of
the connection, not this transfer. Here every sending connection has an :class:`AckTracker`
that knows where each of its transfers ends in the connection's byte stream; one
:class:`AckWatcher` thread per agent polls TCP_INFO of the connections with open transfers and
closes a transfer's record at the first reading whose ``tcpi_bytes_acked`` covers its last
byte (the "ack instant"). Transfers queued back-to-back on one connection keep pipelining:
nobody waits for an acknowledgement except the end-of-phase flush.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from traffic_gen.tcpinfo import read_tcp_info, tcp_info_delta

__all__ = ["AckTracker", "AckWatcher"]

# polling interval bounds (s): the watcher sleeps for the time the unacknowledged rest of the
# oldest open transfer needs at the latest delivery rate, clamped to these; 10 ms caps how late
# an ack instant is seen (and how much of the next transfer's retransmissions a reading can
# include), 0.5 ms caps the polling cost near the end of a transfer
_NAP_MIN_S = 0.0005
_NAP_MAX_S = 0.01


@dataclass
class _Open:
    rec: dict[str, Any]
    end: int  # bytes written to the connection up to and including this transfer
    size_bytes: int
    deadline: float  # host clock (s): close even if not acknowledged by then


class AckTracker:
    """The transfers of one sending TCP connection that wait for their acknowledgement.

    Offsets count the connection's data bytes from its first one; ``tcpi_bytes_acked`` is
    taken relative to its value before the first send (the handshake counts 1 there).
    A closed record gets ``tcp`` (:func:`tcp_info_delta` between the previous transfer's
    closing reading and this one's), ``acked`` (False if the deadline passed first),
    ``t_acked`` (host clock, s, of the closing reading) and ``acked_bytes`` (connection bytes
    acknowledged at that reading)."""

    def __init__(self, sock: socket.socket, congestion_control: str,
                 emit: Callable[[dict[str, Any]], None]) -> None:
        self.sock, self.cc, self.emit = sock, congestion_control, emit
        self.cv = threading.Condition()
        self.open: deque[_Open] = deque()
        self.written = 0
        self.base: dict[str, int] | None = None
        self.last: dict[str, int] = {}
        self.error: OSError | None = None

    def start(self, timeout_s: float) -> None:
        """Read the baseline before this connection's first transfer (no-op afterwards),
        once whatever was written before (the connection header) is acknowledged, so that
        offsets start at the first transfer's first byte. Raises TimeoutError if that takes
        more than ``timeout_s`` (s)."""
        if self.base is not None:
            return
        deadline, info = time.time() + timeout_s, read_tcp_info(self.sock)
        while info["unacked"] or info["notsent_bytes"]:
            if time.time() > deadline:
                raise TimeoutError(f"connection setup data unacknowledged after {timeout_s} s")
            time.sleep(_NAP_MIN_S)
            info = read_tcp_info(self.sock)
        self.base = self.last = info

    def add(self, rec: dict[str, Any], size_bytes: int, deadline: float) -> None:
        """Register a transfer of ``size_bytes`` just written in full; its record ``rec`` is
        emitted once acknowledged, or at host-clock ``deadline`` (s) at the latest."""
        with self.cv:
            self.written += size_bytes
            self.open.append(_Open(rec, self.written, size_bytes, deadline))

    def idle(self) -> bool:
        """True if no transfer waits (or polling failed)."""
        with self.cv:
            return not self.open or self.error is not None

    def poll(self) -> float:
        """Read TCP_INFO once and close every transfer it shows acknowledged or overdue.
        Returns how long (s) the caller may wait before polling again. Raises OSError if the
        socket cannot be read (also kept for :meth:`drain`)."""
        assert self.base is not None
        try:
            info = read_tcp_info(self.sock)
        except OSError as exc:
            with self.cv:
                self.error = exc
                self.cv.notify_all()
            raise
        acked, now = info["bytes_acked"] - self.base["bytes_acked"], time.time()
        with self.cv:
            while self.open and (self.open[0].end <= acked or now >= self.open[0].deadline):
                self._close(self.open.popleft(), info, acked, now)
            if not self.open:
                self.cv.notify_all()
                return _NAP_MAX_S
            left = self.open[0].end - acked
        rate = info["delivery_rate"] or 1  # bytes/s
        return min(max(left / rate, _NAP_MIN_S), _NAP_MAX_S)

    def _close(self, o: _Open, info: dict[str, int], acked: int, now: float) -> None:
        tcp = tcp_info_delta(self.last, info, self.cc, o.size_bytes)
        self.emit({**o.rec, "tcp": tcp.to_dict(), "acked": o.end <= acked,
                   "t_acked": now, "acked_bytes": acked})
        self.last = info

    def drain(self, timeout_s: float) -> None:
        """Wait until every registered transfer's record is emitted. Raises TimeoutError
        after ``timeout_s`` (s), or the OSError that stopped polling."""
        with self.cv:
            if not self.cv.wait_for(lambda: not self.open or self.error, timeout_s):
                raise TimeoutError(f"{len(self.open)} transfer records still open after "
                                   f"{timeout_s} s")
            if self.error is not None:
                raise self.error


class AckWatcher:
    """One daemon thread per agent that polls the :class:`AckTracker` s with open transfers
    (started on first use; idle, it blocks without polling)."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.active: set[AckTracker] = set()
        self.thread: threading.Thread | None = None

    def watch(self, tracker: AckTracker) -> None:
        """Poll ``tracker`` until it has no open transfer (call after each ``add``)."""
        with self.cv:
            self.active.add(tracker)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True,
                                               name="ack-watcher")
                self.thread.start()
            self.cv.notify()

    def _run(self) -> None:
        while True:
            with self.cv:
                self.cv.wait_for(lambda: self.active)
                trackers = list(self.active)
            nap = _NAP_MAX_S
            for t in trackers:
                try:
                    nap = min(nap, t.poll())
                except OSError:
                    pass  # kept in the tracker: its sender's drain() raises it
            with self.cv:  # re-checked under cv: an add() after the poll keeps its tracker
                self.active -= {t for t in trackers if t.idle()}
            time.sleep(nap)
