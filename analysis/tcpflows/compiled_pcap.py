"""Driver of the compiled path: chunks of a classic pcap file -> :mod:`kernel` -> flow objects.

The file is read in chunks of CHUNK_BYTES; state lives in arrays that grow with the number of
flows (never with packets). The result is the same objects the reference path builds
(:class:`Connection`, :class:`UdpFlow`), so both share :mod:`analysis.tcpflows.summary`.
"""

from __future__ import annotations

import struct

import numpy as np

from analysis.pcap import DecodeStats, PcapWarning
from analysis.pcap.files import CHUNK_BYTES, MAX_CAPLEN, Capture, ClassicReader, cut_record_message
from analysis.tcpflows import numba_scan as k
from analysis.tcpflows.connection import Connection
from analysis.tcpflows.direction import MAX_PENDING, Direction
from analysis.tcpflows.table import UdpFlow

_STAT_FIELDS = DecodeStats.__slots__  # the kernel's stats array, in this order


class _Arrays:
    """Flow state arrays of the kernel, grown by doubling."""

    def __init__(self, flows: int = 64) -> None:
        self.CI = np.zeros((flows, k.NCI), np.int64)
        self.CF = np.zeros((flows, k.NCF), np.float64)
        self.DI = np.zeros((2 * flows, k.NDI), np.int64)
        self.DF = np.zeros((2 * flows, k.NDF), np.float64)
        self.PE = np.zeros((2 * flows, MAX_PENDING), np.int64)
        self.PT = np.zeros((2 * flows, MAX_PENDING), np.float64)
        self.HK = np.zeros((4 * flows, 8), np.int64)  # flow table: 2 keys per flow, load <= 1/2
        self.HV = np.full(4 * flows, -1, np.int64)

    def grow(self) -> None:
        for name in ("CI", "CF", "DI", "DF", "PE", "PT"):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.zeros_like(a)]))
        hk, hv = np.zeros((2 * len(self.HV), 8), np.int64), np.full(2 * len(self.HV), -1, np.int64)
        k.rehash(self.HK, self.HV, hk, hv)
        self.HK, self.HV = hk, hv


def analyse_classic(cap: Capture, reader: ClassicReader) -> tuple[int, list, DecodeStats]:
    """Analyse a classic pcap with the kernel: ``(packets, flows, decode stats)``.

    Damage is appended to ``cap.warnings`` exactly as the reference reader words it.
    """
    hdr = np.array([reader.endian == ">", reader.nano, reader.linktype,
                    max(reader.snaplen, MAX_CAPLEN)], np.int64)
    st = np.zeros(k.NST, np.int64)  # flows, packets, have_t0, sec0, frac0, clock checks
    stats = np.zeros(len(_STAT_FIELDS), np.int64)
    arr = _Arrays()
    cap.linktypes.add(reader.linktype)
    _stream(cap, reader, hdr, st, stats, arr)
    if st[2]:
        cap.start_ns = int(st[3]) * 10**9 + int(st[4]) * (1 if reader.nano else 1000)
    clock_checks(cap, st)
    dstats = DecodeStats()
    for name, value in zip(_STAT_FIELDS, stats, strict=True):
        setattr(dstats, name, int(value))
    return int(st[1]), [_flow(arr, c) for c in range(int(st[0]))], dstats


def clock_checks(cap: Capture, st) -> None:
    """Copy the kernel's timestamp counts (``st[ST_*]``) into ``cap.clock``."""
    c = cap.clock
    c.bad_frac, c.bad_frac_first = int(st[k.ST_BAD_FRAC]), int(st[k.ST_BAD_FRAC_FIRST])
    c.backwards, c.backwards_first = int(st[k.ST_BACKWARDS]), int(st[k.ST_BACKWARDS_FIRST])


def _stream(cap, reader, hdr, st, stats, arr) -> None:
    """Read CHUNK_BYTES at a time into one reused buffer (no per-chunk allocation or
    concatenation); a record cut by the chunk end moves to the front of the buffer."""
    buf = bytearray(CHUNK_BYTES + 16 + int(hdr[3]))  # room for a chunk plus the largest record
    view, whole = memoryview(buf), np.frombuffer(buf, np.uint8)
    base, fill = 24, 0
    with open(reader.path, "rb") as fh:
        fh.seek(24)
        while n := fh.readinto(view[fill:fill + CHUNK_BYTES]):
            fill += n
            pos = _run(whole[:fill], hdr, st, stats, arr)
            if pos < 0:
                pos = -pos - 1
                caplen = int(k._u32(whole, pos + 8, hdr[0]))
                cap.warnings.append(PcapWarning(
                    base + pos, f"record header says {caplen} captured bytes, more than the "
                                f"maximum {int(hdr[3])}: file is corrupt from here"))
                return
            view[:fill - pos] = view[pos:fill]
            base, fill = base + pos, fill - pos
    if fill:
        unpack = struct.Struct(reader.endian + "IIII").unpack_from
        cap.warnings.append(PcapWarning(base, cut_record_message(bytes(view[:fill]), unpack)))


