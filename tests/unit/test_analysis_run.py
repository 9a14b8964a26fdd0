"""analyze_run on a constructed run directory whose right answers are known by hand: counter
samples laid out as the sampler writes them (models/counter_columns.py), records as the
runner merges them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import topologies
from analysis import analyze_run
from analysis.metrics import SUMMARY_KEYS
from analysis.report import PLOTS
from models.errors import SpecError
from models.plan import plan_to_dict

ROOT = Path(__file__).resolve().parents[2]
STEP_S = 0.005  # sampling interval of the synthetic counters
TICKS = range(19980, 20241)  # samples at k * STEP_S: 99.9 s .. 101.2 s


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _qdisc_rows() -> list[dict]:
    """s1:rx root htb: 4 drops of 100 offered in burst 0, 50 of 1050 between the bursts,
    6 of 200 in burst 1; the pfifo child repeats the counts and the netem delay line has
    its own drops: neither may be counted."""
    rows = []
    for k in TICKS:
        t = k * STEP_S
        drops = 4 * (t >= 100.005) + 50 * (t >= 100.5) + 6 * (t >= 101.005)
        sent = 96 * (t >= 100.005) + 1000 * (t >= 100.5) + 194 * (t >= 101.005)
        base = {"t_s": t, "node": "s1", "ifname": "rx", "bytes": sent * 1500,
                "packets": sent, "drops": drops, "overlimits": 0, "requeues": 0,
                "backlog_bytes": 3000 * (100.005 <= t < 100.01), "backlog_packets": 0}
        rows.append({**base, "kind": "htb", "handle": "1:", "parent": "root"})
        rows.append({**base, "kind": "pfifo", "handle": "10:", "parent": "1:1"})
        rows.append({**base, "kind": "netem", "handle": "1:", "parent": "root",
                     "ifname": "ifb-rx", "drops": 7 * k})
    return rows


def _link_rows() -> list[dict]:
    """s1:rx sends 250 Mbit/s throughout; tx1:eth0 1 Gbit/s for 10 ms, idle for 10 ms."""
    rows, tx1 = [], 0
    for i, k in enumerate(TICKS):
        if i and ((i - 1) // 2) % 2 == 0:
            tx1 += 625_000  # 5 ms at 1 Gbit/s
        for node, ifname, tx in (("s1", "rx", 156_250 * i), ("tx1", "eth0", tx1)):
            rows.append({"t_s": k * STEP_S, "node": node, "ifname": ifname, "rx_bytes": 0,
                         "tx_bytes": tx, "rx_packets": 0, "tx_packets": 0, "rx_dropped": 0,
                         "tx_dropped": 0})
    return rows


def _flows() -> list[dict]:
    plan = topologies.load_topology(ROOT / "topologies/examples/incast.yaml")
    out = []
    for b, t0 in enumerate((100.0, 101.0)):
        for i in (1, 2, 3):
            out.append({"record": "flow", "kind": "tcp", "src_node": f"tx{i}", "dst_node": "rx",
                        "src_rank": i, "dst_rank": 0, "src_ip": str(plan.address_of(f"tx{i}")),
                        "dst_ip": str(plan.address_of("rx")), "sport": 1000 + i, "dport": 5000,
                        "size_bytes": 100_000, "t_start": t0, "t_first_byte": t0 + 0.001,
                        "t_end": t0 + 0.010 + 0.001 * (i - 1), "fct_s": 0.010 + 0.001 * (i - 1),
                        "iteration": 0, "op_index": b, "step": "flow", "collective_id": None,
                        "burst_id": f"b0.{b}", "tcp": {"total_retrans": i - 1, "dsack_dups": 0},
                        "udp": None, "workload": "incast", "workload_index": 0})
    return out


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "synthetic" / "run-1"
    d.mkdir(parents=True)
    plan = topologies.load_topology(ROOT / "topologies/examples/incast.yaml")
    (d / "plan.json").write_text(json.dumps(plan_to_dict(plan)))
    (d / "manifest.json").write_text(json.dumps({"run_id": "run-1", "experiment": "synthetic",
                                                 "status": "ok", "workloads": []}))
    _jsonl(d / "flows.jsonl", _flows())
    _jsonl(d / "bursts.jsonl", [
        {"record": "burst", "burst_id": f"b0.{b}", "planned_start": t0, "sender_ranks": [1, 2, 3],
         "actual_start": [t0] * 3, "iteration": 0, "workload_index": 0}
        for b, t0 in enumerate((100.0, 101.0))])
    _jsonl(d / "collectives.jsonl", [
        {"record": "collective", "collective_id": "c0.1", "op": "all_reduce", "ranks": [0, 1, 2],
         "hosts": ["rx", "tx1", "tx2"], "size_bytes": 1000, "iteration": 0,
         "rank_t_start": [100.0, 100.0, 100.01], "rank_t_end": [100.03, 100.03, 100.03],
         "cct_s": 0.03, "algbw_Bps": 1000 / 0.03, "busbw_Bps": 1000 / 0.03 * 4 / 3,
         "workload": "ar", "workload_index": 1}])
    _jsonl(d / "timeline.jsonl", [
        {"record": "rank_op", "rank": r, "node": "rx", "iteration": 0, "op_index": 0,
         "kind": "collective", "label": "all_reduce", "t_start": 100.0 + 0.01 * (r == 2),
         "t_end": 100.03, "slowdown": 1.0, "workload_index": 1} for r in range(3)])
    (d / "counters").mkdir()
    pd.DataFrame(_qdisc_rows()).to_parquet(d / "counters/qdisc.parquet")
    pd.DataFrame(_link_rows()).to_parquet(d / "counters/links.parquet")
    (d / "fidelity.json").write_text(json.dumps({"links": [], "cpu": {}, "trustworthy": False,
                                                 "reasons": ["tx1-s1: rate 60% of configured"]}))
    return d


def test_incast_loss_and_queue_drops_from_synthetic_counters(run_dir):
    m = analyze_run(run_dir)
    inc = m["incast"]
    assert [b["loss"] for b in inc["per_burst"]] == pytest.approx([4 / 100, 6 / 200])
    assert inc["loss_ratio"] == pytest.approx(10 / 300) and inc["source"] == "counters"
    assert {b["bottleneck"] for b in inc["per_burst"]} == {"s1:rx"}
    # 3 x 100 kB in 12 ms per burst
    assert inc["goodput_vs_senders"] == [{"senders": 3, "bursts": 2,
                                          "goodput_bps_mean": pytest.approx(300_000 * 8 / 0.012)}]
    assert m["summary"]["queue_drops"] == 60  # 4 + 50 + 6 at the root htb only
    assert m["summary"]["incast_loss_ratio"] == pytest.approx(10 / 300)
    assert m["summary"]["retransmissions"] == 2 * (0 + 1 + 2)


def test_utilization_and_burstiness_from_synthetic_counters(run_dir):
    links = analyze_run(run_dir)["utilization"]["links"]
    assert links["s1:rx"]["utilization"] == pytest.approx(0.25)
    assert links["s1:rx"]["peak_to_mean"] == pytest.approx(1.0)
    tx1 = links["tx1:eth0"]
    assert tx1["utilization"] == pytest.approx(0.5)
    # one 5 ms interval saw the line rate; the peak is over windows of 5 intervals (25 ms),
    # at best 10 ms on + 10 off + 5 on: 15/25 of 1 Gbit/s
    assert tx1["peak_bps_interval"] == pytest.approx(1e9)
    assert tx1["peak_bps"] == pytest.approx(0.6e9) and tx1["peak_to_mean"] == pytest.approx(1.2)
    assert tx1["on_s_mean"] == pytest.approx(0.010) and tx1["off_s_mean"] == pytest.approx(0.010)


def test_metrics_json_follows_the_contract_and_is_rewritten_identically(run_dir):
    m = analyze_run(run_dir)
    first = (run_dir / "metrics.json").read_text()
    assert json.loads(first) == m
    assert list(m["summary"]) == list(SUMMARY_KEYS)
    assert m["trustworthy"] is False and m["fidelity"]["reasons"]
    assert m["summary"]["collectives"] == 1 and m["summary"]["cct_s_mean"] == 0.03
    assert m["summary"]["rounds"] is None and m["summary"]["ttft_s_p50"] is None
    analyze_run(run_dir)  # re-runnable, same answer
    assert (run_dir / "metrics.json").read_text() == first
    assert len(pd.read_parquet(run_dir / "tables/flows.parquet")) == 6
    assert len(pd.read_parquet(run_dir / "tables/counters_qdisc.parquet")) == 3 * len(TICKS)
    row = pd.read_parquet(run_dir / "tables/metrics.parquet")
    assert len(row) == 1 and row["queue_drops"].iloc[0] == 60


def test_report_has_every_figure_and_flags_the_untrustworthy_run(run_dir):
    analyze_run(run_dir)
    html = (run_dir / "report.html").read_text()
    for key in PLOTS:
        if key == "cct-per-iteration":  # one collective: no plot of one point, words instead
            assert 'id="plot-cct-per-iteration-absent"' in html
            continue
        if key == "event-impact":  # no events: timeline in this run (test_event_impact.py)
            assert 'id="plot-event-impact-absent"' in html
            continue
        # the alt text may go on with what the figure marks (the lab picture's marks)
        assert re.search(f'id="plot-{key}" alt="{key}(; [^"]*)?" src="data:image/png;base64,',
                         html), key
    assert 'id="untrustworthy"' in html and "rate 60% of configured" in html
    assert "http://" not in html and "https://" not in html  # self-contained


def test_without_counters_the_sections_say_so(run_dir):
    shutil.rmtree(run_dir / "counters")
    m = analyze_run(run_dir)
    assert m["summary"]["queue_drops"] is None and m["summary"]["incast_loss_ratio"] is None
    html = (run_dir / "report.html").read_text()
    assert 'id="plot-queue-occupancy-absent"' in html
    assert 'id="plot-link-throughput-absent"' in html
    assert 'id="plot-fct-cdf"' in html  # the records' figures are still there


def test_a_run_with_nothing_but_a_manifest(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "x", "experiment": "e"}))
    m = analyze_run(tmp_path)
    assert set(m["summary"].values()) == {None} and m["trustworthy"] is None
    assert (tmp_path / "report.html").exists()


def test_not_a_run_directory_is_a_clear_error(tmp_path):
    with pytest.raises(SpecError, match="not a run directory"):
        analyze_run(tmp_path)
    with pytest.raises(SpecError, match="no such run directory"):
        analyze_run(tmp_path / "missing")
    assert list(tmp_path.iterdir()) == []  # nothing written
    out = subprocess.run([sys.executable, "-m", "orchestration.cli",
     "analyze", str(tmp_path / "nope")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "no such run directory" in out.stderr
    assert "Traceback" not in out.stderr
    # with --json, stdout carries the same error as one JSON object (scripts parse stdout)
    for argv in (["analyze", str(tmp_path / "nope")], ["pcap", str(tmp_path / "no.pcap")]):
        out = subprocess.run([sys.executable, "-m", "orchestration.cli",
     *argv, "--json"],
                             capture_output=True, text=True, cwd=ROOT)
        doc = json.loads(out.stdout)
        assert out.returncode == 2 and doc["ok"] is False and doc["exit_code"] == 2, argv
        assert doc["issues"][0]["file"] == argv[1] and "Traceback" not in out.stderr


def test_capture_retransmissions_count_each_connection_once(tmp_path):
    """The same connection captured on two interfaces counts once; the counts are the
    capture analysis' own (golden-tested against tshark in test_pcap_golden)."""
    (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "x", "experiment": "e"}))
    (tmp_path / "captures").mkdir()
    pcap = ROOT / "tests/data/pcaps/tcp_fastretx_sack.pcap"
    for name in ("h1__eth0.pcap", "s1__eth0.pcap0"):
        shutil.copy(pcap, tmp_path / "captures" / name)
    m = analyze_run(tmp_path)
    caps = m["retransmissions"]["captures"]
    assert (caps["files"], caps["connections"]) == (2, 1)
    assert (caps["retransmissions"], caps["fast_retransmissions"],
            caps["rto_retransmissions"]) == (3, 1, 2)
    assert m["summary"]["retransmissions"] == 3  # no flow records: the captures' count


