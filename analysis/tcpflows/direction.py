"""Per-direction TCP state and counters (one sender's view of a connection).

Sequence numbers are unwrapped to 64 bits against the last value seen in the same sequence
space (RFC 1982 serial arithmetic: a jump of less than 2^31 is forward), so comparisons are
plain integer comparisons and flows longer than 4 GiB keep working.
"""

from __future__ import annotations

from collections import deque

M32, HALF = 0xFFFFFFFF, 0x80000000
# RTT bookkeeping per direction holds at most this many unacked segments (Wireshark keeps
# TCP_MAX_UNACKED_SEGMENTS = 10000); beyond it, later segments give no sample until ACKs drain
# the queue. It bounds memory per flow (4 KiB per direction in the compiled path).
MAX_PENDING = 256
# Duplicate captures (one packet recorded twice: two interfaces of one path, a SPAN port, a
# bridge and its port): a segment identical to one of the last DUP_SEGMENTS segments of its
# direction, seen less than DUP_WINDOW_S from it (rule: :meth:`Direction.is_duplicate`).
DUP_SEGMENTS, DUP_WINDOW_S = 4, 0.001
# Capture gaps: sequence ranges this direction skipped (a segment starting beyond the highest
# sequence number seen: tshark's "previous segment not captured") stay open until a later
# segment covers them; at most MAX_HOLES per direction at once (a further gap is counted in
# ``capture_gaps`` but its bytes are not tracked). Bounds memory per flow.
MAX_HOLES = 16


