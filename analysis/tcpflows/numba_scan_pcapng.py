"""Compiled walk over pcapng blocks: packet blocks are analysed here, the rest go to Python.

Enhanced, obsolete and simple packet blocks are decoded and accounted by
:func:`analysis.tcpflows.numba_scan.packet`; section headers and interface descriptions (rare)
return to the driver (:mod:`analysis.tcpflows.compiled_pcapng`), which parses them exactly as
:mod:`analysis.pcap.pcapng` does and resumes. Interface clocks are converted to ns without
overflow for resolutions 10^-k (k <= 18) and 2^-n (n <= 33); anything else, and timestamps that
do not fit, returns UNSUPPORTED and the driver uses the reference path for the file.
"""

from __future__ import annotations

from numba import njit

from analysis.tcpflows.numba_scan import CORRUPT, NEED_DATA, NEED_ROOM, _u32, backwards, packet

PYTHON, SHORT, BAD_PACKET, UNSUPPORTED, BAD_TRAILER = 3, 4, 5, 6, 7
SHB, IDB, EPB, SPB, OPB = 0x0A0D0D0A, 1, 6, 3, 2
MAX_BLOCK = 1 << 26
MUL, DIV, SHIFT = 0, 1, 2  # how an interface's units become ns
I64_MAX = 9223372036854775807


@njit(cache=True)
def run_ng(b, pos, ng, IF, st, HK, HV, DI, DF, CI, CF, PE, PT, stats):
    """Walk the whole blocks of ``b`` from ``pos``. ``ng`` = (big_endian, interfaces, have_t0,
    t0_ns, last_ns); ``IF[i]`` = (linktype, snaplen, mode, value, offset_ns). Returns
    ``(status, pos)`` where pos is the block the status is about."""
    big = ng[0]
    end = b.shape[0]
    while pos + 12 <= end:
        btype = _u32(b, pos, 0)
        if btype == SHB:
            return PYTHON, pos
        blen = _u32(b, pos + 4, big)
        if blen < 12 or blen % 4 or blen > MAX_BLOCK:
            return CORRUPT, pos
        if pos + blen > end:
            return NEED_DATA, pos
        if _u32(b, pos + blen - 4, big) != blen:
            return BAD_TRAILER, pos
        if btype == IDB:
            return PYTHON, pos
        if btype == EPB or btype == OPB or btype == SPB:
            if blen < (16 if btype == SPB else 32):
                return SHORT, pos
            if st[0] + 1 > CI.shape[0]:
                return NEED_ROOM, pos
            status = _packet_block(b, pos, blen, btype, big, ng, IF, st, HK, HV, DI, DF, CI, CF,
                                   PE, PT, stats)
            if status != NEED_DATA:
                return status, pos
        pos += blen
    return NEED_DATA, pos


@njit(cache=True, inline="always")
def _packet_block(b, pos, blen, btype, big, ng, IF, st, HK, HV, DI, DF, CI, CF, PE, PT, stats):
    if btype == SPB:
        if_id, have_ts, hi, lo, data = 0, False, 0, 0, pos + 12
        wirelen = _u32(b, pos + 8, big)
        caplen = min(wirelen, blen - 16)
        if ng[1] > 0 and IF[0, 1]:
            caplen = min(caplen, IF[0, 1])
    else:
        if btype == EPB:
            if_id = _u32(b, pos + 8, big)
        else:
            if_id = (_u32(b, pos + 8, big) >> 16) if big else (_u32(b, pos + 8, big) & 0xFFFF)
        have_ts, hi, lo = True, _u32(b, pos + 12, big), _u32(b, pos + 16, big)
        caplen, wirelen, data = _u32(b, pos + 20, big), _u32(b, pos + 24, big), pos + 28
    if if_id >= ng[1] or data + caplen > pos + blen - 4:
        return BAD_PACKET
    if have_ts:
        ns = _to_ns(hi, lo, IF[if_id, 2], IF[if_id, 3], IF[if_id, 4])
        if ns == I64_MAX:
            return UNSUPPORTED
    else:
        ns = ng[4]
    if ng[2] == 0:
        ng[2], ng[3] = 1, ns
    else:
        backwards(st, ns < ng[4])
    ng[4] = ns
    t = (ns - ng[3]) * 1e-9
    packet(b, data, caplen, wirelen, IF[if_id, 0], t, st, HK, HV, DI, DF, CI, CF, PE, PT, stats)
    return NEED_DATA


@njit(cache=True, inline="always")
def _to_ns(hi, lo, mode, value, offset_ns):
    """``floor(ts * 1e9 / units) + offset`` exactly, or I64_MAX if it cannot be done in
    64 bits (the driver then falls back to the reference path)."""
    if hi >= 0x80000000:
        return I64_MAX
    ts = (hi << 32) | lo
    if mode == MUL:
        if ts > I64_MAX // value:
            return I64_MAX
        ns = ts * value
    elif mode == DIV:
        ns = ts // value
    else:
        whole = ts >> value
        if whole > I64_MAX // 1000000000:
            return I64_MAX
        ns = whole * 1000000000 + (((ts & ((1 << value) - 1)) * 1000000000) >> value)
    if ns > I64_MAX - 10**18 or offset_ns > 10**18 or offset_ns < -(10**18):
        return I64_MAX
    return ns + offset_ns