def test_dci_collective_time_counts_only_collectives_across_sites(tmp_path):
    """Only collectives whose flows take a DCI link count (paths from the plan's routes), and
    their time is the union of their intervals per iteration (analysis.dci)."""
    plan = topologies.load_topology(ROOT / "topologies/examples/two_dc.yaml")
    (tmp_path / "plan.json").write_text(json.dumps(plan_to_dict(plan)))
    (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "x", "experiment": "e"}))
    hosts = {"across": ["dc1-l1-h1", "dc2-l1-h1"], "inside": ["dc1-l1-h1", "dc1-l2-h1"]}
    runs = [("across", 0.5), ("inside", 0.25), ("across", 1.0)]
    _jsonl(tmp_path / "collectives.jsonl", [
        {"collective_id": f"c{i}", "op": "all_reduce", "group": "world", "group_kind": "dp",
         "ranks": [0, 1], "hosts": hosts[kind], "size_bytes": 10, "iteration": i,
         "rank_t_start": [10.0 * i, 10.0 * i], "rank_t_end": [10.0 * i + cct, 10.0 * i + cct],
         "cct_s": cct, "algbw_Bps": 10 / cct, "busbw_Bps": 10 / cct, "workload": kind}
        for i, (kind, cct) in enumerate(runs)])
    _jsonl(tmp_path / "flows.jsonl", [
        {"collective_id": f"c{i}", "src_node": hosts[kind][0], "dst_node": hosts[kind][1],
         "src_ip": str(plan.address_of(hosts[kind][0])),
         "dst_ip": str(plan.address_of(hosts[kind][1])), "size_bytes": 10, "iteration": i,
         "t_start": 10.0 * i, "t_end": 10.0 * i + cct, "fct_s": cct, "kind": "tcp"}
        for i, (kind, cct) in enumerate(runs)])
    m = analyze_run(tmp_path)
    assert m["dci"]["dci_links"] >= 1 and m["dci"]["collectives_crossing"] == 2
    assert m["summary"]["dci_collective_time_s"] == pytest.approx(1.5)
    (row,) = m["dci"]["by_op_group"]
    assert (row["op"], row["instances"], row["bytes_crossing"]) == ("all_reduce", 2, 20)
    assert (tmp_path / "dci.json").exists()


