"""Decode one frame to the fields flow analysis needs: link layer -> IPv4/IPv6 -> TCP/UDP.

Link types (pcap-linktype(7), tcpdump.org/linktypes.html): 1 Ethernet, 101/12/14 raw IP (12
and 14 are the DLT_RAW values libpcap maps to 101), 228 raw IPv4, 229 raw IPv6, 113 Linux
cooked v1 (16-byte header, protocol at 14), 276 Linux cooked v2 (20-byte header, protocol at
0), 0 BSD loopback (4-byte address family in host byte order). 802.1Q/802.1ad tags (0x8100,
0x88a8, 0x9100), stacked, are skipped. IPv4 options are skipped by IHL; IPv6 extension headers
are walked (RFC 8200 section 4). Payload sizes come from the IP length fields, not the
captured length, so headers-only snap lengths and offload (GSO/TSO) super-segments give the
true payload; an IPv4 total length of 0 (TSO captures) falls back to the wire length, and one
larger than the wire length (a corrupt or crafted header) is capped at it, and counted in
``DecodeStats.ip_length_capped`` for a warning: no payload that was never on the wire.

A decoded TCP frame is the tuple ``(6, src, dst, sport, dport, payload_bytes, seq, ack,
flags, window, tcp_header_bytes, tcp_offset, frame_end, ip_id, tcp_checksum, ecn)`` (``ip_id``
-1 for IPv6, which has none; ``tcp_checksum`` -1 if not captured: both only identify duplicate
captures; ``ecn`` the IP header's ECN field, RFC 3168 section 5: 0 not-ECT, 1 ECT(1), 2
ECT(0), 3 CE, the low 2 bits of IPv4's ToS byte or IPv6's traffic class); a UDP frame
``(17, src, dst, sport, dport, payload_bytes)``; addresses are ``bytes`` (4 or 16).
Anything else returns None and is counted in :class:`DecodeStats`.
"""

from __future__ import annotations

import struct

PROTO_TCP, PROTO_UDP = 6, 17
_ETH_IP4, _ETH_IP6 = 0x0800, 0x86DD
_VLAN = frozenset((0x8100, 0x88A8, 0x9100))
_RAW = frozenset((101, 12, 14, 228, 229))
_IP6_EXT = frozenset((0, 43, 60, 135, 139, 140))  # length in 8-octet units after the first 8
_AF_INET6 = frozenset((10, 24, 28, 30))  # Linux, NetBSD/OpenBSD, FreeBSD, Darwin
_H = struct.Struct("!H")
_IP4 = struct.Struct("!BxHHHxB")  # ver_ihl, total length, id, frag, proto
_IP6 = struct.Struct("!HB")  # payload length, next header
_PORTS = struct.Struct("!HH")
_TCP = struct.Struct("!HHIIHH")  # ports, seq, ack, offset+flags, window


NOT_ANALYSED = ("non_ip", "unknown_link", "ip_fragments", "other_l4", "truncated_headers")


class DecodeStats:
    """Counts of frames that did not decode to a TCP/UDP flow, by reason (``NOT_ANALYSED``),
    and of IPv4 frames analysed with their total length capped at the wire length
    (``ip_length_capped``)."""

    __slots__ = (*NOT_ANALYSED, "ip_length_capped")

    def __init__(self) -> None:
        self.non_ip = self.unknown_link = self.ip_fragments = 0
        self.other_l4 = self.truncated_headers = self.ip_length_capped = 0

    def to_dict(self) -> dict[str, int]:
        """JSON-ready counts of the frames not analysed, by reason."""
        return {k: getattr(self, k) for k in NOT_ANALYSED}


