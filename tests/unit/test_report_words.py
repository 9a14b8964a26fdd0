"""The report a researcher reads first: human units, a result section per workload in words,
no plot of one point, fidelity as columns, events on time axes; and a real browser renders
it (chromium headless screenshot, when chromium is installed: scripts/setup.sh installs it)."""

import json
import shutil
import subprocess
import tempfile

import pandas as pd
import pytest

from analysis.report.narrative import workload_sections
from analysis.report.units import bits, by_key, duration, size


def test_human_units():
    assert bits(3.94451e7) == "39.4 Mbit/s" and bits(1e9) == "1 Gbit/s"
    assert duration(0.0123) == "12.3 ms" and duration(2.24) == "2.24 s"
    assert duration(45e-6) == "45 us" and size(25 << 20) == "25 MiB"
    assert by_key("goodput_bps", 3.94451e7) == "39.4 Mbit/s"
    assert by_key("algbw_Bps_mean", 3.308e6) == "3.31 MB/s"
    assert by_key("cct_s_p99", 0.164) == "164 ms"
    assert by_key("incast_loss_ratio", 0.02) == "2%"
    assert by_key("flows", 139) == "139" and by_key("ttft_s_p50", None) == "—"


def test_numbers_without_a_unit_get_three_significant_digits():
    """The report's plain-number filter (ratios, counts): 1.04971 was printed as is."""
    from analysis.report import _fmt

    assert _fmt(1.04971) == "1.05" and _fmt(0.0220519) == "0.0221" and _fmt(3) == "3"
    assert _fmt(None) == "—" and _fmt(1234567.0) == "1234567"


class _Tables:
    def __init__(self, **frames):
        self.frames, self.dci = frames, {"iterations": [
            {"workload_index": 0, "iteration": 0, "iteration_time_s": 2.0,
             "collectives_crossing": 1, "dci_collective_time_s": 0.5}]}

    def table(self, name):
        return self.frames.get(name, pd.DataFrame())


def _metrics():
    return {"cct": {"iterations": [{"workload_index": 0, "iteration": 0,
                                    "iteration_time_s": 2.0, "compute_s": 0.5,
                                    "comm_exposed_s": 1.5, "compute_share": 0.25}]},
            "attribution": {"per_iteration": []},
            "incast": {"loss_ratio": 0.0, "per_burst": [
                {"workload_index": 1, "burst_id": "b0.0", "senders": 3, "goodput_bps": 9e8,
                 "bottleneck": "s1:eth0"}]}}


def test_sections_state_results_in_words():
    flows = pd.DataFrame([
        {"workload_index": 1, "burst_id": "b0.0", "src_node": "tx2", "src_rank": 2,
         "t_start": 10.0, "t_end": 10.03, "tcp_total_retrans": 4, "dst_node": "rx"},
        {"workload_index": 1, "burst_id": "b0.0", "src_node": "tx1", "src_rank": 1,
         "t_start": 10.0, "t_end": 10.01, "tcp_total_retrans": 0, "dst_node": "rx"},
        # started late and finished last, but quickly: not the slowest flow
        {"workload_index": 1, "burst_id": "b0.0", "src_node": "tx3", "src_rank": 3,
         "t_start": 10.03, "t_end": 10.035, "tcp_total_retrans": 0, "dst_node": "rx"}])
    requests = pd.DataFrame({"workload_index": [2] * 4, "ttft_s": [0.1, 0.1, 0.1, 0.5]})
    manifest = {"workloads": [{"index": 0, "name": "train"}, {"index": 1, "name": "incast"},
                              {"index": 2, "name": "serve"}]}
    secs = workload_sections(manifest, _metrics(), _Tables(flows=flows, requests=requests))
    text = [" ".join(s["sentences"]) for s in secs]
    assert "iteration time 2 s" in text[0] and "exposed communication 1.5 s" in text[0]
    assert "25% of the iteration time" in text[0]  # DCI share 0.5 s of 2 s
    assert "goodput 900 Mbit/s" in text[1]
    assert ("Slowest flow: tx2 (rank 2), FCT 30 ms, done 30 ms after its burst began, "
            "4 retransmission") in text[1]
    assert "time to first token 100 ms p50" in text[2] and "488 ms p99" in text[2]


def test_report_html_and_browser(tmp_path):
    """A small synthetic run analysed end to end: the report has the sections, no CCT plot
    of a single point, fidelity columns; chromium renders a non-empty screenshot."""
    from analysis.run import analyze_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps(
        {"run_id": "r", "experiment": "e", "status": "ok",
         "workloads": [{"index": 0, "name": "ring", "ok": True}]}))
    rows = [{"collective_id": "c0.0", "op": "all_reduce", "group_kind": "dp",
             "iteration": 0, "cct_s": 0.02, "size_bytes": 1000, "ranks": [0, 1],
             "algbw_Bps": 5e4, "busbw_Bps": 5e4, "workload_index": 0,
             "rank_t_start": [0.0, 0.0], "rank_t_end": [0.02, 0.02]}]
    (run / "collectives.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "fidelity.json").write_text(json.dumps({"trustworthy": True, "reasons": [], "links": [
        {"link": "a-b", "node": "a", "ifname": "eth0", "direction": "a->b",
         "configured": {"rate_bps": 1e9, "delay_s": 0.01, "loss_pct": 0.0},
         "measured": {"rate_bps": 9.5e8, "rtt_s": 0.0203, "loss_pct": 0.0},
         "checks": {"rate": "ok", "rtt": "ok", "loss": "ok"}, "ok": True}],
        "cpu": {"busy_pct_mean": 40.0, "busy_pct_p95": 60.0, "saturated": False}}))
    analyze_run(run)
    html = (run / "report.html").read_text()
    assert 'id="results"' in html and "1. ring" not in html and "0. ring" in html
    assert html.index('id="results"') < html.index('id="summary"')
    assert 'id="plot-cct-per-iteration-absent"' in html  # one point: no plot
    assert "<td class=\"num\">1 Gbit/s</td><td class=\"num\">10 ms</td>" in html
    assert "{&#34;" not in html and '{"' not in html.split("<body>")[1]  # no JSON dumps
    if shutil.which("chromium") is None:
        pytest.skip("chromium not installed (scripts/setup.sh installs it)")
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                        f"--screenshot={shot}", "--window-size=1200,1600",
                        f"file://{run / 'report.html'}"], capture_output=True, timeout=120,
                       check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