def test_runner_records_an_analysis_failure_and_keeps_the_run(tmp_path):
    """aitb run's last step: a directory analysis cannot read (here: a plan.json that is no
    plan; the runner writes the manifest, marked unfinished, before the analysis begins)
    gives a failed ``analysis`` entry in the manifest, not an exception."""
    from orchestration.run.runner import RunOutcome, _analyze

    (tmp_path / "plan.json").write_text(json.dumps({"nodes": 5}))
    outcome, manifest, said = RunOutcome(tmp_path, ok=True), {"status": "ok"}, []
    _analyze(tmp_path, manifest, outcome, said.append)
    assert outcome.report is None and "cannot read the plan" in outcome.analysis_error
    written = json.loads((tmp_path / "manifest.json").read_text())
    assert written["status"] == "ok" and written["analysis"]["ok"] is False
    assert "cannot read the plan" in written["analysis"]["error"] and said == ["analysing"]


def test_runner_marks_its_analysis_unfinished_on_disk_while_it_runs(tmp_path, monkeypatch):
    """A process SIGKILLed inside its analysis cannot write: the manifest on disk already
    says the analysis began and has not ended (ok null, with the pid running it)."""
    import os

    import analysis
    from orchestration.run.runner import RunOutcome, _analyze

    seen = {}

    def analyze_run(run_dir):
        seen.update(json.loads((run_dir / "manifest.json").read_text()))

    monkeypatch.setattr(analysis, "analyze_run", analyze_run)
    manifest = {"status": "ok"}
    _analyze(tmp_path, manifest, RunOutcome(tmp_path, ok=True), lambda _m: None)
    assert seen["analysis"]["ok"] is None and seen["analysis"]["running"]["pid"] == os.getpid()
    assert json.loads((tmp_path / "manifest.json").read_text())["analysis"]["ok"] is True


