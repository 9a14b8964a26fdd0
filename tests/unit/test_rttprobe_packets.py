"""ICMP echo packets of the RTT probe (RFC 792, checksum RFC 1071)."""

import struct

from testbed.counters.rttprobe import _checksum, echo_request, parse_echo_reply


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


def test_an_echo_is_never_timed_before_its_reply_was_read(monkeypatch):
    """The delay line's helper runs at a real-time priority: it preempts the busy-polling
    prober between a clock read and the recv and releases the reply right there. An RTT
    timed by the clock read before that recv came out up to 0.6 ms below the two delays."""
    import ipaddress

    from testbed.counters import rttprobe

    clock = [100.0]
    released_at: list[float] = []
    ip_head = bytes([0x45]) + bytes(11) + bytes([198, 18, 1, 2]) + bytes([198, 18, 1, 1])

    def perf_counter() -> float:
        clock[0] += 1e-6
        return clock[0]

    def recv(sock):
        if len(released_at) < 3:  # nothing yet, then preempted: released during the gap
            clock[0] += 5e-4
            released_at.append(clock[0])
            return None if len(released_at) < 3 else \
                ip_head + bytes(4) + struct.pack("!HH", 0x1234, 7) + bytes(56)
        raise AssertionError("read twice")

    class Sock:
        def sendto(self, data, dst):
            pass

    monkeypatch.setattr(rttprobe.time, "perf_counter", perf_counter)
    monkeypatch.setattr(rttprobe, "_recv", recv)
    probe = rttprobe.EchoProbe("l", "h1", "eth0", ipaddress.ip_address("198.18.1.1"),
                               ipaddress.ip_address("198.18.1.2"), 0.0)
    sent_before = clock[0]
    rtt = rttprobe._echo(Sock(), probe, 0x1234, 7, timeout_s=1.0)
    assert rtt is not None and rtt >= released_at[-1] - sent_before - 1e-6
