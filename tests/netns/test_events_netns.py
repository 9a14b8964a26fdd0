"""``events:`` in a real run (examples/dci_failover.yaml, host kernel): one of two DCIs goes
down at iteration 10 of a ring all-reduce across two DCs and comes back at iteration 30.
events.jsonl holds every applied action; the collective completes, the iterations run while
the DCI was down crossed the surviving one (its counters carry at least their DCI payload,
the dead one's nothing); the link-up restored the border routers' routes; nothing of the lab
remains. And a node that fails during an all-to-all
(examples/faults/): the run fails with records naming the transfers it hit."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, aitb_cli, records, root_links, run_example, run_namespaces

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def dci_run(tmp_path_factory) -> tuple[Path, dict[str, str], dict[str, str | None]]:
    """One run of examples/dci_failover.yaml (analysis included) for the tests below: its
    run directory, the environment it ran with, the root namespace's links before it."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    tmp = tmp_path_factory.mktemp("dci-failover")
    env = {**os.environ, "AITB_STATE_DIR": str(tmp / "state")}
    before_links = root_links()
    return run_example(ROOT / "examples" / "dci_failover.yaml", tmp / "results", env), env, \
        before_links


@pytest.mark.timeout(900)
def test_dci_failover_example_keeps_the_collective_going_and_records_the_events(dci_run):
    run_dir, state_env, before_links = dci_run
    manifest = json.loads((run_dir / "manifest.json").read_text())
    evs = records(run_dir, "events.jsonl")
    assert [(e["kind"], e["op"], e["step"]) for e in evs] == [
        ("link_down", "down", 0), ("link_up", "up", 0), ("degrade", "shape", 0),
        ("degrade", "shape", 1)]
    assert all("error" not in e and "not_reached" not in e for e in evs)
    assert all(e["began_t_s"] >= e["planned_t_s"] - 1e-6 and
               e["applied_t_s"] >= e["began_t_s"] for e in evs)
    assert manifest["events"]["applied"] == 4 and manifest["events"]["errors"] == []
    down, up = evs[0], evs[1]
    # the border routers' ECMP routes over both DCIs, restored whole and read back
    assert up["done"]["routes"] == {"dc1-b1": ["198.18.0.8/29"], "dc2-b1": ["198.18.0.0/29"]}
    assert up["acked_t_s"] <= up["applied_t_s"]

    t0 = manifest["events"]["t0_unix_s"]
    colls = records(run_dir, "collectives.jsonl")
    assert [c["iteration"] for c in colls] == list(range(60)) and all(
        c["cct_s"] > 0 for c in colls)
    span = {c["iteration"]: (min(c["rank_t_start"]) - t0, max(c["rank_t_end"]) - t0)
            for c in colls}
    # anchored at iteration 10's start, applied before that iteration's traffic ended
    assert span[10][0] <= down["planned_t_s"] + 1e-3 and down["applied_t_s"] < span[10][1]
    before = [i for i, (s, e) in span.items() if e <= down["began_t_s"]]
    during = [i for i, (s, e) in span.items()
              if s >= down["applied_t_s"] and e <= up["began_t_s"]]
    assert before == list(range(10)) and len(during) >= 15  # all crossed the other DCI
    # while it was down, the DCI traffic of those iterations crossed the surviving DCI: the
    # border routers' interface counters (counters/links.parquet, host-clock seconds) between
    # the down and the up. Each iteration's ring crosses the DCs at least once each way, and
    # a crossing rank sends 2(n-1)/n of the size (ring all-reduce), so the survivor carries
    # at least that payload per iteration each way; the dead DCI carries nothing. (The
    # iterations' CCT and retransmissions are figures, not asserted: on a loaded 2-core
    # machine CPU, not the halved DCI, often bounds an iteration.)
    size = {c["size_bytes"] for c in colls}.pop()
    n = len(colls[0]["hosts"])
    floor = len(during) * size * 2 * (n - 1) / n
    carried = _dci_tx_bytes(run_dir, t0 + down["applied_t_s"], t0 + up["began_t_s"])
    print("DCI tx bytes while one was down", carried, "floor per way", floor)
    for border in ("dc1-b1", "dc2-b1"):
        assert carried[(border, "dc1-b1-dc2-b1")] == 0, carried
        assert carried[(border, "dc1-b1-dc2-b1-2")] >= floor, (carried, floor)

    # nothing of the lab is left: namespaces, root-namespace links, its registry
    lab_id = manifest["lab_run_id"]
    assert run_namespaces(lab_id) == []
    assert not (set(root_links()) - set(before_links))
    assert not (Path(state_env["AITB_STATE_DIR"]) / lab_id).exists()


def _dci_tx_bytes(run_dir: Path, t_lo: float, t_hi: float) -> dict[tuple[str, str], int]:
    """(border router, DCI link) -> bytes its end sent between the first counter sample at
    or after ``t_lo`` and the last at or before ``t_hi`` (host-clock seconds)."""
    plan = json.loads((run_dir / "plan.json").read_text())
    links = pd.read_parquet(run_dir / "counters" / "links.parquet")
    out = {}
    for lk in plan["links"]:
        if lk["name"] not in ("dc1-b1-dc2-b1", "dc1-b1-dc2-b1-2"):
            continue
        for ep in (lk["a"], lk["b"]):
            rows = links[(links["node"] == ep["node"]) & (links["ifname"] == ep["ifname"])]
            inside = rows[(rows["t_s"] >= t_lo) & (rows["t_s"] <= t_hi)].sort_values("t_s")
            assert len(inside) >= 2, (ep, len(rows))  # sampled while the DCI was down
            out[(ep["node"], lk["name"])] = int(inside["tx_bytes"].iloc[-1]
                                                - inside["tx_bytes"].iloc[0])
    return out


