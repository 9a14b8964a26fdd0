"""``events:`` in a real run (examples/dci_failover.yaml, host kernel): one of two DCIs goes
down at iteration 10 of a ring all-reduce across two DCs and comes back at iteration 30.
events.jsonl holds every applied action; the collective completes, the iterations run while
the DCI was down crossed the surviving one, and they show the lost capacity (more
retransmissions, longer iterations than before the down); the link-up restored the border
routers' routes; nothing of the lab remains. And a node that fails during an all-to-all
(examples/faults/): the run fails with records naming the transfers it hit."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from conftest import ROOT, aitb_cli, records, root_links, run_namespaces, run_ok

pytestmark = pytest.mark.netns


@pytest.mark.timeout(900)
def test_dci_failover_example_keeps_the_collective_going_and_records_the_events(
        tmp_path, state_env):
    before_links = root_links()
    run_dir = run_ok(ROOT / "examples" / "dci_failover.yaml", tmp_path / "results", state_env)
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
    cct = {c["iteration"]: c["cct_s"] for c in colls}
    retrans: dict[int, int] = {}
    for f in records(run_dir, "flows.jsonl"):
        retrans[f["iteration"]] = retrans.get(f["iteration"], 0) + \
            (f.get("tcp") or {}).get("total_retrans", 0)
    # half the DCI capacity and one 20-packet buffer for all DCI-crossing connections
    assert statistics.mean(retrans.get(i, 0) for i in during) > \
        statistics.mean(retrans.get(i, 0) for i in before)
    assert statistics.median(cct[i] for i in during) > statistics.median(cct[i] for i in before)

    # nothing of the lab is left: namespaces, root-namespace links, its registry
    lab_id = manifest["lab_run_id"]
    assert run_namespaces(lab_id) == []
    assert not (set(root_links()) - set(before_links))
    assert not (Path(state_env["AITB_STATE_DIR"]) / lab_id).exists()


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
    colls = records(run_dir, "collectives.jsonl")
    assert [c["iteration"] for c in colls] == [0, 1, 2]  # the ones before the failure
    lab_id = manifest["lab_run_id"]
    assert run_namespaces(lab_id) == []
    assert not (set(root_links()) - set(before_links))
    assert not (Path(state_env["AITB_STATE_DIR"]) / lab_id).exists()
