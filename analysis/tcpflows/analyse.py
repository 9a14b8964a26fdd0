"""Stream a capture file through the decoder into a flow table."""

from __future__ import annotations

import ipaddress
import os
import struct
from dataclasses import dataclass, field

from analysis.pcap import DecodeStats, PcapWarning, decode_frame, open_capture
from analysis.tcpflows.summary import tcp_record, udp_record
from analysis.tcpflows.table import FlowTable, UdpFlow

MAX_DECODE_WARNINGS = 20
# below this size the pure-Python path finishes before the compiled one has loaded (~0.3 s)
COMPILED_MIN_BYTES = 4 << 20
ENGINES = ("auto", "reference", "compiled")


@dataclass(slots=True)
class CaptureAnalysis:
    """What one capture file holds: frame count, flows (JSON-ready dicts), damage."""

    path: str
    format: str
    packets: int
    linktypes: list[int]
    start_ns: int | None
    decode: DecodeStats
    flows: list[dict[str, object]] = field(default_factory=list)
    warnings: list[PcapWarning] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (``packets``, ``flows``, ``warnings`` and file details)."""
        return {"file": self.path, "format": self.format, "packets": self.packets,
                "linktypes": self.linktypes, "start_ns": self.start_ns,
                "not_analysed": self.decode.to_dict(), "flows": self.flows,
                "warnings": [w.to_dict() for w in self.warnings]}


def analyse_capture(path: str | os.PathLike[str], engine: str = "auto") -> CaptureAnalysis:
    """Read ``path`` (pcap or pcapng) and analyse every TCP connection and UDP flow in it.

    ``engine``: ``"reference"`` is the pure-Python path; ``"compiled"`` the numba kernel
    (a pcapng file whose interface clock it cannot convert exactly falls back to the
    reference); ``"auto"`` picks the kernel for files of at least COMPILED_MIN_BYTES. Both
    give identical results (tested).
    Streaming: memory grows with the number of flows, not packets. A truncated or corrupt
    file is analysed up to the damage, which is reported in ``warnings``; so are, as whole-file
    warnings (offset None), invalid and out-of-order timestamps (:class:`ClockChecks`) and
    duplicate captures (:meth:`Direction.is_duplicate`, in a flow at least half of whose
    frames came twice: :func:`undoubled`), which are counted once. A capture with identical
    frames in other flows is read a second time, by the reference path. Raises
    :class:`models.errors.SpecError` if the file is missing, unreadable or not a capture;
    ValueError for an unknown engine.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    cap = open_capture(path)
    found = None
    if engine == "compiled" or (engine == "auto"
                                and os.path.getsize(cap.path) >= COMPILED_MIN_BYTES):
        packets, found, stats = _compiled(cap)
        if found is None:  # a clock the kernel cannot convert exactly: start over
            cap = open_capture(path)
    if found is None:
        table, stats = FlowTable(), DecodeStats()
        packets = _scan(cap, table, stats)
        found = table.flows()
    flows = [udp_record(f) if isinstance(f, UdpFlow) else tcp_record(f) for f in found]
    if keep := undoubled(flows):  # copies that were packets after all: read them again
        cap, table, stats = open_capture(path), FlowTable(keep), DecodeStats()
        packets = _scan(cap, table, stats)
        flows = [udp_record(f) if isinstance(f, UdpFlow) else tcp_record(f)
                 for f in table.flows()]
    warnings = cap.warnings + cap.clock.warnings(cap.format == "pcap-ns")
    dups = sum(f["duplicate_captures"] for f in flows)
    if dups:
        warnings.append(PcapWarning(None, duplicates_message(dups)))
    if stats.ip_length_capped:
        warnings.append(PcapWarning(None, (
            f"{stats.ip_length_capped} IPv4 frames claim a total length beyond their wire "
            f"length (a corrupt or crafted header); their payload is capped at the wire "
            f"length")))
    return CaptureAnalysis(cap.path, cap.format, packets, sorted(cap.linktypes), cap.start_ns,
                           stats, flows, warnings)


def undoubled(flows: list[dict[str, object]]) -> frozenset[tuple]:
    """Keys ((src, dst, sport, dport) as raw addresses) of the TCP connections whose identical
    frames are not a duplicated capture: fewer than half of their frames came with a copy.
    A capture of one packet twice (two interfaces of one path, a SPAN port, a bridge and its
    port) doubles every frame of a flow; a few identical frames in a flow are packets a stack
    sent twice, e.g. RSTs, which Linux sends with IP ID 0 (``ip_send_unicast_reply``), so
    two RSTs to two late segments look alike. Those flows are analysed again with their
    copies as packets (:class:`analysis.tcpflows.table.FlowTable` ``keep_copies``)."""
    return frozenset(
        (ipaddress.ip_address(f["src"]).packed, ipaddress.ip_address(f["dst"]).packed,
         f["sport"], f["dport"])
        for f in flows if f["proto"] == "tcp" and f["duplicate_captures"]
        and 2 * int(f["duplicate_captures"]) < int(f["packets"]))


def duplicates_message(n: int) -> str:
    """Warning text for ``n`` duplicate captures (rule: Direction.is_duplicate)."""
    return (f"{n} frames are second copies of a TCP segment already seen (same connection, "
            f"direction, IP ID, sequence, ACK, payload length, flags, window and checksum, "
            f"within 1 ms: one packet captured twice, e.g. on two interfaces of one path, a "
            f"SPAN port or a bridge and its port); each counted once, not as a "
            f"retransmission (flows' duplicate_captures)")


def _compiled(cap):
    """The numba path: ``(packets, flows, stats)``, or ``(0, None, None)`` if unsupported."""
    if cap.format == "pcapng":
        from analysis.tcpflows.compiled_pcapng import Unsupported, analyse_pcapng
        try:
            return analyse_pcapng(cap)
        except Unsupported:
            return 0, None, None
    from analysis.tcpflows.compiled_pcap import analyse_classic
    return analyse_classic(cap, cap.reader)


def _scan(cap, table: FlowTable, stats: DecodeStats) -> int:
    """The hot loop: one pass over the frames; returns how many frames were read."""
    n = 0
    add_tcp, add_udp = table.add_tcp, table.add_udp
    for t, link, buf, off, caplen, wirelen in cap.frames():
        n += 1
        try:
            d = decode_frame(link, buf, off, caplen, wirelen, stats)
            if d is None:
                continue
            if d[0] == 6:
                add_tcp(t, d, buf, wirelen)
            else:
                add_udp(t, d)
        except (struct.error, IndexError) as exc:  # malformed inside a frame: skip the frame
            stats.truncated_headers += 1
            if sum(w.what.startswith("frame ") for w in cap.warnings) < MAX_DECODE_WARNINGS:
                cap.warnings.append(PcapWarning(off, f"frame {n} could not be decoded: {exc}"))
    return n
