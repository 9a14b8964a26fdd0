"""One TCP connection: both directions and the per-segment analysis.

The classification follows Wireshark's ``tcp_analyze_sequence_number()`` in
epan/dissectors/packet-tcp.c (wireshark/wireshark @ 0aebd579e3be), step by step:

* zero window probe: 1 payload byte at the next expected sequence number while the other
  side advertises window 0; it is not a retransmission and does not advance ``nextseq``.
* zero window: window field 0 on a segment without SYN/FIN/RST.
* keep-alive: 0 or 1 byte at ``nextseq - 1`` without SYN/FIN/RST (not a retransmission).
* duplicate ACK: no payload, window non-zero and equal to this direction's previous window,
  ``seq == nextseq``, ``ack == lastack``, no SYN/FIN/RST, and not a keep-alive ACK; the counter
  ``dupacknum`` resets whenever the ACK number changes.
* for a segment with payload or SYN/FIN whose sequence number is below ``nextseq`` (the highest
  sequence number seen in that direction, "not advanced"):
  - spurious retransmission: payload and ``seq + len <= lastack`` of the other side (all of it
    was already acknowledged); checked first, as in the source;
  - fast retransmission: the other side sent >= 2 duplicate ACKs, its last ACK equals ``seq``,
    and that ACK came less than 20 ms ago;
  - out of order: less than the first handshake RTT (3 ms without a handshake) after the
    segment that set ``nextseq``, and not ending exactly at ``nextseq``;
  - otherwise a (timeout, RTO) retransmission. Caveat: this is tshark's plain
    "retransmission" (neither fast nor spurious). For classic TCP it is timer-driven; Linux
    also resends on RACK reordering timers and tail loss probes (RFC 8985) without the two
    duplicate ACKs Wireshark looks for, and those land here too.
  - a FIN without payload sent again (below ``nextseq``) is a FIN retransmission, its own
    kind: tshark flags it a plain retransmission, which is not evidence of a data RTO.
  tshark's ``tcp.analysis.retransmission`` flag is set on all these retransmission kinds, so
  ``retransmissions`` = fast + spurious + RTO + FIN, and SYN re-sends count as in tshark.
* capture gaps: a segment with payload or SYN/FIN whose sequence number is beyond ``nextseq``
  (not a RST) skipped a
  range the capture did not see (tshark's "previous segment not captured": the packet was
  lost before the capture point, or the capture dropped it); ``capture_gaps`` counts them,
  and ``gap_bytes`` the part of those ranges (and of the range beyond the highest sequence
  number seen) that the other side acknowledged although no later segment of the capture
  covered it: bytes the receiver got that this capture never saw.
* ECN (RFC 3168): each segment's IP ECN codepoint (ECT(0), ECT(1), CE) and the ECE and CWR
  flags of segments without SYN are counted per direction.
* negative time gaps (a segment stamped before the ACK or the segment it is compared with:
  out-of-order timestamps, e.g. merged captures): packet-tcp.c computes both gaps into a
  ``guint64 t``, so a negative gap wraps to a huge value and passes neither the 20 ms
  fast-retransmission test nor the out-of-order test; here ``0 <= gap`` says the same. Such
  a segment is a plain (RTO) retransmission, and the file's out-of-order timestamps are
  counted in a warning (:class:`analysis.pcap.files.ClockChecks`).
* duplicate captures (the same packet recorded twice) are dropped before all of this and
  counted once (``duplicate_captures``; rule in :meth:`Direction.is_duplicate`).
"""

from __future__ import annotations

from analysis.tcpflows.direction import Direction

FIN, SYN, RST, ACK, ECE, CWR = 0x01, 0x02, 0x04, 0x10, 0x40, 0x80
FAST_RTX_WINDOW_S = 0.020  # packet-tcp.c: "within 20ms of the last duplicate ack"
OOO_DEFAULT_S = 0.003  # packet-tcp.c: ooo_thres without a handshake RTT


