"""Control messages: one JSON object per line over a Unix stream socket in the run directory
(control never crosses the emulated links)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

__all__ = ["Channel", "recv_exact", "Step", "TimedStep"]


class Step(NamedTuple):
    """One step of a rank's transfer op (``op["steps"]``, built by traffic_gen.program): send
    to or receive from rank ``peer`` ``size_bytes`` after this rank's steps ``deps`` (indices),
    ``tag`` naming it in records, over ``proto`` (``tcp``/``udp``) paced at ``rate_bps`` (UDP;
    None: unpaced). On the wire (JSON) it is the list of these fields in this order."""

    kind: str
    peer: int
    size_bytes: int
    deps: list[int]
    tag: str
    proto: str = "tcp"
    rate_bps: int | None = None


class TimedStep(NamedTuple):
    """A step of a timed op (traffic_gen.timed_plan): a :class:`Step`'s fields, then the
    message's arrival ``at_s`` (seconds from the op's start), ``gap_s`` and ``flow`` id."""

    kind: str
    peer: int
    size_bytes: int
    deps: list[int]
    tag: str
    proto: str
    rate_bps: int | None
    at_s: float
    gap_s: float | None
    flow: Any


class Channel:
    """A control connection: thread-safe :meth:`send`, blocking iteration over messages."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()
        self._rfile = sock.makefile("rb")

    def send(self, msg: dict[str, Any]) -> None:
        """Send one message (raises OSError if the peer is gone)."""
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        with self._lock:
            self.sock.sendall(data)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Messages until the peer closes the connection."""
        for line in self._rfile:
            yield json.loads(line)

    def close(self) -> None:
        """Close both directions. The socket is shut down first: a reader thread blocked in
        its ``recv`` (inside the buffered reader, holding its lock) then sees end of file and
        lets go, where closing the reader first waited for it forever (a run interrupted
        during its traffic hung in here, found by tests/fuzz/kill_harness.py)."""
        try:
            with contextlib.suppress(OSError):  # already shut or never connected
                self.sock.shutdown(socket.SHUT_RDWR)
            self._rfile.close()
        finally:
            self.sock.close()


def recv_exact(sock: socket.socket, n: int, what: str) -> bytes:
    """Exactly ``n`` bytes from ``sock`` (a fixed-size header). Raises OSError naming
    ``what`` if the peer closes first."""
    buf = b""
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise OSError(f"connection closed during {what}")
        buf += got
    return buf
