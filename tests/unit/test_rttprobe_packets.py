"""ICMP echo packets of the RTT probe (RFC 792, checksum RFC 1071)."""

import struct

from testbed.rttprobe import _checksum, echo_request, parse_echo_reply


def test_echo_request_is_valid_icmp():
    pkt = echo_request(0x1234, 7)
    assert len(pkt) == 64 and pkt[0] == 8  # 8-byte header + 56 bytes, like ping(8)
    assert _checksum(pkt) == 0  # a correct checksum sums to 0xffff, complemented 0
    assert struct.unpack("!HH", pkt[4:8]) == (0x1234, 7)


def test_parse_only_echo_replies():
    ip_head = bytes([0x45]) + bytes(11) + bytes([198, 18, 1, 2]) + bytes([198, 18, 1, 1])
    reply = ip_head + bytes([0, 0, 0, 0]) + struct.pack("!HH", 0x1234, 7) + bytes(56)
    assert parse_echo_reply(reply) == (bytes([198, 18, 1, 2]), 0x1234, 7)
    unreachable = ip_head + bytes([3, 1, 0, 0]) + bytes(60)
    assert parse_echo_reply(unreachable) is None
    assert parse_echo_reply(b"\x45") is None
