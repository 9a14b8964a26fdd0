"""Per-event impact (analysis.metrics.events) on synthetic records whose answers are known by
hand: event windows, hit sets, delivered bytes, time to recover, inflation, the edge cases
(an event with no flows, goodput that never comes back, an event before any traffic), and
the report: the table and the event marks on the time axes (chromium renders it)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest

import topologies
from analysis.metrics.events import (
    delivered,
    event_impact,
    event_windows,
    inflation,
    recovery,
)
from models.plan import plan_to_dict

ROOT = Path(__file__).resolve().parents[2]
T0 = 1000.0  # the run's t0 (host clock, s): events.jsonl times count from it


def _ev(event, kind, op, began, applied, step=0, **kw):
    return {"event": event, "kind": kind, "op": op, "step": step, "planned_t_s": began,
            "began_t_s": began, "applied_t_s": applied, **kw}


def _stream(t_from, t_to, rate_Bps=1e6, piece_s=0.001):  # noqa: N803
    """Back-to-back flows delivering ``rate_Bps`` evenly over [t_from, t_to]."""
    n = round((t_to - t_from) / piece_s)
    size = rate_Bps * piece_s
    return [{"t_start": t_from + k * piece_s, "t_first_byte": t_from + k * piece_s,
             "t_end": t_from + (k + 1) * piece_s, "size_bytes": size, "src_node": "tx1",
             "dst_node": "rx", "src_rank": 1, "dst_rank": 0, "src_ip": "10.0.0.2",
             "dst_ip": "10.0.0.1", "sport": 1000, "dport": 5000, "workload": "w",
             "workload_index": 0}
            for k in range(n)]


def test_windows_pair_downs_with_their_ups_and_shapes_with_their_restores():
    recs = [
        _ev(0, "link_down", "down", 1.0, 1.002, links=["a"]),
        _ev(1, "flap", "down", 2.0, 2.001, links=["b"]),
        _ev(1, "flap", "up", 2.2, 2.203, step=1, links=["b"]),
        _ev(2, "link_up", "up", 3.0, 3.005, links=["a"]),
        _ev(3, "degrade", "shape", 4.0, 4.001, directions=["c a_to_b"], restore=False),
        _ev(3, "degrade", "shape", 4.5, 4.502, step=1, directions=["c a_to_b"], restore=True),
        _ev(4, "degrade", "shape", 5.0, 5.001, directions=["c b_to_a"], restore=False),
        {"event": 5, "kind": "node_down", "op": "down", "step": 0, "node": "h3",
         "links": ["h3-s1"], "planned_t_s": None, "not_reached": True},
        {**_ev(6, "link_down", "down", 6.0, 6.1, links=["a"]), "error": "no such link"},
    ]
    w = {r["event"]: r for r in event_windows(recs, T0)}
    assert (w[0]["start"], w[0]["end"]) == (T0 + 1.0, T0 + 3.005)  # down until the up
    assert (w[1]["start"], w[1]["end"]) == (T0 + 2.0, T0 + 2.203)  # its own last up
    assert (w[2]["start"], w[2]["end"]) == (T0 + 3.0, T0 + 3.005)  # an instant
    assert (w[3]["start"], w[3]["end"]) == (T0 + 4.0, T0 + 4.502)  # until the restore
    assert w[4]["end"] is None  # never restored: until the end of the run
    assert w[5]["state"] == "not reached" and w[5]["start"] is None
    assert w[5]["target"] == "node h3"
    assert w[6]["state"] == "failed" and w[6]["start"] is None
    assert w[3]["target"] == "c a_to_b" and w[3]["links"] == {"c"}


def test_delivered_bytes_spread_evenly_over_each_flow():
    flows = pd.DataFrame([
        {"t_start": 0.0, "t_first_byte": 1.0, "t_end": 3.0, "size_bytes": 2000},  # 1000 B/s
        {"t_start": 2.0, "t_first_byte": None, "t_end": 2.0, "size_bytes": 500},  # a step
        {"t_start": 1.0, "t_first_byte": 1.0, "t_end": None, "size_bytes": 9999},  # unfinished
        {"t_start": 0.0, "t_first_byte": 0.0, "t_end": 1.0, "size_bytes": 7777,
         "background": True}])
    assert list(delivered(flows, [0.5, 1.5, 2.0, 2.5, 9.0])) == pytest.approx(
        [0, 500, 1500, 2000, 2500])


def test_recovery_time_is_when_goodput_is_back_to_ninety_percent():
    # 1 MB/s until the event at 10 s, nothing for 455 ms, then 1 MB/s again until 20 s;
    # windows of 100 ms stepped by 10 ms: G(t) >= 0.9 MB/s once t + 0.1 - 10.455 >= 0.09
    flows = pd.DataFrame(_stream(0.0, 10.0) + _stream(10.455, 20.0))
    r = recovery(flows, 10.0, 0.0, 0.1)
    assert r["baseline_goodput_bps"] == pytest.approx(8e6)
    assert r["recovered"] is True and r["recovery_s"] == pytest.approx(0.45)
    assert r["min_goodput_bps"] == pytest.approx(0.0)
    # an event that changed nothing: recovered at once
    r = recovery(pd.DataFrame(_stream(0.0, 20.0)), 10.0, 0.0, 0.1)
    assert r["recovered"] is True and r["recovery_s"] == 0.0
    assert r["recovery_note"] == "never fell below the threshold"


def test_goodput_that_never_comes_back_is_not_recovered_and_no_number_is_made_up():
    flows = pd.DataFrame(_stream(0.0, 10.0) + _stream(10.0, 20.0, rate_Bps=0.5e6))
    r = recovery(flows, 10.0, 0.0, 0.1)
    assert r["recovered"] is False and r["recovery_s"] is None
    assert r["min_goodput_bps"] == pytest.approx(4e6)
    assert "stayed below 90%" in r["recovery_note"]
    # no traffic before the event: no baseline, nothing measured
    r = recovery(pd.DataFrame(_stream(10.0, 20.0)), 5.0, 0.0, 0.1)
    assert r["recovered"] is None and r["recovery_s"] is None
    assert r["baseline_goodput_bps"] is None and "no baseline" in r["recovery_note"]


def test_inflation_of_the_hit_iterations_over_the_median_before():
    times = pd.DataFrame({"iteration": range(6), "t_start": [0, 1, 2, 3, 6, 7],
                          "t_end": [1, 2, 3, 6, 7, 8], "time_s": [1.0, 1.0, 1.2, 3.0, 1.0, 1.0]})
    r = inflation(times, 3.5, 3.6)
    assert r["iterations_hit"] == [3] and r["iteration_time_before_s"] == 1.0
    assert r["iteration_inflation_first"] == 3.0 and r["iteration_worst"] == 3
    r = inflation(times, 2.5, None)  # open window: everything from iteration 2 on
    assert r["iterations_hit"] == [2, 3, 4, 5] and r["iteration_inflation_first"] == 1.2
    assert r["iteration_inflation_max"] == 3.0
    assert inflation(times, 0.5, 0.6)["iteration_time_before_s"] is None  # none before


def _plan():
    return topologies.load_topology(ROOT / "topologies/examples/incast.yaml")


def test_impact_table_hit_sets_and_the_flows_on_the_affected_link():
    plan = _plan()
    rx = str(plan.address_of("rx"))
    link = next(lk.name for lk in plan.links_of("tx1"))
    base = [dict(f, dst_ip=rx) for f in _stream(T0, T0 + 2.0, piece_s=0.01)]
    other = [dict(f, src_node="tx2", dst_ip=rx) for f in _stream(T0 + 1.0, T0 + 1.2, 1e5, 0.1)]
    flows = pd.DataFrame(base + other + [{  # an unfinished flow from before: still running
        "t_start": T0 + 0.1, "t_first_byte": None, "t_end": None, "size_bytes": 10,
        "src_node": "tx2", "dst_ip": rx, "workload": "w", "workload_index": 0}])
    colls = pd.DataFrame([{"collective_id": f"c{i}.0", "workload_index": 0, "iteration": i,
                           "rank_t_start": [T0 + 0.5 * i], "rank_t_end": [T0 + 0.5 * i + 0.4]}
                          for i in range(4)])
    windows = event_windows([_ev(0, "link_down", "down", 1.055, 1.056, links=[link]),
                             _ev(1, "link_up", "up", 1.15, 1.165, links=[link]),
                             _ev(2, "link_down", "down", 30.0, 30.1, links=[link])], T0)
    t = event_impact(windows, flows, colls, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                     plan, {0: "w"}, T0)
    down = t[t["event"] == 0].iloc[0]
    # window [1.055, 1.165]: 12 of tx1's 10 ms pieces, tx2's two, the unfinished one
    assert down["flows_hit"] == 12 + 2 + 1 and down["workload"] == "w"
    assert down["flows_on_link"] == 12 and down["flows_maybe_on_link"] == 0  # tx1's only
    assert down["iterations_hit"] == [2] and down["collectives_hit"] == ["c2.0"]
    assert (down["start_s"], down["end_s"]) == pytest.approx((1.055, 1.165))
    late = t[t["event"] == 2].iloc[0]  # after all traffic but the unfinished flow
    assert late["flows_hit"] == 1 and late["iterations_hit"] == []


def test_an_event_with_no_flows_gives_a_row_with_nothing_hit():
    windows = event_windows([_ev(0, "link_down", "down", 1.0, 1.01, links=["x"])], T0)
    t = event_impact(windows, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                     pd.DataFrame(), None, {}, T0)
    (row,) = t.to_dict("records")
    assert row["flows_hit"] == 0 and row["workload"] is None and row["iterations_hit"] == []
    assert row["recovered"] is None and row["recovery_s"] is None
    assert row["recovery_note"] == "no flow was active during the event"


def _run_with_events(tmp_path: Path) -> Path:
    """A run of one ring-like workload: 1 MB/s in iterations of 100 ms, a link down at 1 s
    that stops all traffic for 300 ms, a link up at 3 s; the second half never recovers
    (half the goodput, iterations of 200 ms) after a degrade at 4 s that is never restored."""
    d = tmp_path / "run"
    d.mkdir()
    plan = _plan()
    rx = str(plan.address_of("rx"))
    link = next(lk.name for lk in plan.links_of("tx1"))
    (d / "plan.json").write_text(json.dumps(plan_to_dict(plan)))
    (d / "manifest.json").write_text(json.dumps({
        "run_id": "r", "experiment": "e", "status": "ok",
        "workloads": [{"index": 0, "name": "ring", "ok": True}],
        "events": {"t0_unix_s": T0, "records": "events.jsonl", "actions": 3}}))
    def iteration(t: float) -> int:  # 100 ms per iteration; 200 ms at half rate after 4 s
        s = t - T0
        return int(s * 10 + 1e-6) if s < 4.0 - 1e-9 else 40 + int((s - 4.0) * 5 + 1e-6)

    flows = [dict(f, dst_ip=rx, workload="ring", record="flow", kind="tcp",
                  iteration=iteration(f["t_start"]))
             for f in _stream(T0, T0 + 1.0, piece_s=0.01) + _stream(T0 + 1.3, T0 + 4.0,
                                                                     piece_s=0.01)
             + _stream(T0 + 4.0, T0 + 6.0, rate_Bps=0.5e6, piece_s=0.01)]
    for f in flows:
        f["fct_s"] = f["t_end"] - f["t_start"]
    (d / "flows.jsonl").write_text("".join(json.dumps(f) + "\n" for f in flows))
    spans = {}
    for f in flows:
        lo, hi = spans.get(f["iteration"], (f["t_start"], f["t_end"]))
        spans[f["iteration"]] = (min(lo, f["t_start"]), max(hi, f["t_end"]))
    spans[9] = (spans[9][0], T0 + 1.35)  # iteration 9 waited for the link
    (d / "timeline.jsonl").write_text("".join(json.dumps(
        {"rank": 0, "node": "tx1", "iteration": i, "op_index": 0, "kind": "collective",
         "label": "all_reduce", "t_start": lo, "t_end": hi, "workload_index": 0}) + "\n"
        for i, (lo, hi) in sorted(spans.items())))
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [
        _ev(0, "link_down", "down", 0.95, 0.96, links=[link], anchor=None),
        _ev(1, "link_up", "up", 3.0, 3.01, links=[link]),
        _ev(2, "degrade", "shape", 4.0, 4.001, directions=[f"{link} a_to_b"],
            restore=False)]))
    return d


def test_analysed_run_writes_the_table_the_summary_and_marks_events_in_the_report(tmp_path):
    from analysis.run import analyze_run

    d = _run_with_events(tmp_path)
    m = analyze_run(d)
    t = pd.read_parquet(d / "tables" / "events_impact.parquet")
    assert list(t["kind"]) == ["link_down", "link_up", "degrade"]
    down, up, deg = t.to_dict("records")
    # 0.95 s .. the up at 3.01 s; no traffic (so no iteration 10-12) from 1 s to 1.3 s
    assert list(down["iterations_hit"]) == [9, *range(13, 31)]
    # back to the pre-event pace (100 ms per iteration) with iteration 13, which starts at
    # 1.3 s, and stays there: 350 ms after 0.95 s; until then iteration 9 took 450 ms
    assert down["recovered"] and down["recovery_method"] == "pace"
    assert down["recovery_s"] == pytest.approx(0.35, abs=1e-6)
    assert down["slowdown_max"] == pytest.approx(4.5, abs=0.01)
    # the link-up is judged against the pace before the down, not during it
    assert up["iteration_time_before_s"] == pytest.approx(0.1, abs=1e-6) and up["recovered"]
    assert down["iteration_worst"] == 9 and down["iteration_inflation_max"] > 3
    assert deg["recovered"] is False and pd.isna(deg["recovery_s"])  # not made up
    assert m["summary"]["events"] == 3 and m["summary"]["events_not_recovered"] == 1
    assert m["summary"]["event_recovery_s_max"] == pytest.approx(down["recovery_s"])

    html = (d / "report.html").read_text()
    assert ("events[0] link_down (tx1-s1) at 0.950 s hit iterations 9, 13–30 and " in html
            and "back to its pre-event pace (100 ms per iteration) 350 ms later" in html)
    assert "the job did NOT get back to its pre-event pace (100 ms per iteration)" in html
    table = html[html.index('id="events-impact"'):]
    table = table[:table.index("</table>")]
    assert "link_down" in table and "NOT RECOVERED" in table and "9, 13–30" in table
    for key in ("link-throughput", "queue-occupancy", "rank-timeline", "event-impact"):
        if key in ("link-throughput", "queue-occupancy"):  # no counters in this run
            assert f'id="plot-{key}-absent"' in html
            continue
        tag = re.search(rf'<img id="plot-{key}"[^>]*>', html).group(0)
        marks = ("events[0] link_down at 0.950 s, events[1] link_up at 3.000 s, "
                 "events[2] degrade at 4.000 s")  # the table's start_s, on the same zero
        assert f"events marked: {marks}" in tag, tag
        png = base64.b64decode(re.search(r'base64,([^"]+)"', tag).group(1))
        assert marks.replace(", ", "; ").encode() in png  # tEXt
    _check_in_browser(d / "report.html")


def test_figures_and_the_events_table_share_one_time_zero(tmp_path):
    """Counter samples from 0.485 s before the events' t0 (the sampler starts first): the
    figures used to count from the first sample, so the link down the table puts at
    0.950 s was drawn at 1.435 s. Now every axis counts from the events' t0, as the table."""
    from analysis.run import analyze_run

    d = _run_with_events(tmp_path)
    (d / "counters").mkdir()
    ts = [T0 - 0.485 + 0.1 * i for i in range(60)]
    pd.DataFrame({"t_s": ts, "t_err_s": 0.0, "node": "tx1", "ifname": "eth0",
                  "rx_bytes": 0, "tx_bytes": [125_000 * i for i in range(60)],
                  "rx_packets": 0, "tx_packets": 0, "rx_dropped": 0, "tx_dropped": 0}
                 ).to_parquet(d / "counters" / "links.parquet")
    analyze_run(d)
    html = (d / "report.html").read_text()
    row = html[html.index('id="events-impact"'):].split("</tr>")[1]
    start = re.search(r'<td class="num">([\d.]+) – ', row).group(1)
    assert start == "0.950" and "link_down (tx1-s1) at 0.950 s" in html
    for key in ("link-throughput", "event-impact", "rank-timeline"):
        tag = re.search(rf'<img id="plot-{key}"[^>]*>', html).group(0)
        assert f"events[0] link_down at {start} s" in tag, (key, tag)
    assert "seconds\nsince t0: the start of the events: timeline" in html


