"""Control messages: one JSON object per line over a Unix stream socket in the run directory
(control never crosses the emulated links)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["Channel", "recv_exact"]


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
        """Close both directions."""
        try:
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
