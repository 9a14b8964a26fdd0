"""The flow table: decoded frames -> TCP connections and UDP flows, streaming.

A TCP connection is a bidirectional 5-tuple; the table keys both directions to it so that one
dictionary lookup gives connection and direction. Port reuse: a SYN without ACK on a 5-tuple
whose connection has seen a FIN or RST, with a sequence number other than that connection's
first SYN, closes the old connection and opens a new one (Wireshark does the same: "TCP port
numbers reused"). Memory holds one entry per flow, never per packet (RTT bookkeeping per flow
is bounded by MAX_PENDING segments).
"""

from __future__ import annotations

import struct

from analysis.tcpflows.connection import ACK, SYN, Connection
from analysis.tcpflows.direction import Direction

_OPT_MSS, _OPT_WS, _OPT_SACK_OK, _OPT_SACK, _OPT_TS = 2, 3, 4, 5, 8


class UdpFlow:
    """A bidirectional UDP flow: packets and payload bytes per direction, first/last time."""

    __slots__ = ("key", "index", "first_t", "last_t", "packets", "payload_bytes")

    def __init__(self, key: tuple, t: float, index: int) -> None:
        self.key, self.index, self.first_t, self.last_t = key, index, t, t
        self.packets = [0, 0]
        self.payload_bytes = [0, 0]


class FlowTable:
    """Accumulates frames; :meth:`flows` returns every TCP connection and UDP flow seen."""

    __slots__ = ("_tcp", "_udp", "_done", "_count", "_keep")

    def __init__(self, keep_copies: frozenset[tuple] = frozenset()) -> None:
        # connection keys ((src, dst, sport, dport) of their first packet) whose identical
        # frames are packets of their own, not duplicate captures (analyse.undoubled)
        self._keep = keep_copies
        self._tcp: dict[tuple, tuple[Connection, bool]] = {}
        self._udp: dict[tuple, tuple[UdpFlow, int]] = {}
        self._done: list[Connection] = []
        self._count = 0

    def add_tcp(self, t: float, d: tuple, buf: bytes, wirelen: int) -> None:
        """Account a decoded TCP frame ``d`` (see :mod:`analysis.pcap.decode`) at ``t`` s."""
        (_, src, dst, sport, dport, seglen, seq, ack, flags, win, hlen, l4, end, ip_id, csum,
         ecn) = d
        key = (src, dst, sport, dport)
        hit = self._tcp.get(key)
        if hit is None or (flags & (SYN | ACK) == SYN and hit[0].closing
                           and self._reused(hit[0], hit[1], seq)):
            hit = self._open(key, t)
        conn, is_a = hit
        f, r = (conn.a, conn.b) if is_a else (conn.b, conn.a)
        if conn.key not in self._keep and f.is_duplicate(
                (ip_id, csum, seq, ack, seglen, flags, win), t):
            return  # a second copy of a captured packet: counted once (Direction.is_duplicate)
        # options: always on a SYN; otherwise skip Linux's timestamp-only layout
        # (NOP NOP TS, hlen 32) so the common case costs one comparison
        if hlen > 20 and (flags & SYN or hlen != 32 or (l4 + 22 < end and buf[l4 + 22] != 8)):
            _options(f, buf, l4 + 20, min(l4 + hlen, end), flags & SYN)
        conn.wire_bytes += wirelen
        conn.segment(f, r, t, seglen, seq, ack, flags, win, ecn)

    def _reused(self, conn: Connection, is_a: bool, seq: int) -> bool:
        f = conn.a if is_a else conn.b
        return not f.syn or f.isn is None or ((f.isn - 1 - seq) & 0xFFFFFFFF) != 0

    def _open(self, key: tuple, t: float) -> tuple[Connection, bool]:
        old = self._tcp.get(key)
        if old is not None:
            self._done.append(old[0])
        src, dst, sport, dport = key
        conn = Connection(key, t, self._count)
        self._count += 1
        self._tcp[key] = (conn, True)
        self._tcp[(dst, src, dport, sport)] = (conn, False)
        return conn, True

    def add_udp(self, t: float, d: tuple) -> None:
        """Account a decoded UDP frame ``d`` at ``t`` seconds."""
        _, src, dst, sport, dport, paylen = d
        key = (src, dst, sport, dport)
        hit = self._udp.get(key)
        if hit is None:
            flow = UdpFlow(key, t, self._count)
            self._count += 1
            hit = self._udp[key] = (flow, 0)
            self._udp[(dst, src, dport, sport)] = (flow, 1)
        flow, side = hit
        flow.last_t = t
        flow.packets[side] += 1
        flow.payload_bytes[side] += paylen

    def flows(self) -> list[Connection | UdpFlow]:
        """Every connection and UDP flow, in order of their first packet."""
        seen: dict[int, Connection | UdpFlow] = {c.index: c for c in self._done}
        for flow, _ in self._tcp.values():
            seen[flow.index] = flow
        for flow, _ in self._udp.values():
            seen[flow.index] = flow
        return [seen[i] for i in sorted(seen)]


def _options(f: Direction, buf: bytes, pos: int, end: int, syn: int) -> None:
    """Read TCP options (RFC 9293 3.1, RFC 7323, RFC 2018): on a SYN, MSS, window scale,
    SACK-permitted and timestamps; on other segments, count those carrying SACK blocks."""
    while pos < end:
        kind = buf[pos]
        if kind == 0:
            return
        if kind == 1:
            pos += 1
            continue
        if pos + 1 >= end or buf[pos + 1] < 2:
            return
        size = buf[pos + 1]
        if kind == _OPT_SACK:
            f.sack_packets += 1
        elif syn and kind == _OPT_MSS and size == 4 and pos + 4 <= end:
            f.mss = struct.unpack_from("!H", buf, pos + 2)[0]
        elif syn and kind == _OPT_WS and size == 3 and pos + 3 <= end:
            f.wscale = buf[pos + 2]
        elif syn and kind == _OPT_SACK_OK:
            f.sack_ok = True
        elif syn and kind == _OPT_TS:
            f.ts_ok = True
        pos += size