def decode_frame(link: int, buf: bytes, off: int, caplen: int, wirelen: int,
                 stats: DecodeStats) -> tuple | None:
    """Decode the frame ``buf[off:off+caplen]`` (``wirelen`` bytes on the wire).

    Returns the TCP or UDP tuple described in the module docstring, or None (counted in
    ``stats``). Never raises on malformed bytes.
    """
    end = off + caplen
    if link == 1:
        if caplen < 14:
            stats.truncated_headers += 1
            return None
        etype = _H.unpack_from(buf, off + 12)[0]
        l3 = off + 14
        while etype in _VLAN and l3 + 4 <= end:
            etype = _H.unpack_from(buf, l3 + 2)[0]
            l3 += 4
    elif link in _RAW:
        l3 = off
        etype = _ETH_IP6 if caplen and buf[off] >> 4 == 6 else _ETH_IP4
    elif link == 113 or link == 276:
        l3 = off + (16 if link == 113 else 20)
        if l3 > end:
            stats.truncated_headers += 1
            return None
        etype = _H.unpack_from(buf, off + (14 if link == 113 else 0))[0]
        while etype in _VLAN and l3 + 4 <= end:
            etype = _H.unpack_from(buf, l3 + 2)[0]
            l3 += 4
    elif link == 0:
        etype, l3 = _null_family(buf, off, caplen), off + 4
    else:
        stats.unknown_link += 1
        return None
    if etype == _ETH_IP4:
        return _ipv4(buf, l3, end, wirelen - (l3 - off), stats)
    if etype == _ETH_IP6:
        return _ipv6(buf, l3, end, wirelen - (l3 - off), stats)
    stats.non_ip += 1
    return None


def _null_family(buf: bytes, off: int, caplen: int) -> int:
    if caplen < 4:
        return 0
    fam = struct.unpack_from("<I", buf, off)[0]
    if fam > 0xFFFF:
        fam = struct.unpack_from(">I", buf, off)[0]
    return _ETH_IP4 if fam == 2 else _ETH_IP6 if fam in _AF_INET6 else 0


def _ipv4(buf: bytes, l3: int, end: int, wire_l3: int, stats: DecodeStats) -> tuple | None:
    if l3 + 20 > end:
        stats.truncated_headers += 1
        return None
    vihl, total, ip_id, frag, proto = _IP4.unpack_from(buf, l3)
    if vihl >> 4 != 4:
        stats.non_ip += 1
        return None
    if frag & 0x3FFF:  # MF flag or a fragment offset: counted, not reassembled
        stats.ip_fragments += 1
        return None
    ihl = (vihl & 15) * 4
    if total > wire_l3:  # more than was on the wire: a corrupt or crafted header
        stats.ip_length_capped += 1
        total = wire_l3
    elif total == 0:  # TSO capture
        total = wire_l3
    return _l4(proto, buf[l3 + 12:l3 + 16], buf[l3 + 16:l3 + 20], buf, l3 + ihl, end,
               total - ihl, stats, ip_id, buf[l3 + 1] & 3)


def _ipv6(buf: bytes, l3: int, end: int, wire_l3: int, stats: DecodeStats) -> tuple | None:
    if l3 + 40 > end:
        stats.truncated_headers += 1
        return None
    plen, nh = _IP6.unpack_from(buf, l3 + 4)
    if plen == 0:  # jumbogram or offload: the wire length is what we have
        plen = wire_l3 - 40
    pos = l3 + 40
    while nh in _IP6_EXT or nh == 44 or nh == 51:
        if pos + 8 > end:
            stats.truncated_headers += 1
            return None
        if nh == 44 and _H.unpack_from(buf, pos + 2)[0] & 0xFFF9:  # offset or M flag
            stats.ip_fragments += 1
            return None
        size = 8 if nh == 44 else (buf[pos + 1] + 2) * 4 if nh == 51 else (buf[pos + 1] + 1) * 8
        nh, pos, plen = buf[pos], pos + size, plen - size
    return _l4(nh, buf[l3 + 8:l3 + 24], buf[l3 + 24:l3 + 40], buf, pos, end, plen, stats, -1,
               (buf[l3 + 1] >> 4) & 3)


def _l4(proto: int, src: bytes, dst: bytes, buf: bytes, l4: int, end: int, l4len: int,
        stats: DecodeStats, ip_id: int, ecn: int = 0) -> tuple | None:
    if proto == PROTO_TCP:
        if l4 + 16 > end:
            stats.truncated_headers += 1
            return None
        sport, dport, seq, ack, offflags, win = _TCP.unpack_from(buf, l4)
        hlen = (offflags >> 12) * 4
        csum = _H.unpack_from(buf, l4 + 16)[0] if l4 + 18 <= end else -1
        return (6, src, dst, sport, dport, max(l4len - hlen, 0), seq, ack, offflags & 0x1FF,
                win, hlen, l4, end, ip_id, csum, ecn)
    if proto == PROTO_UDP:
        if l4 + 4 > end:
            stats.truncated_headers += 1
            return None
        sport, dport = _PORTS.unpack_from(buf, l4)
        return (17, src, dst, sport, dport, max(l4len - 8, 0))
    stats.other_l4 += 1
    return None
