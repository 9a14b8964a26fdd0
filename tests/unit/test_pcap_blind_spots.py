"""What `aitb pcap` used to miss (both engines): ECN per flow, capture gaps (bytes acknowledged
but never seen), FIN re-sends as their own retransmission kind, identical frames that are
packets (two RSTs with IP ID 0) rather than a duplicated capture. Small captures written by
the test with scapy, checked against tshark where tshark has a count of its own, and a real
capture of an aitb run whose drops happened before the capture point."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from pcap_synth import MSS, Conv, fast_retransmission, seg, tshark_count, write_pcap
from scapy.layers.inet import IP, TCP

from analysis.tcpflows import analyse_capture

ENGINES = ["reference", "compiled"]
DATA = Path(__file__).resolve().parents[1] / "data" / "pcaps"
AITB_DATA = Path(__file__).resolve().parents[1] / "data" / "aitb_pcaps"


def _ecn_conv() -> Conv:
    """An ECN-capable connection (RFC 3168): ECN-setup SYN and SYN-ACK, four data segments
    ECT(0), one ECT(1) and one CE-marked by a router; the receiver echoes ECE until the
    sender's CWR."""
    cv = Conv()
    cv.c(0.0, "SEC", 0, 0)
    cv.s(0.010, "SAE", 0, 1)
    cv.c(0.020, "A", 1, 1)
    for n in range(6):
        cv.c(0.021 + n * 0.0001, "PA", seg(n), 1, MSS)
    cv.s(0.031, "AE", 1, seg(3))
    cv.s(0.0311, "AE", 1, seg(6))
    cv.c(0.032, "PAC", seg(6), 1, MSS)
    cv.s(0.042, "A", 1, seg(7))
    cv.close(0.05, seg(7))
    for n, tos in zip((3, 4, 5, 6, 7, 8, 11), (2, 2, 3, 2, 1, 2, 2), strict=True):
        cv.packets[n][IP].tos = tos  # the data segments 0..5 and 6
    return cv


@pytest.mark.parametrize("engine", ENGINES)
def test_ecn_codepoints_and_flags_are_counted_per_direction(tmp_path, engine):
    path = write_pcap(tmp_path / "ecn.pcap", _ecn_conv().packets)
    (flow,) = analyse_capture(path, engine=engine).flows
    ab, ba = flow["a_to_b"], flow["b_to_a"]
    assert (ab["ect0"], ab["ect1"], ab["ce"], ab["cwr"], ab["ece"]) == (5, 1, 1, 1, 0)
    assert (ba["ect0"], ba["ce"], ba["ece"], ba["cwr"]) == (0, 0, 2, 0)  # SYN-ACK's ECE: setup
    assert (flow["ect0"], flow["ce"], flow["ece"], flow["cwr"]) == (5, 1, 2, 1)
    # tshark agrees on the marks; its ECE/CWR counts include the SYNs' negotiation
    assert tshark_count(path, "ip.dsfield.ecn == 2") == 5
    assert tshark_count(path, "ip.dsfield.ecn == 3") == 1
    assert tshark_count(path, "tcp.flags.ece == 1 && tcp.flags.syn == 0") == 2
    assert tshark_count(path, "tcp.flags.cwr == 1 && tcp.flags.syn == 0") == 1


def _gap_conv(fill: bool) -> Conv:
    """Segment 1 lost before the capture point: 0, 2, 3 seen, all acked; with ``fill`` its
    retransmission is captured later."""
    cv = Conv()
    cv.handshake()
    for n in (0, 2, 3):
        cv.c(0.021 + n * 0.0001, "PA", seg(n), 1, MSS)
    if fill:
        cv.c(0.25, "PA", seg(1), 1, MSS)
    cv.s(0.26, "A", 1, seg(4))
    cv.close(0.27, seg(4))
    return cv