def _check_in_browser(report: Path) -> None:
    """chromium's DOM of the report: the event table and the marked figures' alt texts."""
    if shutil.which("chromium") is None:
        pytest.skip("chromium not installed (scripts/setup.sh installs it)")
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                              "--disable-background-networking", "--disable-component-update",
                              "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                              "--dump-dom", f"file://{report}"], capture_output=True,
                             text=True, timeout=120, check=True)
    dom = out.stdout
    assert 'id="events-impact"' in dom and "link_down" in dom
    alts = re.findall(r'<img id="plot-([a-z-]+)" alt="([^"]*)"', dom)
    marked = {k for k, alt in alts if "events marked: events[0] link_down" in alt}
    assert {"event-impact", "rank-timeline"} <= marked, alts


def _pcap(path: Path, segments: list[tuple[float, str, int, str, int, int]]) -> None:
    """A classic pcap (raw IPv4, headers only) of TCP segments (time, src, sport, dst,
    dport, payload bytes)."""
    import ipaddress
    import struct

    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 96, 101)]
    for t, src, sport, dst, dport, payload in segments:
        tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 5 << 4, 0x18, 65535, 0, 0)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + payload, 0, 0x4000, 64, 6, 0,
                         ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed)
        frame = ip + tcp
        out.append(struct.pack("<IIII", int(t), round((t % 1) * 1e6), len(frame),
                               40 + payload) + frame)
    path.write_bytes(b"".join(out))


