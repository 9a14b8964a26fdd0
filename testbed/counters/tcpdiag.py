"""TCP_INFO of a namespace's TCP sockets through sock_diag, cheaply.

A sock_diag *dump* walks the kernel's whole established-socket hash table, about 1-2 ms per
namespace on this host whatever the number of sockets (see :mod:`testbed.counters.readers`).
An *exact* request (full socket id with its cookie, no ``NLM_F_DUMP``) is one hash lookup. So
a :class:`TcpReader` dumps only every ``discover_s`` seconds to learn which sockets exist, and
in between asks for each known socket exactly, all requests of a namespace in one send.
A connection opened between two dumps is first seen at the next dump (at most ``discover_s``
late); one that closed answers ENOENT (or ESTALE) and is forgotten. :func:`pace_discovery`
stretches ``discover_s`` so that dumps take about a tenth of the time, and staggers the
namespaces' dumps so that they do not all fall into one sample.

Requests are pyroute2 ``inet_diag_req`` messages (an exact one carries the socket id of the
socket's last answer, as pyroute2 decoded it); answers are decoded by
:class:`testbed.counters.msgs.DiagMsg`. The exact requests of the known sockets are encoded
once, at the dump that found them, and sent again as they are.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from models.errors import LabError
from testbed.counters.dumps import GONE, diag_request, dump
from testbed.counters.msgs import RowMarshal

__all__ = ["TcpReader", "DEFAULT_DISCOVER_S", "pace_discovery"]

DEFAULT_DISCOVER_S = 0.1
DUMP_SHARE = 0.1  # dumps may take this share of the wall time


class TcpReader:
    """TCP rows of one namespace over its sock_diag socket ``sock``, decoded by ``marshal``
    (readers.marshals()["tcp"]); ``where`` names it in errors."""

    def __init__(self, sock: socket.socket, marshal: RowMarshal, where: str,
                 discover_s: float = DEFAULT_DISCOVER_S) -> None:
        self.sock, self.marshal, self.where = sock, marshal, where
        self.discover_s = discover_s
        self.known: dict[int, bytes] = {}  # sequence number -> encoded exact request
        self.next_dump = 0.0
        self.last_dump_s = 0.0  # wall time of the last dump (seconds)
        self.dump_request = diag_request()

    def read(self) -> list[tuple[Any, ...]]:
        """One row per TCP socket with TCP_INFO (see readers.TCP_FIELDS)."""
        now = time.monotonic()
        if now >= self.next_dump:
            self.next_dump = now + self.discover_s
            rows = self._dump()
            self.last_dump_s = time.monotonic() - now
            return rows
        return self._exact()

    def _dump(self) -> list[tuple[Any, ...]]:
        found = [r for r in dump(self.sock, self.dump_request, self.marshal, self.where)
                 if r is not None]
        self.known = {seq: diag_request(family, sockid, seq)
                      for seq, (family, sockid, _) in enumerate(found, start=1)}
        return [row for _, _, row in found]

    def _exact(self) -> list[tuple[Any, ...]]:
        if not self.known:  # nothing to ask (and netlink refuses an empty send with ENODATA)
            return []
        self.sock.send(b"".join(self.known.values()))
        gone: list[int] = []
        while len(gone) + len(self.marshal.rows) < len(self.known):
            gone += [self._gone(err) for err in self.marshal.parse(self.sock.recv(1 << 20))]
        rows = []
        for seq, found in self.marshal.turn():
            if found is None:  # no TCP_INFO any more (e.g. time-wait)
                gone.append(seq)
            else:
                rows.append(found[2])
        for seq in gone:
            self.known.pop(seq, None)
        return rows

    def _gone(self, msg: Any) -> int:
        """The sequence number of an NLMSG_ERROR answer saying the socket is gone; raises
        LabError for any other error or answer."""
        err = msg["header"].get("error")
        if err is None or err.code not in GONE:
            raise LabError(f"{self.where}: unexpected sock_diag answer: "
                           f"{err or msg['header']}")
        return int(msg["header"]["sequence_number"])


def pace_discovery(readers: list[TcpReader]) -> float:
    """After every reader dumped once: set one discovery period for all, at least
    DEFAULT_DISCOVER_S and long enough that the dumps of all namespaces take DUMP_SHARE of it
    (their measured time / DUMP_SHARE), and spread their next dumps evenly over it. Returns the
    period in seconds (sampler.json ``tcp_discover_s``)."""
    if not readers:
        return 0.0
    period = max(DEFAULT_DISCOVER_S, sum(r.last_dump_s for r in readers) / DUMP_SHARE)
    now = time.monotonic()
    for i, r in enumerate(readers):
        r.discover_s = period
        r.next_dump = now + period * (i + 1) / len(readers)
    return period