class Connection:
    """A TCP connection; ``a`` is the side that sent the first packet (the SYN if seen)."""

    __slots__ = ("key", "a", "b", "first_t", "last_t", "syn_t", "mru_syn_t", "first_rtt",
                 "closing", "index", "wire_bytes")

    def __init__(self, key: tuple, t: float, index: int) -> None:
        self.key = key  # (src, dst, sport, dport) of the first packet: "a" -> "b"
        self.a, self.b = Direction(), Direction()
        self.first_t = self.last_t = t
        self.syn_t = self.mru_syn_t = self.first_rtt = None
        self.closing = False
        self.index = index
        self.wire_bytes = 0

    def segment(self, f: Direction, r: Direction, t: float, seglen: int, seq_raw: int,
                ack_raw: int, flags: int, win: int, ecn: int = 0) -> None:
        """Account one segment sent by ``f`` (the other side is ``r``) at ``t`` seconds;
        ``ecn`` is its IP header's ECN field (0 not-ECT, 1 ECT(1), 2 ECT(0), 3 CE)."""
        self.last_t = t
        f.packets += 1
        if ecn == 2:
            f.ect0 += 1
        elif ecn == 1:
            f.ect1 += 1
        elif ecn == 3:
            f.ce += 1
        if not flags & SYN:  # on a SYN they negotiate ECN (RFC 3168 6.1.1), signal nothing
            if flags & ECE:
                f.ece += 1
            if flags & CWR:
                f.cwr += 1
        seq = f.unwrap(seq_raw)
        if flags & SYN:
            self._syn(f, seq, flags, t)
        elif f.isn is None:
            f.isn = seq
        if flags & ACK:
            ack = r.unwrap(ack_raw)
            if self.mru_syn_t is not None and self.first_rtt is None and not flags & SYN:
                self.first_rtt = t - self.mru_syn_t
        else:
            ack = None
        if flags & (FIN | RST):
            self.closing = True
            if flags & FIN and f.fin_t is None:
                f.fin_t = t
            if flags & RST:
                f.rst += 1
        zwp = self._ack_side(f, r, t, seglen, seq, ack, flags, win)
        if seglen or flags & (SYN | FIN):
            self._data_side(f, r, t, seglen, seq, flags, zwp)
        f.window, f.lastack, f.lastack_t = win, ack, t
        if ack is not None:
            r.note_ack(ack, t)

    def _syn(self, f: Direction, seq: int, flags: int, t: float) -> None:
        f.syn = True
        f.isn = seq + 1
        if not flags & ACK:
            self.mru_syn_t = t
            if self.syn_t is None:
                self.syn_t = t

    def _ack_side(self, f, r, t, seglen, seq, ack, flags, win) -> bool:
        """Zero-window probe, zero window, keep-alive, duplicate ACK; return "is a ZWP"."""
        nxt = f.nxt
        if seglen == 1 and seq == nxt and r.window == 0 and r.packets:
            f.last_flags = 2
            self._reset_dup(f, ack)
            return True
        plain = not flags & (SYN | FIN | RST)
        if win == 0 and plain:
            f.zero_windows += 1
        keepalive = seglen <= 1 and nxt is not None and seq == nxt - 1 and plain
        if (seglen == 0 and win and plain and win == f.window and seq == nxt
                and ack == f.lastack and ack is not None and r.last_flags != 1):
            f.dupacknum += 1
            f.dup_acks += 1
        else:
            self._reset_dup(f, ack)
        f.last_flags = 1 if keepalive else 0
        return False

    @staticmethod
    def _reset_dup(f: Direction, ack) -> None:
        if ack != f.lastack:
            f.dupacknum = 0

    def _data_side(self, f, r, t, seglen, seq, flags, zwp) -> None:
        """Classify a segment with payload or SYN/FIN; advance ``nextseq``."""
        synfin = 1 if flags & (SYN | FIN) else 0
        nxt, end = f.nxt, seq + seglen
        retx = False
        if not zwp and f.last_flags != 1:  # keep-alives are not retransmissions
            adv = nxt is not None and seq < nxt and not (seglen > 1 and nxt - 1 == seq)
            if seglen and r.lastack is not None and end <= r.lastack:
                f.spurious_retransmissions += 1
                retx = True
            elif (adv and r.dupacknum >= 2 and r.lastack == seq
                  and 0 <= t - r.lastack_t < FAST_RTX_WINDOW_S):
                f.fast_retransmissions += 1
                retx = True
            elif (adv and 0 <= t - f.nxt_t < (self.first_rtt or OOO_DEFAULT_S)
                  and nxt != end + synfin):
                f.out_of_order += 1
            elif adv and flags & FIN and not seglen:
                f.fin_retransmissions += 1  # a FIN sent again: tshark's plain retransmission
                retx = True
            elif adv:
                f.rto_retransmissions += 1
                retx = True
        if retx:
            f.retransmissions += 1
            f.retransmitted_bytes += seglen
        if nxt is not None and seq > nxt and not flags & RST:
            f.note_gap(nxt, seq)  # tshark's "previous segment not captured"
        elif seglen and nxt is not None and seq < nxt and f.holes:
            f.fill(seq, end)
        if seglen:
            f.data_packets += 1
            f.payload_bytes += seglen
            f.note_data(seq, end, t, retx)
        if (nxt is None or end + synfin > nxt) and not zwp:
            f.nxt, f.nxt_t = end + synfin, t


__all__ = ["Connection", "FIN", "SYN", "RST", "ACK", "ECE", "CWR"]