def test_the_capture_of_the_affected_link_says_which_flows_were_on_it(tmp_path):
    """Two connections hashed over two parallel links; the capture of the link that goes
    down saw connection A's data before the down and B's ACKs only: A's flow in flight at
    the down was on it, B's and a later flow of A's (after the down) were not."""
    from analysis.metrics.events import link_segments

    (tmp_path / "captures").mkdir()
    _pcap(tmp_path / "captures" / "r1__dci-1-0.pcap", [
        (T0 + 0.9, "10.0.0.1", 4000, "10.0.1.1", 5000, 1448),   # A's data
        (T0 + 0.95, "10.0.1.2", 5000, "10.0.0.2", 4001, 0),     # B's ACK (reverse, no data)
        (T0 + 3.5, "10.0.0.1", 4000, "10.0.1.1", 5000, 1448)])  # A again, after the up
    (tmp_path / "captures" / "index.json").write_text(json.dumps({"interfaces": [
        {"node": "r1", "ifname": "dci-1", "link": "dci-1",
         "files": ["captures/r1__dci-1-0.pcap"]}]}))
    seg = link_segments(tmp_path, {"dci-1", "dci-2"})
    assert set(seg) == {"dci-1"}  # dci-2 has no capture
    assert list(seg["dci-1"][("10.0.0.1", 4000, "10.0.1.1", 5000)]) == pytest.approx(
        [T0 + 0.9, T0 + 3.5])

    def flow(src, sport, dst, dport, lo, hi):
        return {"src_node": "h", "src_ip": src, "sport": sport, "dst_ip": dst, "dport": dport,
                "t_start": T0 + lo, "t_first_byte": T0 + lo, "t_end": T0 + hi,
                "size_bytes": 1448, "workload": "w", "workload_index": 0}

    flows = pd.DataFrame([flow("10.0.0.1", 4000, "10.0.1.1", 5000, 0.8, 1.5),   # on it
                          flow("10.0.0.2", 4001, "10.0.1.2", 5000, 0.8, 1.5),   # other link
                          flow("10.0.0.1", 4000, "10.0.1.1", 5000, 2.0, 2.5)])  # after down
    windows = event_windows([_ev(0, "link_down", "down", 1.0, 1.001, links=["dci-1"]),
                             _ev(1, "link_up", "up", 3.0, 3.001, links=["dci-1"])], T0)
    t = event_impact(windows, flows, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                     pd.DataFrame(), None, {}, T0, seg)
    down = t.iloc[0]
    assert (down["flows_hit"], down["flows_on_link"], down["on_link_source"]) == (
        3, 1, "capture")
    assert pd.isna(down["flows_maybe_on_link"])
    # without the capture and without a plan nothing is claimed
    t = event_impact(windows, flows, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                     pd.DataFrame(), None, {}, T0, {})
    assert t.iloc[0]["flows_on_link"] is None and t.iloc[0]["on_link_source"] is None


