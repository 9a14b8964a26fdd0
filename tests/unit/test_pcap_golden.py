"""Golden tests: aitb's pcap reader and flow analysis against capinfos/tshark 4.0.17 values.

The expected files beside each capture (tests/data/pcaps/*.expected.txt, see SOURCE.md there)
were written by capinfos and tshark, independent of aitb. Tolerances:

* frame counts, flow count, per-direction payload bytes and distinct bytes: exact. These are
  arithmetic on header fields; any difference is a decoding bug.
* tshark's tcp.analysis.retransmission / fast_retransmission / spurious_retransmission /
  duplicate_ack / out_of_order counts: exact on these files. aitb reproduces Wireshark's
  tcp_analyze_sequence_number() step by step (analysis/tcpflows/connection.py); the known
  divergences (MPTCP, SACK-based out-of-order in Wireshark >= 4.2, zero-window-probe edge cases)
  do not occur in these captures, so a tolerance wider than zero would only hide bugs.
* first-packet times: 1 us, the resolution of the microsecond files (tshark prints 6 digits).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis.tcpflows import analyse_capture

DATA = Path(__file__).resolve().parents[1] / "data" / "pcaps"
CAPTURES = sorted(p for p in DATA.iterdir() if p.suffix in (".pcap", ".pcapng"))


def expected(path: Path) -> dict:
    """Parse the capinfos/tshark transcript beside ``path``."""
    text = (path.parent / (path.name + ".expected.txt")).read_text()
    counts = {m[1]: int(m[2]) for m in re.finditer(r"-Y '([^']+)'\s+\| wc -l\s+=> (\d+)", text)}
    sums = {m[1]: int(m[2]) for m in re.finditer(
        r"-Y '([\w.]+) && tcp.len>0'.*=> (\d+) bytes", text)}
    streams = []
    for line in text.splitlines():
        cols = line.split("\t")
        if len(cols) == 13 and cols[0].isdigit():
            a, b = cols[1].split("->")
            streams.append({"a": a, "b": b, "packets": int(cols[2]), "first_t": float(cols[3]),
                            "ab": int(cols[6]), "ba": int(cols[7]), "uniq_ab": int(cols[8]),
                            "uniq_ba": int(cols[9]), "syn": cols[10] == "S"})
    packets = int(re.search(r"Number of packets:\s+(\d+)", text)[1])
    return {"counts": counts, "sums": sums, "streams": streams, "packets": packets}


def _endpoint(addr: str, port: int) -> str:
    return f"{addr}:{port}"


@pytest.fixture(scope="module", params=CAPTURES, ids=[p.name for p in CAPTURES])
def case(request):
    path = request.param
    return analyse_capture(path), expected(path)


def test_the_public_captures_are_all_here():
    assert len(CAPTURES) == 9


def test_packet_count_matches_capinfos(case):
    res, exp = case
    assert res.packets == exp["packets"]


def test_tcp_flows_match_tshark_streams(case):
    res, exp = case
    tcp = [f for f in res.flows if f["proto"] == "tcp"]
    assert len(tcp) == len(exp["streams"])
    for flow, stream in zip(tcp, exp["streams"], strict=True):
        assert _endpoint(flow["src"], flow["sport"]) == stream["a"]
        assert _endpoint(flow["dst"], flow["dport"]) == stream["b"]
        assert flow["packets"] == stream["packets"]
        assert flow["payload_bytes_a_to_b"] == stream["ab"]
        assert flow["payload_bytes_b_to_a"] == stream["ba"]
        assert flow["a_to_b"]["unique_payload_bytes"] == stream["uniq_ab"]
        assert flow["b_to_a"]["unique_payload_bytes"] == stream["uniq_ba"]
        assert flow["syn_seen"] == stream["syn"]
        assert flow["start_s"] == pytest.approx(stream["first_t"], abs=1e-6)


def test_udp_packets_match_tshark(case):
    res, exp = case
    udp = sum(f["packets"] for f in res.flows if f["proto"] == "udp")
    assert udp == exp["counts"]["udp"]


@pytest.mark.parametrize("ours,flag", [
    ("retransmissions", "tcp.analysis.retransmission"),
    ("fast_retransmissions", "tcp.analysis.fast_retransmission"),
    ("spurious_retransmissions", "tcp.analysis.spurious_retransmission"),
    ("dup_acks", "tcp.analysis.duplicate_ack"),
    ("out_of_order", "tcp.analysis.out_of_order"),
])
def test_analysis_counts_match_tshark_flags(case, ours, flag):
    res, exp = case
    total = sum(f.get(ours, 0) for f in res.flows if f["proto"] == "tcp")
    assert total == exp["counts"][flag]


def test_retransmitted_bytes_match_tshark(case):
    res, exp = case
    total = sum(f["retransmitted_bytes"] for f in res.flows if f["proto"] == "tcp")
    assert total == exp["sums"]["tcp.analysis.retransmission"]


def test_rto_is_what_is_neither_fast_nor_spurious(case):
    res, _ = case
    for f in res.flows:
        assert f["retransmissions"] == (f["fast_retransmissions"] + f["rto_retransmissions"]
                                        + f["spurious_retransmissions"])


def test_only_the_cut_file_warns(case):
    res, exp = case
    if "truncated" in res.path:
        assert len(res.warnings) == 1
        w = res.warnings[0]
        assert w.offset == 240 and "ends inside a record" in w.what  # 247-byte file, cut at 240
    else:
        assert res.warnings == []


def test_gso_segment_payload_comes_from_the_ip_length():
    res = analyse_capture(DATA / "gso_ipv4_7240B.pcap")
    assert res.flows[0]["payload_bytes"] == 7240  # IP total length 7292 - 20 - 32


def test_headers_only_frames_still_count_their_payload():
    """21 frames of this file carry 54 captured bytes only; tshark still sums their tcp.len."""
    res = analyse_capture(DATA / "tcp_fastretx_sack.pcap")
    assert res.flows[0]["payload_bytes_b_to_a"] == 28073


def test_fast_retransmission_file_has_rtt_samples_below_its_duration():
    res = analyse_capture(DATA / "tcp_bulk_fastretx_2flows.pcap")
    big = res.flows[1]
    assert big["rtt_samples"] > 100
    assert 0 < big["rtt_min_s"] <= big["rtt_mean_s"] <= big["rtt_max_s"] < big["fct_s"]
    assert big["fct_end"] == "ack"


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_compiled_kernel_gives_the_reference_records(path):
    """The numba kernel is a second implementation of the same rules: identical output."""
    ref = analyse_capture(path, engine="reference")
    fast = analyse_capture(path, engine="compiled")
    assert fast.to_dict() == ref.to_dict()


@pytest.mark.parametrize("engine", ["reference", "compiled"])
@pytest.mark.parametrize("name", ["tcp_bulk_fastretx_2flows.pcap", "truncated_midrecord.pcap",
                                  "pcapng_126idb_vlan_ipv6_tcp.pcapng"])
def test_results_do_not_depend_on_where_read_chunks_end(monkeypatch, name, engine):
    """Streaming: records and blocks cut by a chunk boundary are reassembled (97 B chunks)."""
    whole = analyse_capture(DATA / name, engine=engine).to_dict()
    from analysis.pcap import files
    from analysis.tcpflows import compiled_pcap, compiled_pcapng
    for module in (files, compiled_pcap, compiled_pcapng):  # every reader's own chunk size
        monkeypatch.setattr(module, "CHUNK_BYTES", 97)
    assert analyse_capture(DATA / name, engine=engine).to_dict() == whole