def _run(b, hdr, st, stats, arr) -> int:
    """Run the kernel over ``b``, growing the arrays as needed; return where the first
    partial record starts, or ``-(pos + 1)`` for a corrupt record at ``pos``."""
    pos = 0
    while True:
        status, pos = k.run(b, pos, hdr, st, arr.HK, arr.HV, arr.DI, arr.DF, arr.CI, arr.CF, arr.PE,
                            arr.PT, stats)
        if status == k.CORRUPT:
            return -pos - 1
        if status == k.NEED_DATA:
            return pos
        arr.grow()


def _addr(v6: int, hi: int, lo: int) -> bytes:
    if v6:
        return (hi & 2**64 - 1).to_bytes(8, "big") + (lo & 2**64 - 1).to_bytes(8, "big")
    return (lo & 0xFFFFFFFF).to_bytes(4, "big")


def _flow(arr: _Arrays, c: int) -> Connection | UdpFlow:
    ci, cf = arr.CI[c].tolist(), arr.CF[c].tolist()
    v6 = ci[k.C_V6]
    key = (_addr(v6, ci[k.C_SHI], ci[k.C_SLO]), _addr(v6, ci[k.C_DHI], ci[k.C_DLO]),
           ci[k.C_SPORT], ci[k.C_DPORT])
    if ci[k.C_PROTO] == 17:
        flow = UdpFlow(key, cf[k.C_FIRST_T], c)
        flow.last_t = cf[k.C_LAST_T]
        flow.packets = [int(arr.DI[2 * c + s, k.PACKETS]) for s in (0, 1)]
        flow.payload_bytes = [int(arr.DI[2 * c + s, k.PAYLOAD]) for s in (0, 1)]
        return flow
    conn = Connection(key, cf[k.C_FIRST_T], c)
    conn.last_t, conn.closing, conn.wire_bytes = cf[k.C_LAST_T], bool(ci[k.C_CLOSING]), ci[
        k.C_WIRE]
    conn.syn_t = cf[k.C_SYN_T] if ci[k.C_HAS_SYN_T] else None
    conn.mru_syn_t = cf[k.C_MRU_T] if ci[k.C_HAS_MRU] else None
    conn.first_rtt = cf[k.C_FIRST_RTT] if ci[k.C_HAS_FIRST_RTT] else None
    _direction(conn.a, arr.DI[2 * c].tolist(), arr.DF[2 * c].tolist())
    _direction(conn.b, arr.DI[2 * c + 1].tolist(), arr.DF[2 * c + 1].tolist())
    return conn


_COUNTERS = {"packets": k.PACKETS, "payload_bytes": k.PAYLOAD, "data_packets": k.DATA_PKTS,
             "retransmissions": k.RETX, "fast_retransmissions": k.FAST,
             "rto_retransmissions": k.RTO, "spurious_retransmissions": k.SPUR,
             "out_of_order": k.OOO, "dup_acks": k.DUPACKS, "zero_windows": k.ZEROWIN,
             "sack_packets": k.SACK_PKTS, "retransmitted_bytes": k.RETX_BYTES, "rst": k.D_RST,
             "rtt_n": k.RTT_N, "duplicates": k.DUPS, "ect0": k.ECT0, "ect1": k.ECT1,
             "ce": k.CE, "ece": k.ECE_N, "cwr": k.CWR_N, "fin_retransmissions": k.FIN_RETX,
             "capture_gaps": k.GAPS}


def _direction(d: Direction, di: list[int], df: list[float]) -> None:
    for name, col in _COUNTERS.items():
        setattr(d, name, di[col])
    d.syn, d.sack_ok, d.ts_ok = bool(di[k.D_SYN]), bool(di[k.SACK_OK]), bool(di[k.TS_OK])
    d.mss = di[k.MSS] if di[k.MSS] >= 0 else None
    d.wscale = di[k.WSCALE] if di[k.WSCALE] >= 0 else None
    d.isn = di[k.ISN] if di[k.HAS_ISN] else None
    d.data_end = di[k.DATA_END] if di[k.HAS_DATA_END] else None
    d.data_acked_t = df[k.DATA_ACKED_T] if di[k.HAS_DATA_ACKED_T] else None
    d.fin_t = df[k.FIN_T] if di[k.HAS_FIN_T] else None
    d.first_data_t = df[k.FIRST_DATA_T] if di[k.HAS_FIRST_DATA_T] else None
    d.last_data_t = df[k.LAST_DATA_T] if di[k.HAS_FIRST_DATA_T] else None
    d.nxt = di[k.NXT] if di[k.HAS_NXT] else None
    d.max_ack = di[k.MAX_ACK] if di[k.HAS_MAX_ACK] else None
    d.holes = [[di[k.HOLES + 2 * i], di[k.HOLES + 2 * i + 1]] for i in range(di[k.HOLE_N])]
    d.rtt_sum = df[k.RTT_SUM]
    d.rtt_min = df[k.RTT_MIN] if di[k.HAS_RTT] else None
    d.rtt_max = df[k.RTT_MAX] if di[k.HAS_RTT] else None
