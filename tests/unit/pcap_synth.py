"""Build small synthetic captures with scapy for exact test cases (helpers, not tests).

A :class:`Conv` is one TCP connection written packet by packet with explicit times, sequence
numbers relative to each side's ISN, and flags; each side numbers its packets' IP IDs 1, 2, 3...
as Linux does on a connected socket (so that no two packets look like one captured twice);
:func:`write_pcap` writes it as classic pcap.
"""

from __future__ import annotations

import struct
import subprocess
from decimal import Decimal
from pathlib import Path

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import CookedLinuxV2, Ether
from scapy.packet import Raw
from scapy.utils import PcapWriter

T0 = Decimal("1764500000")  # an absolute start time (s since the epoch)
C_ISN, S_ISN = 1_000_000, 4_294_960_000  # the server's ISN wraps past 2^32 within the flow
MSS = 1000


class Conv:
    """Packets of one TCP connection client -> server, capture point at the client."""

    def __init__(self, client=("198.18.0.1", 40000), server=("198.18.0.2", 5201), link="eth"):
        self.client, self.server, self.link = client, server, link
        self.packets = []
        self._ids: dict[tuple, int] = {}

    def _pkt(self, src, dst, t, flags, seq, ack, size, win):
        self._ids[src] = ip_id = self._ids.get(src, 0) + 1
        ip = IP(src=src[0], dst=dst[0], id=ip_id) / TCP(sport=src[1], dport=dst[1], flags=flags,
                                              seq=seq & 0xFFFFFFFF, ack=ack & 0xFFFFFFFF,
                                              window=win)
        if size:
            ip = ip / Raw(b"x" * size)
        frame = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip
                 if self.link == "eth" else CookedLinuxV2(proto=0x0800) / ip
                 if self.link == "sll2" else ip)
        frame.time = T0 + Decimal(str(t))
        self.packets.append(frame)

    def c(self, t, flags, seq, ack, size=0, win=64000):
        """Client -> server; ``seq``/``ack`` relative to the client/server ISN."""
        self._pkt(self.client, self.server, t, flags, C_ISN + seq, S_ISN + ack, size, win)

    def s(self, t, flags, seq, ack, size=0, win=64000):
        """Server -> client; ``seq``/``ack`` relative to the server/client ISN."""
        self._pkt(self.server, self.client, t, flags, S_ISN + seq, C_ISN + ack, size, win)

    def handshake(self):
        self.c(0.0, "S", 0, 0)
        self.s(0.010, "SA", 0, 1)
        self.c(0.020, "A", 1, 1)

    def close(self, t, cseq):
        self.c(t, "FA", cseq, 1)
        self.s(t + 0.010, "FA", 1, cseq + 1)
        self.c(t + 0.020, "A", cseq + 1, 2)


def seg(n: int) -> int:
    """Relative sequence number of data segment ``n`` (after the SYN)."""
    return 1 + n * MSS


def write_pcap(path: Path, packets, nano=False, linktype=None) -> Path:
    """Write ``packets`` as classic pcap (nanosecond magic if ``nano``)."""
    with PcapWriter(str(path), nano=nano, linktype=linktype, sync=True) as w:
        for p in packets:
            w.write(p)
    return path


def fast_retransmission() -> Conv:
    """5 segments, segment 1 lost after the capture point; 3 dup ACKs; resent 0.6 ms later."""
    cv = Conv()
    cv.handshake()
    for n in range(5):
        cv.c(0.021 + n * 0.0001, "PA", seg(n), 1, MSS)
    cv.s(0.031, "A", 1, seg(1))
    for k in range(3):
        cv.s(0.0312 + k * 0.0001, "A", 1, seg(1))
    cv.c(0.032, "PA", seg(1), 1, MSS)
    cv.s(0.042, "A", 1, seg(5))
    cv.close(0.043, seg(5))
    return cv


def rto_retransmission() -> Conv:
    """2 segments, the second lost; no dup ACKs; resent after a 250 ms timeout."""
    cv = Conv()
    cv.handshake()
    cv.c(0.021, "PA", seg(0), 1, MSS)
    cv.c(0.0211, "PA", seg(1), 1, MSS)
    cv.s(0.031, "A", 1, seg(1))
    cv.c(0.271, "PA", seg(1), 1, MSS)
    cv.s(0.281, "A", 1, seg(2))
    cv.close(0.3, seg(2))
    return cv


def spurious_retransmission() -> Conv:
    """2 segments, both acked, then the second is sent again (a spurious timeout)."""
    cv = Conv()
    cv.handshake()
    cv.c(0.021, "PA", seg(0), 1, MSS)
    cv.c(0.0211, "PA", seg(1), 1, MSS)
    cv.s(0.031, "A", 1, seg(2))
    cv.c(0.25, "PA", seg(1), 1, MSS)
    cv.s(0.26, "A", 1, seg(2))
    cv.close(0.3, seg(2))
    return cv