def test_the_reports_dci_result_and_dci_section_say_the_same_numbers_in_units(tmp_path):
    """The training's result and the DCI section give one DCI time over one iteration time
    (1.5 s of 1.75 s): an incast's iterations (workload 1, no collectives) used to be in the
    section's denominator (1.5 s / 3.75 s = 40% beside the result's 85.7%), printed as bare
    numbers (1.5 s, 0.4)."""
    plan = topologies.load_topology(ROOT / "topologies/examples/two_dc.yaml")
    (tmp_path / "plan.json").write_text(json.dumps(plan_to_dict(plan)))
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"run_id": "x", "experiment": "e", "status": "ok",
         "workloads": [{"index": 0, "name": "train", "ok": True},
                       {"index": 1, "name": "incast", "ok": True}]}))
    hosts = {"across": ["dc1-l1-h1", "dc2-l1-h1"], "inside": ["dc1-l1-h1", "dc1-l2-h1"]}
    runs = [("across", 0.5), ("inside", 0.25), ("across", 1.0)]
    _jsonl(tmp_path / "collectives.jsonl", [
        {"collective_id": f"c{i}", "op": "all_reduce", "group": "world", "group_kind": "dp",
         "ranks": [0, 1], "hosts": hosts[kind], "size_bytes": 4096, "iteration": i,
         "rank_t_start": [10.0 * i, 10.0 * i], "rank_t_end": [10.0 * i + cct, 10.0 * i + cct],
         "cct_s": cct, "algbw_Bps": 10 / cct, "busbw_Bps": 10 / cct, "workload_index": 0}
        for i, (kind, cct) in enumerate(runs)])
    _jsonl(tmp_path / "flows.jsonl", [
        {"collective_id": f"c{i}", "src_node": hosts[kind][0], "dst_node": hosts[kind][1],
         "src_ip": str(plan.address_of(hosts[kind][0])), "workload_index": 0,
         "dst_ip": str(plan.address_of(hosts[kind][1])), "size_bytes": 4096, "iteration": i,
         "t_start": 10.0 * i, "t_end": 10.0 * i + cct, "fct_s": cct, "kind": "tcp"}
        for i, (kind, cct) in enumerate(runs)])
    _jsonl(tmp_path / "timeline.jsonl", [
        {"workload_index": 0, "iteration": i, "rank": r, "op_index": 0, "kind": "collective",
         "t_start": 10.0 * i, "t_end": 10.0 * i + cct} for i, (_, cct) in enumerate(runs)
        for r in (0, 1)] + [
        {"workload_index": 1, "iteration": 0, "rank": 0, "op_index": 0, "kind": "burst",
         "t_start": 40.0, "t_end": 42.0}])
    m = analyze_run(tmp_path)
    assert m["dci"]["share"] == pytest.approx(1.5 / 1.75)
    html = (tmp_path / "report.html").read_text()
    said = "1.5 s of 1.75 s (85.7% of the iteration time)"
    result = html[html.index('id="workload-0"'):html.index('id="workload-1"')]
    section = html[html.index('id="dci"'):]
    section = section[:section.index("</table>")]
    assert said in result and said in section, section
    assert "1 DCI link(s)" in section
    assert "4 KiB" in section and "750 ms" in section  # size and CCT mean in units