def test_a_failed_transfer_hits_its_iteration_and_goodput_never_recovers():
    """A node goes down while iteration 3 runs: its transfers fail (failure records, no
    flow or collective record for iteration 3); the table names the failure, iteration 3
    and its collective, and says not recovered (zero goodput until the failure)."""
    flows = pd.DataFrame(_stream(T0, T0 + 3.0, piece_s=0.01))
    colls = pd.DataFrame([{"collective_id": f"c{i}.0", "workload_index": 0, "iteration": i,
                           "rank_t_start": [T0 + i], "rank_t_end": [T0 + i + 1.0]}
                          for i in range(3)])
    fails = pd.DataFrame([{"t": T0 + 5.0, "workload_index": 0, "extra_iteration": 3,
                           "extra_id": "c3.0", "extra_op_kind": "collective"},
                          {"t": T0 + 0.5, "workload_index": 0, "extra_iteration": 0,
                           "extra_id": "c0.0", "extra_op_kind": "collective"}])  # before it
    windows = event_windows([_ev(0, "node_down", "down", 3.05, 3.051, node="h3",
                                 links=["h3-s1"])], T0)
    (row,) = event_impact(windows, flows, colls, pd.DataFrame(), pd.DataFrame(), fails,
                          None, {0: "a2a"}, T0).to_dict("records")
    assert (row["workload"], row["failures"], row["flows_hit"]) == ("a2a", 1, 0)
    assert row["iterations_hit"] == [3] and row["collectives_hit"] == ["c3.0"]
    assert row["recovered"] is False and row["recovery_s"] is None
    assert row["recovery_note"] == "goodput stayed below 90% of before until the workload failed"
    assert row["min_goodput_bps"] == 0.0
    assert row["baseline_goodput_bps"] == pytest.approx(8e6 * 3.0 / 3.05)  # 3 MB by 3.05 s


