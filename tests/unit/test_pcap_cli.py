"""``aitb pcap`` through the installed console script (the real entry point)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pcap_synth import fast_retransmission, write_pcap

DATA = Path(__file__).resolve().parents[1] / "data" / "pcaps"
AITB_DATA = Path(__file__).resolve().parents[1] / "data" / "aitb_pcaps"
AITB = str(Path(sys.executable).parent / "aitb")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([AITB, "pcap", *args], capture_output=True, text=True, timeout=60)


def test_json_has_the_promised_fields():
    out = run("--json", str(DATA / "tcp_bulk_fastretx_2flows.pcap"))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["packets"] == 672 and doc["warnings"] == []
    required = {"src", "dst", "sport", "dport", "proto", "payload_bytes", "fct_s",
                "retransmissions", "fast_retransmissions", "rto_retransmissions",
                "spurious_retransmissions", "dup_acks", "zero_windows", "rtt_mean_s",
                "goodput_bps", "payload_bytes_a_to_b", "payload_bytes_b_to_a"}
    for flow in doc["flows"]:
        assert required <= flow.keys()
    assert [f["fast_retransmissions"] for f in doc["flows"]] == [0, 12]


def test_several_files_add_up_and_each_flow_names_its_file():
    a, b = DATA / "sll2_loopback_http.pcap", DATA / "vlan100_tcp_bulk_trex.pcap"
    doc = json.loads(run("--json", str(a), str(b)).stdout)
    assert doc["packets"] == 24 + 84
    assert [f["file"] for f in doc["flows"]] == [str(a), str(a), str(b)]


def test_table_for_people():
    out = run(str(DATA / "tcp_bulk_fastretx_2flows.pcap"))
    assert out.returncode == 0, out.stderr
    assert "10.101.84.70:10978 -> 129.174.93.161:80" in out.stdout
    assert "retransmissions: 14 (fast 12, RTO 2, spurious 0, FIN 0)" in out.stdout


def test_the_table_says_what_fct_and_retransmissions_mean_and_shows_gaps_and_ecn():
    out = run(str(AITB_DATA / "aitb_dci_ring_lost_segments.pcap"))
    assert out.returncode == 0, out.stderr
    assert "retx fast/RTO/spur/FIN" in out.stdout and "CE/ECE" in out.stdout
    assert "capture gaps: 14 (" in out.stdout and "0 bytes acknowledged but never seen" \
        in out.stdout
    assert "ECN: ECT(0) 0, ECT(1) 0, CE 0, ECE 0, CWR 0" in out.stdout
    assert "FCT: from the SYN to the ACK of the last payload byte" in out.stdout
    assert "not tshark's conversation duration" in out.stdout
    assert "each capture sees one point of the path" in out.stdout
    doc = json.loads(run("--json", str(AITB_DATA / "aitb_dci_ring_lost_segments.pcap")).stdout)
    for key in ("capture_gaps", "gap_bytes", "fin_retransmissions", "ect0", "ect1", "ce",
                "ece", "cwr"):
        assert all(key in f and key in f["a_to_b"] for f in doc["flows"])


def test_a_truncated_file_gives_results_and_a_warning(tmp_path):
    path = write_pcap(tmp_path / "cut.pcap", fast_retransmission().packets)
    path.write_bytes(path.read_bytes()[:-10])
    out = run("--json", str(path))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["flows"][0]["fast_retransmissions"] == 1
    (w,) = doc["warnings"]
    assert w["file"] == str(path) and w["offset"] > 0 and "ends inside a record" in w["what"]
    human = run(str(path))
    assert "warning:" in human.stdout and human.returncode == 0


def test_missing_file_is_a_clear_error_naming_it(tmp_path):
    missing = tmp_path / "nope.pcap"
    out = run(str(DATA / "gso_ipv4_7240B.pcap"), str(missing))
    assert out.returncode == 2
    assert str(missing) in out.stderr and "no such file" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_not_a_capture_is_a_clear_error_naming_it(tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("these are not packets\n")
    out = run(str(junk))
    assert out.returncode == 2
    assert str(junk) in out.stderr and "not a pcap or pcapng file" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_directory_is_a_clear_error(tmp_path):
    out = run(str(tmp_path))
    assert out.returncode == 2 and str(tmp_path) in out.stderr
    assert "Traceback" not in out.stderr


def test_pcap_starts_without_the_heavy_libraries(tmp_path):
    """The quick path of orchestration.cli.entry (start-up target: bench/pcap_startup.py):
    no typer, rich, numba, pandas, matplotlib or pydantic for a small file."""
    path = write_pcap(tmp_path / "small.pcap", fast_retransmission().packets)
    code = ("import json, sys; sys.argv = ['aitb', 'pcap', sys.argv[1]]; "
            "from orchestration.cli.entry import main; main(); "
            "sys.stderr.write(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "retransmissions: 1 (fast 1, RTO 0, spurious 0, FIN 0)" in out.stdout
    top = {m.split(".")[0] for m in json.loads(out.stderr)}
    assert top.isdisjoint({"typer", "rich", "numba", "pandas", "matplotlib", "pydantic"})


def test_help_and_unknown_options_still_go_through_the_full_cli():
    out = run("--help")
    assert out.returncode == 0 and "--json" in out.stdout
    bad = run("--no-such-option", str(DATA / "gso_ipv4_7240B.pcap"))
    assert bad.returncode == 2 and "no-such-option" in bad.stderr


def test_duplicates_and_clock_warnings_are_shown(tmp_path):
    from decimal import Decimal

    pkts = fast_retransmission().packets
    copies = []
    for p in pkts:
        c = p.copy()
        c.time = p.time + Decimal("0.000001")
        copies += [p, c]
    path = write_pcap(tmp_path / "twice.pcap", copies)
    human = run(str(path))
    assert human.returncode == 0, human.stderr
    assert f"duplicate captures {len(pkts)} (counted once)" in human.stdout
    assert f"warning: {path}: {len(pkts)} frames are second copies" in human.stdout
    doc = json.loads(run("--json", str(path)).stdout)
    (w,) = doc["warnings"]
    assert w["offset"] is None and doc["flows"][0]["duplicate_captures"] == len(pkts)