@pytest.mark.timeout(900)
def test_dci_failover_analysis_names_the_events_their_hits_and_recovery_and_marks_them(
        dci_run):
    """The run's analysis (analysis.metrics.events): tables/events_impact.parquet names the
    DCI's down with the iterations it hit (10 on, while the DCI was down) and a time to
    recover (goodput is back at the latest once the DCI is up again); the report's figures
    carry the event marks, as chromium renders them."""
    run_dir, _, _ = dci_run
    table = pd.read_parquet(run_dir / "tables" / "events_impact.parquet")
    assert list(table["kind"]) == ["link_down", "link_up", "degrade"]
    down = table.iloc[0]
    assert down["target"] == "dc1-b1-dc2-b1" and down["workload"] == "ring"
    hit = list(down["iterations_hit"])
    assert hit[0] == 10 and hit == list(range(10, hit[-1] + 1)) and hit[-1] >= 25
    # which flows were on the DCI comes from its capture (ECMP: the plan cannot say)
    assert down["flows_hit"] > 0 and down["on_link_source"] == "capture"
    assert 0 <= down["flows_on_link"] <= down["flows_hit"]
    assert down["recovered"] and down["recovery_s"] >= 0
    assert list(table.iloc[2]["iterations_hit"])[0] == 40  # the degrade at iteration 40
    summary = json.loads((run_dir / "metrics.json").read_text())["summary"]
    assert summary["events"] == 3 and summary["event_recovery_s_max"] >= down["recovery_s"]
    html = (run_dir / "report.html").read_text()
    assert 'id="events-impact"' in html and "dc1-b1-dc2-b1" in html
    if shutil.which("chromium") is None:
        pytest.skip("chromium not installed (scripts/setup.sh installs it)")
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                              "--disable-background-networking", "--disable-component-update",
                              "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                              "--dump-dom", f"file://{run_dir / 'report.html'}"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    alts = dict(re.findall(r'<img id="plot-([a-z-]+)" alt="([^"]*)"', dom))
    starts = [f"{x:.3f}" for x in table.drop_duplicates("event")["start_s"]]
    for key in ("event-impact", "link-throughput", "queue-occupancy", "rank-timeline"):
        # each mark where the events table puts it (one time zero for both)
        marks = re.findall(r"(events\[\d\] \w+) at (-?[\d.]+) s", alts.get(key, ""))
        assert marks == list(zip(["events[0] link_down", "events[1] link_up",
                                  "events[2] degrade"], starts, strict=True)), (key, alts)


@pytest.mark.timeout(600)
def test_a_node_failure_during_an_all_to_all_ends_the_run_with_precise_failure_records(
        tmp_path, state_env):
    before_links = root_links()
    out = aitb_cli("run", str(ROOT / "examples" / "faults" / "node_failure_all_to_all.yaml"),
                   "--results", str(tmp_path / "results"), env=state_env, timeout=500)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "workload 0 (a2a) failed" in manifest["error"]
    (ev,) = records(run_dir, "events.jsonl")
    assert (ev["kind"], ev["node"], ev["links"], ev["iteration"]) == (
        "node_down", "h3", ["h3-s1"], 3) and "error" not in ev
    fails = records(run_dir, "failures.jsonl")
    assert fails
    for f in fails:  # each names a transfer to or from h3 at or after iteration 3
        x = f["extra"]
        assert "h3" in (f["node"], x.get("src_node"), x.get("dst_node")), f
        assert x["iteration"] >= 3 and f["op"] and f["peer"] is not None, f
        # and the link it was cut off by, with the event that set it down
        assert (x["links_down"], x["events"], x["agents_stopped"]) == (["h3-s1"], [0], {}), f
    assert [w["failures"] for w in manifest["workloads"]][0][0]["extra"]["links_down"] == [
        "h3-s1"]
    colls = records(run_dir, "collectives.jsonl")
    assert [c["iteration"] for c in colls] == [0, 1, 2]  # the ones before the failure
    # the failed run's analysis: the node_down hit iteration 3 and the transfers that
    # failed after it; goodput never came back (no recovery time is made up)
    (row,) = pd.read_parquet(run_dir / "tables" / "events_impact.parquet").to_dict("records")
    assert (row["kind"], row["target"], row["workload"]) == ("node_down", "node h3", "a2a")
    assert 3 in list(row["iterations_hit"]) and row["failures"] == len(fails)
    assert row["recovered"] is not True and pd.isna(row["recovery_s"])
    lab_id = manifest["lab_run_id"]
    assert run_namespaces(lab_id) == []
    assert not (set(root_links()) - set(before_links))
    assert not (Path(state_env["AITB_STATE_DIR"]) / lab_id).exists()