def udp_packet(t: float, size: int):
    p = IP(src="198.18.0.3", dst="198.18.0.4") / UDP(sport=9000, dport=9001) / Raw(b"u" * size)
    p.time = T0 + Decimal(str(t))
    return p


def tshark_count(path: Path, flt: str) -> int:
    """Frames of ``path`` that match the display filter ``flt`` according to tshark."""
    out = subprocess.run(["tshark", "-r", str(path), "-Y", flt, "-T", "fields",
                          "-e", "frame.number"], capture_output=True, text=True, check=True)
    return len(out.stdout.split())


def tshark_times(path: Path, flt: str = "frame") -> list[Decimal]:
    """Absolute times (s since the epoch) of the frames matching ``flt``, as tshark reads them."""
    out = subprocess.run(["tshark", "-r", str(path), "-Y", flt, "-T", "fields",
                          "-e", "frame.time_epoch"],
                         capture_output=True, text=True, check=True)
    return [Decimal(x) for x in out.stdout.split()]


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def pcapng(path: Path, interfaces, packets) -> Path:
    """Write a pcapng file by hand: ``interfaces`` are ``(linktype, tsresol_byte or None)``,
    ``packets`` are ``(if_id or "spb", time Decimal, frame bytes)``; an unknown block (type
    0x0BAD) sits between the interfaces and the packets and must be skipped."""
    out = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    units = []
    for link, res in interfaces:
        opts = _option(9, bytes([res])) if res is not None else b""
        out += _block(1, struct.pack("<HHI", link, 0, 0) + opts + b"\0\0\0\0")
        res = 6 if res is None else res
        units.append(2 ** (res & 0x7F) if res & 0x80 else 10 ** res)
    out += _block(0x0BAD, b"unknown block, skip me")
    for if_id, t, data in packets:
        if if_id == "spb":
            out += _block(3, struct.pack("<I", len(data)) + data)
            continue
        ts = int(t * units[if_id])
        out += _block(6, struct.pack("<IIIII", if_id, ts >> 32, ts & 0xFFFFFFFF, len(data),
                                     len(data)) + data)
    path.write_bytes(out)
    return path


def lossy_bulk(segments: int = 1500, loss: float = 0.03, seed: int = 7) -> Conv:
    """A bulk transfer simulated event by event, captured at the sender; data segments are
    lost after the capture point with probability ``loss``. The sender keeps 16 segments in
    flight, fast-retransmits on the third duplicate ACK (once per recovery, RFC 6582 style)
    and retransmits the first unacked segment after a 200 ms timeout; the receiver ACKs every
    segment with its next expected byte. One-way delay 5 ms. Deterministic for a ``seed``."""
    import heapq
    import random
    rng, cv, owd, rto, cwnd = random.Random(seed), Conv(), 0.005, 0.2, 16
    cv.handshake()
    ev: list = []
    st = {"una": 0, "nxt": 0, "dup": 0, "recover": -1, "rcv": 0, "t": 0.021, "n": 0}
    got: set[int] = set()

    def push(t, kind, arg):
        st["n"] += 1
        heapq.heappush(ev, (t, st["n"], kind, arg))

    def send(t, i):
        cv.c(t, "PA", seg(i), 1, MSS)
        if rng.random() >= loss:
            push(t + owd, "arrive", i)
        push(t + rto, "rto", (i, st["una"]))

    def fill(t):
        while st["nxt"] < min(st["una"] + cwnd, segments):
            send(t, st["nxt"])
            st["nxt"] += 1
            t += 0.00001

    fill(st["t"])
    while ev and st["una"] < segments:
        t, _, kind, arg = heapq.heappop(ev)
        if kind == "arrive":
            got.add(arg)
            while st["rcv"] in got:
                st["rcv"] += 1
            push(t + owd, "ack", st["rcv"])
        elif kind == "ack":
            cv.s(t, "A", 1, seg(arg))
            if arg > st["una"]:
                st["una"], st["dup"] = arg, 0
                fill(t + 0.00001)
            elif arg == st["una"] < st["nxt"]:
                st["dup"] += 1
                if st["dup"] == 3 and st["una"] > st["recover"]:
                    st["recover"] = st["nxt"]
                    send(t + 0.00001, st["una"])
        elif kind == "rto" and st["una"] == arg[1] and st["una"] < segments:
            send(t, st["una"])
    cv.close(t + 0.001, seg(segments))
    cv.packets.sort(key=lambda p: p.time)
    return cv
