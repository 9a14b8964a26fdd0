"""Captures that would fool the analysis (both engines): an IPv4 total length beyond the wire
length, one packet captured twice, invalid and out-of-order timestamps, a pcapng block whose
two lengths disagree. Each capture is written by the test."""

from __future__ import annotations

import struct
import subprocess
from decimal import Decimal

import pytest
from pcap_synth import MSS, T0, Conv, fast_retransmission, pcapng, seg, tshark_count, write_pcap
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from analysis.tcpflows import analyse_capture

ENGINES = ["reference", "compiled"]


@pytest.mark.parametrize("engine", ENGINES)
def test_ip_length_beyond_the_wire_is_capped(tmp_path, engine):
    conv = fast_retransmission()
    for p in conv.packets:
        if Raw in p:
            p[IP].len = len(p[IP]) + 1000  # claims 1000 bytes the frame does not carry
    res = analyse_capture(write_pcap(tmp_path / "long.pcap", conv.packets), engine=engine)
    (flow,) = res.flows
    # as without the lie: 5 segments + 1 retransmission (test_pcap_synthetic)
    assert flow["payload_bytes_a_to_b"] == 6 * MSS
    assert flow["a_to_b"]["unique_payload_bytes"] == 5 * MSS
    # and said, once, with the count of the 6 data frames that lied
    (warn,) = [w for w in res.warnings if "beyond their wire length" in w.what]
    assert warn.what.startswith("6 IPv4 frames claim a total length")
    assert res.decode.ip_length_capped == 6 and "ip_length_capped" not in res.decode.to_dict()


@pytest.mark.parametrize("engine", ENGINES)
def test_an_honest_capture_has_no_capping_warning(tmp_path, engine):
    res = analyse_capture(write_pcap(tmp_path / "ok.pcap", fast_retransmission().packets),
                          engine=engine)
    assert res.decode.ip_length_capped == 0
    assert not [w for w in res.warnings if "wire length" in w.what]


def _copy(p, dt: str):
    """``p`` as a second interface one router hop on saw it ``dt`` s later: other MACs, TTL
    one less (so another IP checksum), same IP ID, TCP header and payload."""
    c = Ether(src="02:00:00:00:00:03", dst="02:00:00:00:00:04") / p[IP].copy()
    c[IP].ttl -= 1
    del c[IP].chksum
    c = Ether(bytes(c))
    c.time = p.time + Decimal(dt)
    return c


def _flow_counts(flow):
    return {k: flow[k] for k in ("packets", "payload_bytes", "retransmissions",
                                 "fast_retransmissions", "rto_retransmissions", "dup_acks",
                                 "wire_bytes", "fct_s")}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("layout", ["adjacent", "two_apart"])
def test_every_packet_captured_twice_is_counted_once(tmp_path, engine, layout):
    pkts = fast_retransmission().packets
    if layout == "adjacent":  # two interfaces of one path: each copy 1 us after its original
        doubled = [q for p in pkts for q in (p, _copy(p, "0.000001"))]
    else:  # a bridge and its port, buffered: copies of a pair follow the pair
        doubled = []
        for i in range(0, len(pkts), 2):
            pair = pkts[i:i + 2]
            doubled += pair + [_copy(p, "0.000002") for p in pair]
    doubled.sort(key=lambda p: p.time)
    clean = analyse_capture(write_pcap(tmp_path / "once.pcap", pkts), engine=engine)
    res = analyse_capture(write_pcap(tmp_path / "twice.pcap", doubled), engine=engine)
    (once,), (twice,) = clean.flows, res.flows
    assert res.packets == 2 * len(pkts)
    assert twice["duplicate_captures"] == len(pkts) and once["duplicate_captures"] == 0
    assert _flow_counts(twice) == _flow_counts(once)
    assert twice["fast_retransmissions"] == 1 and twice["rto_retransmissions"] == 0
    (w,) = res.warnings
    assert w.offset is None and w.what.startswith(f"{len(pkts)} frames are second copies")
    assert "not as a retransmission" in w.what and clean.warnings == []


@pytest.mark.parametrize("engine", ENGINES)
def test_a_quick_real_retransmission_has_a_new_ip_id_and_stays_one(tmp_path, engine):
    cv = Conv()
    cv.handshake()
    cv.c(0.021, "PA", seg(0), 1, MSS)
    cv.c(0.0211, "PA", seg(1), 1, MSS)
    cv.c(0.0214, "PA", seg(1), 1, MSS)  # resent 0.3 ms later with the next IP ID (Linux)
    cv.s(0.031, "A", 1, seg(2))
    cv.close(0.04, seg(2))
    (flow,) = analyse_capture(write_pcap(tmp_path / "r.pcap", cv.packets), engine=engine).flows
    assert flow["retransmissions"] == 1 and flow["duplicate_captures"] == 0
    cv.packets[5][IP].id = cv.packets[4][IP].id  # the same packet seen again 0.3 ms later
    (flow,) = analyse_capture(write_pcap(tmp_path / "d.pcap", cv.packets), engine=engine).flows
    # one identical pair in a flow of 11 frames is no evidence of a doubled capture (the
    # flow decides: test_every_packet_captured_twice_is_counted_once): it stays a packet
    assert flow["retransmissions"] == 1 and flow["duplicate_captures"] == 0