class Direction:
    """State of one direction: Wireshark's ``tcp_analyze_seq_info`` plus aitb's counters.

    Times are float seconds relative to the capture's first frame; byte counts are TCP
    payload bytes from the IP length fields.
    """

    __slots__ = (
        # sequence space and Wireshark state
        "ref", "nxt", "nxt_t", "lastack", "lastack_t", "window", "dupacknum", "last_flags",
        "isn", "data_end", "max_ack", "data_acked_t", "pending", "karn_below", "recent",
        # counters
        "packets", "payload_bytes", "data_packets", "retransmissions", "fast_retransmissions",
        "rto_retransmissions", "spurious_retransmissions", "out_of_order", "dup_acks",
        "zero_windows", "sack_packets", "retransmitted_bytes", "syn", "fin_t", "rst",
        "first_data_t", "last_data_t", "rtt_n", "rtt_sum", "rtt_min", "rtt_max",
        "mss", "wscale", "sack_ok", "ts_ok", "duplicates",
        # ECN (RFC 3168): IP codepoints of every segment, ECE/CWR flags of non-SYN segments
        "ect0", "ect1", "ce", "ece", "cwr",
        # FIN re-sends (a retransmission of its own kind), capture gaps and their open holes
        "fin_retransmissions", "capture_gaps", "holes",
    )

    def __init__(self) -> None:
        self.ref = self.nxt = self.lastack = self.isn = self.data_end = self.max_ack = None
        self.nxt_t = self.lastack_t = 0.0
        self.window = self.dupacknum = self.last_flags = 0
        self.data_acked_t = self.fin_t = self.first_data_t = self.last_data_t = None
        self.pending: deque = deque()
        self.recent: deque = deque(maxlen=DUP_SEGMENTS)
        self.duplicates = 0
        self.karn_below = -1
        self.packets = self.payload_bytes = self.data_packets = self.retransmissions = 0
        self.fast_retransmissions = self.rto_retransmissions = self.spurious_retransmissions = 0
        self.out_of_order = self.dup_acks = self.zero_windows = self.sack_packets = 0
        self.retransmitted_bytes = self.rst = self.rtt_n = 0
        self.syn = False
        self.rtt_sum = 0.0
        self.rtt_min = self.rtt_max = None
        self.mss = self.wscale = None
        self.sack_ok = self.ts_ok = False
        self.ect0 = self.ect1 = self.ce = self.ece = self.cwr = 0
        self.fin_retransmissions = self.capture_gaps = 0
        self.holes: list[list[int]] = []

    def note_gap(self, start: int, end: int) -> None:
        """A segment began at ``end`` beyond the highest sequence number seen, ``start``: the
        range between was not captured (yet). Counted; tracked while MAX_HOLES allow."""
        self.capture_gaps += 1
        if len(self.holes) < MAX_HOLES:
            self.holes.append([start, end])

    def fill(self, seq: int, end: int) -> None:
        """Payload ``[seq, end)`` was seen below the highest sequence number: it closes what
        it covers of the open holes (a hole split in two keeps its first part when no room
        is left for the second)."""
        out = []
        for a, b in self.holes:
            if end <= a or seq >= b:
                out.append([a, b])
                continue
            if a < seq:
                out.append([a, seq])
            if end < b:
                out.append([end, b])
        self.holes = out[:MAX_HOLES]

    def gap_bytes(self) -> int:
        """Sequence space the other side acknowledged that this capture never saw from this
        direction: what of the open holes lies below the highest ACK, plus what that ACK
        covers beyond the highest sequence number seen (bytes, a FIN counts one)."""
        ack = self.max_ack
        if ack is None or self.nxt is None:
            return 0
        inside = sum(max(0, min(b, ack) - a) for a, b in self.holes)
        return inside + max(0, ack - self.nxt)

    def unwrap(self, raw: int) -> int:
        """Map a 32-bit number of this direction's sequence space to 64 bits (and remember it)."""
        ref = self.ref
        if ref is None:
            self.ref = raw
            return raw
        val = ref + ((raw - ref + HALF) & M32) - HALF
        if val > ref:
            self.ref = val
        return val

    def is_duplicate(self, ident: tuple, t: float) -> bool:
        """Whether a segment is a second copy of one already seen (and then count it).

        ``ident`` = (IPv4 ID, TCP checksum, raw seq, raw ack, payload bytes, flags, window).
        A copy matches one of the last DUP_SEGMENTS segments of this direction in every field
        and less than DUP_WINDOW_S (1 ms) away in time (either way: merged captures may put
        the copy first). The rule follows ``editcap -d`` (a frame equal to one of the 4 before
        it, by length and MD5) and its ``-w`` time window, on the fields that survive a router
        hop (TTL, IP checksum and MACs change; IP ID, TCP header and payload length do not).
        A real retransmission differs: Linux gives every packet of a connected socket the next
        IP ID (``ip_select_ident_segs``), and RTO >= 200 ms. IPv6 has no IP ID (``ident[0]`` is
        -1): only segments with payload are compared there, never pure ACKs, which repeat
        legitimately (duplicate ACKs) with the same header.
        """
        if ident[0] < 0 and not ident[4]:
            return False
        for old, old_t in self.recent:
            if old == ident and abs(t - old_t) < DUP_WINDOW_S:
                self.duplicates += 1
                return True
        self.recent.append((ident, t))
        return False

    def note_ack(self, ack: int, t: float) -> None:
        """An ACK from the other side covers this direction up to ``ack`` (64-bit) at ``t``.

        Takes an RTT sample when ``ack`` is exactly the end of a pending segment that was never
        retransmitted (Karn's rule, RFC 6298 section 3; Wireshark matches ``ack == nextseq``
        of an unacked segment the same way). Records when the last data byte was acked.
        """
        if self.max_ack is not None and ack <= self.max_ack:
            return
        self.max_ack = ack
        de = self.data_end
        if de is not None and self.data_acked_t is None and ack >= de:
            self.data_acked_t = t
        pend = self.pending
        while pend and pend[0][0] <= ack:
            end, sent_t = pend.popleft()
            if end == ack and end > self.karn_below:
                self._rtt(t - sent_t)

    def _rtt(self, rtt: float) -> None:
        self.rtt_n += 1
        self.rtt_sum += rtt
        if self.rtt_min is None or rtt < self.rtt_min:
            self.rtt_min = rtt
        if self.rtt_max is None or rtt > self.rtt_max:
            self.rtt_max = rtt

    def note_data(self, seq: int, end: int, t: float, retransmitted: bool) -> None:
        """Payload ``[seq, end)`` (64-bit) was sent at ``t``; keep it for RTT and FCT."""
        if self.first_data_t is None:
            self.first_data_t = t
        self.last_data_t = t
        if self.data_end is None or end > self.data_end:
            self.data_end = end
            self.data_acked_t = None
        if retransmitted:
            if end > self.karn_below:
                self.karn_below = end  # Karn: no samples for anything sent up to here again
        elif len(self.pending) < MAX_PENDING:
            self.pending.append((end, t))

    def unique_payload_bytes(self) -> int:
        """Distinct payload bytes sent: highest data end minus the first sequence number."""
        if self.data_end is None or self.isn is None:
            return 0
        return max(self.data_end - self.isn, 0)
