"""Exact cases on captures built with scapy in tmp_path; tshark confirms each expectation.

Expected values are derived by hand from the packets each builder writes (see pcap_synth.py);
where tshark is installed (scripts/setup.sh installs it, so CI has it) it is asked the same
question as an independent oracle.
"""

from __future__ import annotations

import shutil
import struct
from decimal import Decimal

import pytest
from pcap_synth import (
    MSS,
    T0,
    Conv,
    fast_retransmission,
    lossy_bulk,
    pcapng,
    rto_retransmission,
    seg,
    spurious_retransmission,
    tshark_count,
    tshark_times,
    udp_packet,
    write_pcap,
)
from scapy.layers.inet import IP

from analysis.tcpflows import analyse_capture

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                  reason="tshark not installed (scripts/setup.sh installs it)")
KINDS = ("retransmissions", "fast_retransmissions", "rto_retransmissions",
         "spurious_retransmissions", "dup_acks")
TSHARK_FLAGS = {"retransmissions": "tcp.analysis.retransmission",
                "fast_retransmissions": "tcp.analysis.fast_retransmission",
                "spurious_retransmissions": "tcp.analysis.spurious_retransmission",
                "dup_acks": "tcp.analysis.duplicate_ack"}
# the receiver answers a spurious retransmission with a duplicate ACK (tshark flags it too)
CASES = {
    "fast": (fast_retransmission, {"retransmissions": 1, "fast_retransmissions": 1,
                                   "rto_retransmissions": 0, "spurious_retransmissions": 0,
                                   "dup_acks": 3}),
    "rto": (rto_retransmission, {"retransmissions": 1, "fast_retransmissions": 0,
                                 "rto_retransmissions": 1, "spurious_retransmissions": 0,
                                 "dup_acks": 0}),
    "spurious": (spurious_retransmission, {"retransmissions": 1, "fast_retransmissions": 0,
                                           "rto_retransmissions": 0,
                                           "spurious_retransmissions": 1, "dup_acks": 1}),
}


@pytest.fixture(params=["reference", "compiled"])
def engine(request):
    """Both implementations must give the hand-derived results on classic pcap files."""
    return request.param


@pytest.fixture(params=sorted(CASES))
def case(request, tmp_path):
    build, want = CASES[request.param]
    path = write_pcap(tmp_path / f"{request.param}.pcap", build().packets)
    return request.param, path, want


def test_each_retransmission_kind_is_classified_exactly(case, engine):
    _, path, want = case
    (flow,) = analyse_capture(path, engine=engine).flows
    assert {k: flow[k] for k in KINDS} == want
    assert flow["retransmitted_bytes"] == MSS


@needs_tshark
def test_tshark_agrees_with_the_hand_derived_counts(case):
    _, path, want = case
    for ours, flag in TSHARK_FLAGS.items():
        assert tshark_count(path, flag) == want[ours], flag


def test_fct_runs_from_syn_to_the_ack_of_the_last_byte(tmp_path, engine):
    path = write_pcap(tmp_path / "f.pcap", fast_retransmission().packets)
    (flow,) = analyse_capture(path, engine=engine).flows
    assert flow["fct_end"] == "ack"
    assert flow["fct_s"] == pytest.approx(0.042, abs=1e-9)  # SYN at 0, ACK of seg(5) at 0.042
    assert flow["payload_bytes_a_to_b"] == 6 * MSS  # 5 segments + 1 retransmission
    assert flow["a_to_b"]["unique_payload_bytes"] == 5 * MSS
    assert flow["goodput_bps"] == pytest.approx(8 * 5 * MSS / 0.042)


def test_rtt_samples_follow_karns_rule(tmp_path, engine):
    """seg 0 is acked at 0.031 (10 ms); the retransmitted seg 1 gives no sample; the final
    cumulative ACK matches the end of seg 4 (sent once at 0.0214): 20.6 ms."""
    path = write_pcap(tmp_path / "f.pcap", fast_retransmission().packets)
    (flow,) = analyse_capture(path, engine=engine).flows
    assert flow["a_to_b"]["rtt_samples"] == 2
    assert flow["rtt_min_s"] == pytest.approx(0.010, abs=1e-9)
    assert flow["rtt_max_s"] == pytest.approx(0.042 - 0.0214, abs=1e-9)
    assert flow["handshake_rtt_s"] == pytest.approx(0.020, abs=1e-9)


def test_fct_falls_back_to_fin_when_the_data_is_never_acked(tmp_path, engine):
    cv = Conv()
    cv.handshake()
    cv.c(0.021, "PA", seg(0), 1, MSS)
    cv.c(0.05, "FA", seg(1), 1)
    path = write_pcap(tmp_path / "f.pcap", cv.packets)
    (flow,) = analyse_capture(path, engine=engine).flows
    assert flow["fct_end"] == "fin"
    assert flow["fct_s"] == pytest.approx(0.05, abs=1e-9)