def _record_offsets(data: bytes) -> list[int]:
    """Byte offsets of the records of a little-endian classic pcap."""
    pos, out = 24, []
    while pos < len(data):
        out.append(pos)
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
    return out


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("nano", [False, True])
def test_invalid_fraction_of_a_second_is_warned(tmp_path, engine, nano):
    path = write_pcap(tmp_path / "ts.pcap", fast_retransmission().packets, nano=nano)
    data = bytearray(path.read_bytes())
    one = 10**9 if nano else 10**6
    for rec in _record_offsets(bytes(data))[1:3]:  # frames 2 and 3
        sec, frac = struct.unpack_from("<II", data, rec)
        struct.pack_into("<II", data, rec, sec - 1, frac + one)  # the same instant, invalid
    path.write_bytes(bytes(data))
    res = analyse_capture(path, engine=engine)
    (w,) = res.warnings
    unit = "nanosecond" if nano else "microsecond"
    assert w.offset is None
    assert w.what.startswith(f"2 records have a {unit} field of 10^{9 if nano else 6} or more")
    assert "first: frame 2" in w.what
    assert res.flows[0]["fast_retransmissions"] == 1  # times still usable: sec + fraction


def _ng(path, dts):
    cv = Conv()
    cv.handshake()
    return pcapng(path, [(1, 9)], [(0, T0 + Decimal(dt), bytes(p))
                                   for p, dt in zip(cv.packets, dts, strict=True)])


@pytest.mark.parametrize("engine", ENGINES)
def test_pcapng_block_with_two_different_lengths_ends_the_file(tmp_path, engine):
    path = _ng(tmp_path / "t.pcapng", ["0", "0.01", "0.02"])
    data = bytearray(path.read_bytes())
    blocks, pos = [], 0
    while pos < len(data):
        blocks.append(pos)
        pos += struct.unpack_from("<I", data, pos + 4)[0]
    second = blocks[-2]  # SHB, IDB, unknown block, EPB 1, EPB 2, EPB 3
    blen = struct.unpack_from("<I", data, second + 4)[0]
    struct.pack_into("<I", data, second + blen - 4, blen + 4)
    path.write_bytes(bytes(data))
    res = analyse_capture(path, engine=engine)
    assert res.packets == 1
    (w,) = res.warnings
    assert w.offset == second
    assert w.what == (f"block of type 6 says {blen} bytes at its start but {blen + 4} at its "
                      f"end: file is corrupt from here")
    # Wireshark refuses the same block
    out = subprocess.run(["tshark", "-r", str(path)], capture_output=True, text=True)
    tcp_frames = [line for line in out.stdout.splitlines() if " TCP " in line]
    assert "don't match" in out.stderr and len(tcp_frames) == 1


def _late_fast_retransmission() -> Conv:
    """A fast retransmission after 3 duplicate ACKs, stamped 0.9 ms before the third of them
    although it follows it in the file (out-of-order timestamps); handshake RTT 2 ms, so 9 ms
    after the highest segment it is no out-of-order segment either."""
    cv = Conv()
    cv.c(0.0, "S", 0, 0)
    cv.s(0.001, "SA", 0, 1)
    cv.c(0.002, "A", 1, 1)
    for n in range(5):
        cv.c(0.003 + n * 0.0001, "PA", seg(n), 1, MSS)
    for k in range(4):
        cv.s(0.013 + k * 0.0001, "A", 1, seg(1))
    cv.c(0.0124, "PA", seg(1), 1, MSS)  # frame 13, stamped before frame 12 (0.0133)
    cv.s(0.025, "A", 1, seg(5))
    cv.close(0.026, seg(5))
    return cv


@pytest.mark.parametrize("engine", ENGINES)
def test_negative_gap_is_no_fast_retransmission_as_in_wireshark(tmp_path, engine):
    path = write_pcap(tmp_path / "neg.pcap", _late_fast_retransmission().packets)
    res = analyse_capture(path, engine=engine)
    (flow,) = res.flows
    assert flow["fast_retransmissions"] == tshark_count(path, "tcp.analysis.fast_retransmission")
    assert flow["fast_retransmissions"] == 0
    assert flow["rto_retransmissions"] == 1 == tshark_count(path, "tcp.analysis.retransmission")
    (w,) = res.warnings
    assert w.offset is None and w.what.startswith("1 frames are stamped earlier than the frame "
                                                  "before them (first: frame 13)")


@pytest.mark.parametrize("engine", ENGINES)
def test_pcapng_out_of_order_timestamps_are_counted(tmp_path, engine):
    res = analyse_capture(_ng(tmp_path / "o.pcapng", ["0", "0.02", "0.01"]), engine=engine)
    (w,) = res.warnings
    assert w.what.startswith("1 frames are stamped earlier than the frame before them "
                             "(first: frame 3)")