def test_a_passed_verdict_names_the_checks_that_did_not_run_and_sizes_name_their_scale(
        run_dir):
    """An incast run whose every rate check found no standing backlog: the report passes
    only the RTT and loss it checked and names the rate as not exercised; a scaled run's
    metrics.json and report say that sizes are the experiment's divided by the factor."""
    entry = {"link": "tx1-s1", "node": "tx1", "ifname": "eth0", "direction": "a->b",
             "configured": {}, "measured": {}, "delay_line": None, "ok": True,
             "checks": {"rate": "not_exercised", "rtt": "ok", "loss": "ok"}}
    (run_dir / "fidelity.json").write_text(json.dumps({
        "links": [entry, {**entry, "link": "tx2-s1"}], "cpu": {"saturated": False},
        "trustworthy": True, "reasons": []}))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "scale": 10}))
    m = analyze_run(run_dir)
    html = (run_dir / "report.html").read_text()
    assert "Fidelity checks passed:" not in html
    assert "passed where they ran:\nRTT on 2 of 2 shaped directions, loss on 2 of 2" in html
    assert "rate on 2 directions (tx1-s1 a-&gt;b, tx2-s1 a-&gt;b)" in html
    assert m["scale"] == {"factor": 10, "sizes": "emulated: the experiment's sizes and rates "
                          "divided by 10 (delays and times are not scaled)"}
    assert 'id="scaled"' in html and "divided by 10" in html
    unscaled = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**unscaled, "scale": 1}))
    assert analyze_run(run_dir)["scale"] == {"factor": 1, "sizes": "not scaled"}
    assert 'id="scaled"' not in (run_dir / "report.html").read_text()


def test_records_of_a_scaled_run_say_their_scale(tmp_path):
    """rounds.jsonl gave 24 MB for a 240 MB model at scale 10 without a word: merged records
    of a scaled run carry the factor; an unscaled run's records are as before."""
    from orchestration.run.runner import merge_records

    part = tmp_path / "workloads" / "0-fl"
    part.mkdir(parents=True)
    _jsonl(part / "rounds.jsonl", [{"record": "round", "round": 0, "model_bytes": 24_000_000}])
    merge_records(tmp_path, 10)
    (rec,) = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert rec == {"record": "round", "round": 0, "model_bytes": 24_000_000, "workload": "fl",
                   "workload_index": 0, "scale": 10}
    merge_records(tmp_path, 1)
    (rec,) = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert "scale" not in rec