def test_port_reuse_after_fin_opens_a_new_connection(tmp_path, engine):
    first, second = fast_retransmission(), rto_retransmission()
    for p in second.packets:
        p.time += 10
        p[IP].payload.seq = (p[IP].payload.seq + 77_777) & 0xFFFFFFFF if p[IP].src == \
            "198.18.0.1" else p[IP].payload.seq
        if p[IP].src != "198.18.0.1" and p[IP].payload.flags & 0x10:
            p[IP].payload.ack = (p[IP].payload.ack + 77_777) & 0xFFFFFFFF
    path = write_pcap(tmp_path / "f.pcap", first.packets + second.packets)
    flows = analyse_capture(path, engine=engine).flows
    assert [f["fast_retransmissions"] for f in flows] == [1, 0]
    assert [f["rto_retransmissions"] for f in flows] == [0, 1]
    assert flows[1]["start_s"] == pytest.approx(10.0, abs=1e-9)


def test_a_truncated_last_record_is_a_warning_not_an_error(tmp_path, engine):
    path = write_pcap(tmp_path / "f.pcap", fast_retransmission().packets)
    full = path.read_bytes()
    path.write_bytes(full[:-30])  # cut the last frame (a 54-byte ACK) in its middle
    res = analyse_capture(path, engine=engine)
    assert res.packets == len(fast_retransmission().packets) - 1
    (w,) = res.warnings
    assert w.offset == len(full) - 54 - 16 and "ends inside a record" in w.what
    assert res.flows[0]["fast_retransmissions"] == 1


def test_a_corrupt_record_length_stops_with_a_warning(tmp_path, engine):
    path = write_pcap(tmp_path / "f.pcap", fast_retransmission().packets)
    data = bytearray(path.read_bytes())
    data[24 + 8:24 + 12] = (10**9).to_bytes(4, "little")  # first record's caplen: 1 GB
    path.write_bytes(bytes(data))
    res = analyse_capture(path, engine=engine)
    assert res.packets == 0
    assert res.warnings[0].offset == 24 and "corrupt" in res.warnings[0].what


def test_nanosecond_timestamps_keep_nanoseconds(tmp_path, engine):
    cv = Conv()
    cv.c(0.000000001, "S", 0, 0)
    cv.s(0.000000790, "SA", 0, 1)  # 789 ns later
    cv.c(0.000001234, "A", 1, 1)
    path = write_pcap(tmp_path / "ns.pcap", cv.packets, nano=True)
    res = analyse_capture(path, engine=engine)
    assert res.format == "pcap-ns"
    assert res.start_ns == int((T0 + Decimal("0.000000001")) * 10**9)
    assert res.flows[0]["handshake_rtt_s"] == pytest.approx(1.233e-6, abs=1e-12)


@needs_tshark
def test_nanosecond_times_agree_with_tshark(tmp_path):
    path = write_pcap(tmp_path / "ns.pcap", fast_retransmission().packets, nano=True)
    res = analyse_capture(path)
    times = tshark_times(path)
    assert res.start_ns == int(times[0] * 10**9)


def test_linux_cooked_v2(tmp_path, engine):
    cv = fast_retransmission()
    sll = Conv(link="sll2")
    for p in cv.packets:
        sll._pkt((p[IP].src, p[IP].sport), (p[IP].dst, p[IP].dport), float(p.time - T0),
                 p[IP].payload.flags, p[IP].payload.seq, p[IP].payload.ack,
                 len(p[IP].payload.payload), p[IP].payload.window)
    path = write_pcap(tmp_path / "sll2.pcap", sll.packets, linktype=276)
    res = analyse_capture(path, engine=engine)
    assert res.linktypes == [276]
    (flow,) = res.flows
    assert {k: flow[k] for k in KINDS} == CASES["fast"][1]


def _pcapng_case(tmp_path):
    eth = fast_retransmission().packets  # interface 0: Ethernet, microseconds (default)
    raw = rto_retransmission()  # interface 1: raw IP, nanoseconds
    raw.client, raw.server = ("198.18.0.5", 40001), ("198.18.0.6", 5202)
    raw.packets = []
    raw.handshake()
    raw.c(0.021, "PA", seg(0), 1, MSS)
    raw.s(0.031, "A", 1, seg(1))
    udp = [udp_packet(1.5, 100), udp_packet(1.75, 200)]  # interface 2: SLL2, 2^-10 s
    packets = [(0, p.time, bytes(p)) for p in eth]
    packets += [(1, p.time + Decimal("0.000000007"), bytes(p[IP])) for p in raw.packets]
    packets += [(2, p.time, bytes(Conv(link="sll2").packets or b"") + _sll2(p)) for p in udp]
    packets.append(("spb", None, bytes(eth[3])))
    ifaces = [(1, None), (101, 9), (276, 0x80 | 10)]
    return pcapng(tmp_path / "multi.pcapng", ifaces, packets), eth, raw, udp


def _damage(res):
    """Warnings about damage at an offset; the file-wide one of _pcapng_case (its interfaces
    are written one after the other, so interface 1's first frame is stamped before the last
    of interface 0) is asserted in test_pcapng_with_interfaces_of_different_link_types..."""
    return [w for w in res.warnings if w.offset is not None]


