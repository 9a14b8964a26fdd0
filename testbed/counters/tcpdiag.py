"""TCP_INFO of a namespace's TCP sockets through sock_diag, cheaply.

A sock_diag *dump* walks the kernel's whole established-socket hash table, about 1-2 ms per
namespace on this host whatever the number of sockets (see :mod:`testbed.counters.readers`).
An *exact* request (full socket id with its cookie, no ``NLM_F_DUMP``) is one hash lookup. So
a :class:`TcpReader` dumps only every ``discover_s`` seconds to learn which sockets exist, and
in between asks for each known socket exactly, all requests of a namespace in one send.
A connection opened between two dumps is first seen at the next dump (at most ``discover_s``
late); one that closed answers ENOENT and is forgotten. :func:`pace_discovery` stretches
``discover_s`` so that dumps take about a tenth of the time, and staggers the namespaces'
dumps so that they do not all fall into one sample.

Request layout: ``struct inet_diag_req_v2`` (family, protocol, ext, pad, states, then
``struct inet_diag_sockid``: sport, dport, src[4], dst[4], if, cookie[2]; 56 bytes) from
include/uapi/linux/inet_diag.h; the answer's socket id sits at the same offset (4) of
``struct inet_diag_msg``.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from testbed.counters.readers import (
    _DIAG_STATES,
    INET_DIAG_INFO,
    SOCK_DIAG_BY_FAMILY,
    _diag_request,
    _tcp_row,
    dump_raw,
)

__all__ = ["TcpReader", "DEFAULT_DISCOVER_S", "pace_discovery"]

DEFAULT_DISCOVER_S = 0.1
DUMP_SHARE = 0.1  # dumps may take this share of the wall time
NLM_F_REQUEST, NLMSG_ERROR = 0x1, 2
_HDR = struct.Struct("=IHHII")
_REQ_HEAD = struct.Struct("=BBBxI")
_SOCKID = slice(4, 52)  # inet_diag_sockid inside inet_diag_msg / inet_diag_req_v2


class TcpReader:
    """TCP rows of one namespace over its sock_diag socket ``sock``; ``where`` names it."""

    def __init__(self, sock: socket.socket, where: str,
                 discover_s: float = DEFAULT_DISCOVER_S) -> None:
        self.sock, self.where, self.discover_s = sock, where, discover_s
        self.known: dict[bytes, int] = {}  # socket id -> address family
        self.next_dump = 0.0
        self.last_dump_s = 0.0  # wall time of the last dump (seconds)
        self.dump_request = _diag_request()

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
        rows, self.known = [], {}
        for m in dump_raw(self.sock, self.dump_request, SOCK_DIAG_BY_FAMILY, self.where):
            data = bytes(m)
            row = _tcp_row(data)
            if row is not None:
                self.known[data[16:][_SOCKID]] = data[16]
                rows.append(row)
        return rows

    def _exact(self) -> list[tuple[Any, ...]]:
        ids = list(self.known.items())
        if not ids:  # nothing to ask (and netlink refuses an empty send with ENODATA)
            return []
        head = [_REQ_HEAD.pack(fam, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), _DIAG_STATES)
                for _, fam in ids]
        body = [h + sid for h, (sid, _) in zip(head, ids, strict=True)]
        self.sock.send(b"".join(_HDR.pack(_HDR.size + len(b), SOCK_DIAG_BY_FAMILY,
                                          NLM_F_REQUEST, i + 1, 0) + b
                                for i, b in enumerate(body)))
        rows, pending = [], len(ids)
        while pending:
            buf = self.sock.recv(1 << 20)
            off = 0
            while off + _HDR.size <= len(buf):
                length, mtype, _, seq, _ = _HDR.unpack_from(buf, off)
                pending -= 1
                row = _tcp_row(buf[off:off + length]) if mtype == SOCK_DIAG_BY_FAMILY else None
                if row is None and 0 < seq <= len(ids):  # gone (ENOENT) or no TCP_INFO
                    self.known.pop(ids[seq - 1][0], None)
                elif row is not None:
                    rows.append(row)
                off += (length + 3) & ~3
        return rows


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
