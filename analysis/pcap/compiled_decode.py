"""Compiled (numba) twin of :mod:`analysis.pcap.decode` for the fast path of classic pcap.

Same link types, the same rules and the same results as ``decode_frame`` (a test runs both on
every capture and compares). Every read is bounds-checked against the frame end, because
compiled code does not check indices. Addresses come out as two int64 halves (IPv4 as the
IPv4-mapped IPv6 address ::ffff:a.b.c.d) plus a flag for IPv6.
"""

from __future__ import annotations

from numba import njit
from numpy import int64 as i64

# negative "kinds": why a frame has no flow (DecodeStats field order)
NON_IP, UNKNOWN_LINK, FRAGMENT, OTHER_L4, TRUNCATED = -1, -2, -3, -4, -5
V4_MAPPED = 0x0000FFFF00000000


@njit(cache=True, inline="always")
def be16(b, i):
    """Big-endian 16-bit value at ``b[i]``."""
    return (i64(b[i]) << 8) | i64(b[i + 1])


@njit(cache=True, inline="always")
def be32(b, i):
    """Big-endian 32-bit value at ``b[i]``."""
    return (i64(b[i]) << 24) | (i64(b[i + 1]) << 16) | (i64(b[i + 2]) << 8) | i64(b[i + 3])


@njit(cache=True, inline="always")
def be64(b, i):
    """Big-endian 64 bits at ``b[i]`` as an int64 bit pattern."""
    return (be32(b, i) << 32) | be32(b, i + 4)


@njit(cache=True)
def link_l3(b, off, end, link):
    """Offset of the IP header and its ethertype, or (kind<0, 0) for frames without one."""
    if link == 1 or link == 113 or link == 276:
        hdr = 14 if link == 1 else 16 if link == 113 else 20
        if off + hdr > end:
            return TRUNCATED, 0
        etype = be16(b, off + (12 if link == 1 else 14 if link == 113 else 0))
        l3 = off + hdr
        while (etype == 0x8100 or etype == 0x88A8 or etype == 0x9100) and l3 + 4 <= end:
            etype = be16(b, l3 + 2)
            l3 += 4
        return l3, etype
    if link == 101 or link == 12 or link == 14 or link == 228 or link == 229:
        return off, 0x86DD if end > off and (i64(b[off]) >> 4) == 6 else 0x0800
    if link == 0:
        if end - off < 4:
            return off + 4, 0
        fam = i64(b[off]) | (i64(b[off + 1]) << 8) | (i64(b[off + 2]) << 16) | (
            i64(b[off + 3]) << 24)
        if fam > 0xFFFF:
            fam = be32(b, off)
        etype = 0x0800 if fam == 2 else 0x86DD if fam in (10, 24, 28, 30) else 0
        return off + 4, etype
    return UNKNOWN_LINK, 0


@njit(cache=True)
def decode(b, off, caplen, wirelen, link):
    """Decode one frame; returns ``(kind, v6, s_hi, s_lo, d_hi, d_lo, sport, dport, paylen,
    seq, ack, flags, win, hlen, l4, end, ip_id, tcp_checksum, capped, ecn)`` where kind is 6,
    17 or a negative reason (ip_id -1 for IPv6, checksum -1 if not captured, as in decode.py;
    capped 1 where an IPv4 total length beyond the wire length was capped; ecn the IP ECN
    field, as in decode.py)."""
    end = off + caplen
    l3, etype = link_l3(b, off, end, link)
    if l3 < 0:
        return _none(l3)
    wire_l3 = wirelen - (l3 - off)
    if etype == 0x0800:
        if l3 + 20 > end:
            return _none(TRUNCATED)
        if i64(b[l3]) >> 4 != 4:
            return _none(NON_IP)
        if be16(b, l3 + 6) & 0x3FFF:
            return _none(FRAGMENT)
        ihl = (i64(b[l3]) & 15) * 4
        total = be16(b, l3 + 2)
        capped = i64(total > wire_l3)  # as decode.py: beyond the wire (counted), or TSO (0)
        if total == 0 or capped:
            total = wire_l3
        src, dst = V4_MAPPED | be32(b, l3 + 12), V4_MAPPED | be32(b, l3 + 16)
        return _l4(b, i64(b[l3 + 9]), 0, 0, src, 0, dst, l3 + ihl, end, total - ihl,
                   be16(b, l3 + 4), capped, i64(b[l3 + 1]) & 3)
    if etype == 0x86DD:
        return _ipv6(b, l3, end, wire_l3)
    return _none(NON_IP)


@njit(cache=True)
def _ipv6(b, l3, end, wire_l3):
    if l3 + 40 > end:
        return _none(TRUNCATED)
    plen, nh, pos = be16(b, l3 + 4), i64(b[l3 + 6]), l3 + 40
    if plen == 0:
        plen = wire_l3 - 40
    while nh in (0, 43, 60, 135, 139, 140, 44, 51):
        if pos + 8 > end:
            return _none(TRUNCATED)
        if nh == 44 and be16(b, pos + 2) & 0xFFF9:
            return _none(FRAGMENT)
        size = 8 if nh == 44 else (i64(b[pos + 1]) + 2) * 4 if nh == 51 else (
            i64(b[pos + 1]) + 1) * 8
        nh, pos, plen = i64(b[pos]), pos + size, plen - size
    return _l4(b, nh, 1, be64(b, l3 + 8), be64(b, l3 + 16), be64(b, l3 + 24), be64(b, l3 + 32),
               pos, end, plen, -1, 0, (i64(b[l3 + 1]) >> 4) & 3)


@njit(cache=True)
def _l4(b, proto, v6, s_hi, s_lo, d_hi, d_lo, l4, end, l4len, ip_id, capped, ecn):
    if proto == 6:
        if l4 + 16 > end:
            return _none(TRUNCATED)
        offflags = be16(b, l4 + 12)
        hlen = (offflags >> 12) * 4
        return (6, v6, s_hi, s_lo, d_hi, d_lo, be16(b, l4), be16(b, l4 + 2),
                max(l4len - hlen, 0), be32(b, l4 + 4), be32(b, l4 + 8), offflags & 0x1FF,
                be16(b, l4 + 14), hlen, l4, end, ip_id, be16(b, l4 + 16) if l4 + 18 <= end else -1,
                capped, ecn)
    if proto == 17:
        if l4 + 4 > end:
            return _none(TRUNCATED)
        return (17, v6, s_hi, s_lo, d_hi, d_lo, be16(b, l4), be16(b, l4 + 2), max(l4len - 8, 0),
                0, 0, 0, 0, 0, l4, end, 0, 0, capped, i64(0))
    return _none(OTHER_L4)


@njit(cache=True, inline="always")
def _none(kind):
    return (kind, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