def _sll2(p) -> bytes:
    from scapy.layers.l2 import CookedLinuxV2
    return bytes(CookedLinuxV2(proto=0x0800) / p)


def test_pcapng_with_interfaces_of_different_link_types_and_resolutions(tmp_path, engine):
    path, eth, raw, udp = _pcapng_case(tmp_path)
    res = analyse_capture(path, engine=engine)
    assert res.format == "pcapng" and res.linktypes == [1, 101, 276]
    (w,) = res.warnings
    assert w.offset is None and w.what.startswith(
        f"1 frames are stamped earlier than the frame before them (first: frame {len(eth) + 1})")
    assert res.packets == len(eth) + len(raw.packets) + len(udp) + 1
    tcp_eth, tcp_raw, flow_udp = res.flows
    assert tcp_eth["fast_retransmissions"] == 1 and tcp_eth["dup_acks"] == 3
    # the Simple Packet Block repeats the first data segment after everything was acked
    assert tcp_eth["spurious_retransmissions"] == 1
    assert tcp_raw["sport"] == 40001 and tcp_raw["payload_bytes"] == MSS
    # raw interface stamps in ns: its SYN is 7 ns after the Ethernet interface's SYN
    assert tcp_raw["start_s"] == pytest.approx(7e-9, abs=1e-12)
    assert flow_udp["proto"] == "udp" and flow_udp["payload_bytes"] == 300
    assert flow_udp["start_s"] == pytest.approx(1.5, abs=1e-9)  # 1.5 s is exact in 2^-10 s


@needs_tshark
def test_pcapng_times_agree_with_tshark(tmp_path):
    path, *_ = _pcapng_case(tmp_path)
    res = analyse_capture(path)
    # tshark also lists the unknown block as a "data" record; every packet here is IP
    assert res.packets == tshark_count(path, "ip")
    times = tshark_times(path, "ip")  # the Simple Packet Block has no time: tshark prints none
    assert res.start_ns == int(times[0] * 10**9)
    assert tshark_count(path, "tcp.analysis.spurious_retransmission") == 1


def test_a_cut_pcapng_keeps_the_whole_blocks_and_warns(tmp_path, engine):
    path, *_ = _pcapng_case(tmp_path)
    full = analyse_capture(path, engine=engine)
    data = path.read_bytes()
    path.write_bytes(data[:-20])  # inside the last block (the Simple Packet Block)
    res = analyse_capture(path, engine=engine)
    assert res.packets == full.packets - 1
    (w,) = _damage(res)
    assert "ends inside a block" in w.what and 0 < w.offset < len(data) - 20


def test_a_corrupt_pcapng_block_length_stops_with_a_warning(tmp_path, engine):
    path, eth, *_ = _pcapng_case(tmp_path)
    data = bytearray(path.read_bytes())
    first_epb = data.index(struct.pack("<I", 6))  # the first Enhanced Packet Block
    data[first_epb + 4:first_epb + 8] = struct.pack("<I", 13)  # not a multiple of 4
    path.write_bytes(bytes(data))
    res = analyse_capture(path, engine=engine)
    assert res.packets == 0
    assert res.warnings[0].offset == first_epb and "impossible" in res.warnings[0].what


@pytest.fixture(scope="module")
def lossy(tmp_path_factory):
    path = tmp_path_factory.mktemp("lossy") / "lossy.pcap"
    return write_pcap(path, lossy_bulk().packets)


def test_lossy_bulk_transfer_is_rich_enough_to_mean_something(lossy, engine):
    (flow,) = analyse_capture(lossy, engine=engine).flows
    assert flow["fast_retransmissions"] >= 10 and flow["rto_retransmissions"] >= 10
    assert flow["dup_acks"] >= 100 and flow["a_to_b"]["unique_payload_bytes"] == 1500 * MSS


@needs_tshark
def test_lossy_bulk_transfer_counts_equal_tshark(lossy, engine):
    """Exact: the same algorithm as tshark's, on ~3200 frames with ~150 retransmissions of
    both kinds, hundreds of duplicate ACKs and losses of retransmissions."""
    (flow,) = analyse_capture(lossy, engine=engine).flows
    for ours, flag in TSHARK_FLAGS.items():
        assert flow[ours] == tshark_count(lossy, flag), flag
    assert flow["out_of_order"] == tshark_count(lossy, "tcp.analysis.out_of_order")


@pytest.mark.parametrize("btype", [1, 2, 3, 6])
def test_a_pcapng_block_too_short_for_its_fields_is_skipped_with_a_warning(tmp_path, btype, engine):
    path, *_ = _pcapng_case(tmp_path)
    full = analyse_capture(path, engine=engine)
    runt = struct.pack("<III", btype, 12, 12)  # a whole block with no room for its fields
    path.write_bytes(path.read_bytes() + runt)
    res = analyse_capture(path, engine=engine)
    assert res.packets == full.packets and res.flows == full.flows
    (w,) = _damage(res)
    assert w.offset == path.stat().st_size - 12 and "fewer than its fixed fields" in w.what