def test_fl_rounds_hit_and_their_round_time_inflation():
    """FL rounds (rounds.jsonl, one row per aggregator): a flap during round 2 hits it; its
    span over both aggregators (3 s) against the median of rounds 0 and 1 (1 s)."""
    rows = []
    for r, (lo, hi) in enumerate([(0, 1), (1, 2), (2, 5), (5, 6)]):
        for agg, late in (("a1", 0.0), ("a2", -0.5)):
            rows.append({"round": r, "t_start": T0 + lo, "t_end": T0 + hi + late,
                         "round_time_s": hi + late - lo, "aggregator": agg,
                         "workload_index": 0})
    windows = event_windows([_ev(0, "flap", "down", 2.5, 2.501, links=["e"]),
                             _ev(0, "flap", "up", 2.7, 2.701, step=1, links=["e"])], T0)
    (row,) = event_impact(windows, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                          pd.DataFrame(rows), pd.DataFrame(), None, {0: "fl"},
                          T0).to_dict("records")
    assert row["workload"] == "fl" and row["rounds_hit"] == [2] and row["iterations_hit"] == []
    assert row["iteration_time_before_s"] == 1.0 and row["iteration_inflation_max"] == 3.0
    # back to the 1 s pace with round 3 (from 5 s), 2.5 s after the flap began
    assert row["recovered"] and row["recovery_method"] == "pace"
    assert row["recovery_s"] == pytest.approx(2.5) and row["slowdown_max"] == pytest.approx(3.0)


def test_a_convergence_record_is_not_an_action_never_applied():
    """FRR labs write, after each link action, a ``record: convergence`` line carrying the
    action's event, kind, op and step but no ``applied_t_s``: the event stays ``applied``."""
    down = _ev(0, "link_down", "down", 1.0, 1.01, links=["dci1"])
    conv = {"record": "convergence", "event": 0, "kind": "link_down", "op": "down", "step": 0,
            "planned_t_s": 1.0, "convergence_s": 0.05}
    (w,) = event_windows([down, conv], T0)
    assert w["state"] == "applied" and w["start"] == T0 + 1.0