@pytest.mark.parametrize("engine", ENGINES)
def test_a_segment_never_captured_is_a_gap_of_acknowledged_bytes(tmp_path, engine):
    path = write_pcap(tmp_path / "gap.pcap", _gap_conv(fill=False).packets)
    (flow,) = analyse_capture(path, engine=engine).flows
    assert flow["capture_gaps"] == 1 and flow["a_to_b"]["gap_bytes"] == MSS
    assert flow["gap_bytes"] == MSS
    assert tshark_count(path, "tcp.analysis.lost_segment") == 1
    # its retransmission was captured: the gap is counted, no byte stayed unseen
    path = write_pcap(tmp_path / "filled.pcap", _gap_conv(fill=True).packets)
    (flow,) = analyse_capture(path, engine=engine).flows
    assert flow["capture_gaps"] == 1 and flow["gap_bytes"] == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_an_acknowledged_tail_the_capture_missed_is_a_gap(tmp_path, engine):
    cv = Conv()
    cv.handshake()
    cv.c(0.021, "PA", seg(0), 1, MSS)
    cv.s(0.031, "A", 1, seg(3))  # acks two segments the capture never saw
    path = write_pcap(tmp_path / "tail.pcap", cv.packets)
    (flow,) = analyse_capture(path, engine=engine).flows
    assert flow["gap_bytes"] == 2 * MSS and flow["capture_gaps"] == 0
    assert tshark_count(path, "tcp.analysis.ack_lost_segment") == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_a_fin_sent_again_is_a_fin_retransmission_not_an_rto(tmp_path, engine):
    cv = Conv()
    cv.handshake()
    cv.c(0.021, "PA", seg(0), 1, MSS)
    cv.s(0.031, "A", 1, seg(1))
    cv.c(0.04, "FA", seg(1), 1)
    cv.c(0.26, "FA", seg(1), 1)  # the FIN's ACK was lost: sent again on the timer
    cv.s(0.27, "FA", 1, seg(1) + 1)
    cv.c(0.28, "A", seg(1) + 1, 2)
    path = write_pcap(tmp_path / "fin.pcap", cv.packets)
    (flow,) = analyse_capture(path, engine=engine).flows
    assert flow["fin_retransmissions"] == 1 and flow["rto_retransmissions"] == 0
    assert flow["retransmissions"] == 1 == tshark_count(path, "tcp.analysis.retransmission")


def _rsts(cv: Conv, t: float, seq: int) -> None:
    """Two RSTs from the server 0.2 ms apart, identical (IP ID 0, as Linux sends them)."""
    for dt in (0.0, 0.0002):
        cv.s(t + dt, "R", seq, 0)
        cv.packets[-1][IP].id = 0
        cv.packets[-1][TCP].flags = "R"


@pytest.mark.parametrize("engine", ENGINES)
def test_two_identical_rsts_are_two_packets_not_a_duplicated_capture(tmp_path, engine):
    cv = Conv()
    cv.handshake()
    for n in range(3):
        cv.c(0.021 + n * 0.0001, "PA", seg(n), 1, MSS)
    cv.s(0.031, "A", 1, seg(3))
    cv.c(0.04, "PA", seg(3), 1, MSS)
    cv.c(0.0401, "PA", seg(4), 1, MSS)
    _rsts(cv, 0.045, 1)
    assert bytes(cv.packets[-1][IP]) == bytes(cv.packets[-2][IP])
    res = analyse_capture(write_pcap(tmp_path / "rst.pcap", cv.packets), engine=engine)
    (flow,) = res.flows
    assert flow["duplicate_captures"] == 0 and flow["b_to_a"]["rst"] == 2
    assert flow["packets"] == len(cv.packets) and res.warnings == []


@pytest.mark.parametrize("engine", ENGINES)
def test_a_doubled_flow_is_still_counted_once_next_to_an_undoubled_one(tmp_path, engine):
    """Both rules in one file: a flow captured twice (every frame doubled) is counted once,
    while another flow's identical RSTs stay packets."""
    doubled = []
    for p in fast_retransmission().packets:
        c = p.copy()
        c.time = p.time + Decimal("0.000001")
        doubled += [p, c]
    cv = Conv(client=("198.18.0.7", 40001))
    cv.handshake()
    cv.c(0.021, "PA", seg(0), 1, MSS)
    _rsts(cv, 0.03, 1)
    pkts = sorted(doubled + cv.packets, key=lambda p: p.time)
    res = analyse_capture(write_pcap(tmp_path / "both.pcap", pkts), engine=engine)
    twice, rst = res.flows
    assert twice["duplicate_captures"] == twice["packets"] and twice["fast_retransmissions"] == 1
    assert rst["duplicate_captures"] == 0 and rst["b_to_a"]["rst"] == 2
    assert [w.what.split(" frames")[0] for w in res.warnings] == [str(twice["packets"])]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_real_capture_of_an_aitb_run_reports_its_gaps_as_tshark_does(engine):
    """A leaf's downlink in a two-DC ring all-reduce: segments dropped at the sending hosts'
    egress never reached the capture point, whose retransmissions later filled them."""
    path = AITB_DATA / "aitb_dci_ring_lost_segments.pcap"
    res = analyse_capture(path, engine=engine)
    gaps = sum(f["capture_gaps"] for f in res.flows if f["proto"] == "tcp")
    assert gaps == tshark_count(path, "tcp.analysis.lost_segment") == 14
    assert sum(f["gap_bytes"] for f in res.flows if f["proto"] == "tcp") == 0
    assert sum(f["fin_retransmissions"] for f in res.flows if f["proto"] == "tcp") == 0
    assert sum(f["retransmissions"] for f in res.flows if f["proto"] == "tcp") == \
        tshark_count(path, "tcp.analysis.retransmission")
