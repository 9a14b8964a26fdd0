"""examples/faults/fedavg_flapping_edge.yaml on real namespaces: FedAvg while one edge site's
access link flaps (200 ms down every 2 s from 100 ms into round 1). The round whose model
download an outage hit drops that client by the deadline (rounds.jsonl names it, reason
"deadline", the round lasts the deadline); the same run's rounds that no outage touched, and
the three identical clients whose links never flap, drop nobody; events.jsonl has every down
and up; nothing of the lab remains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, records, root_links, run_namespaces, run_ok

pytestmark = pytest.mark.netns
EXAMPLE = ROOT / "examples" / "faults" / "fedavg_flapping_edge.yaml"
FLAPPING, LINK, DEADLINE_S = "site1", "site1-agg", 1.2


@pytest.mark.timeout(300)
def test_a_flapping_edge_site_is_dropped_by_the_deadline_only_where_an_outage_hit(
        tmp_path, state_env):
    before_links = root_links()
    run_dir = run_ok(EXAMPLE, tmp_path / "results", state_env, "--no-analysis")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    t0 = manifest["events"]["t0_unix_s"]
    evs = records(run_dir, "events.jsonl")
    applied = [e for e in evs if "applied_t_s" in e]
    assert all("error" not in e and e["links"] == [LINK] for e in evs)
    # the actions that fell inside the run (6 planned; the run may end inside an outage)
    assert [e["op"] for e in applied] == ["down", "up", "down", "up", "down", "up"][
        :len(applied)] and len(applied) >= 4
    ups = [u["began_t_s"] for u in applied[1::2]] + [float("inf")]
    outages = [(d["applied_t_s"], ups[k]) for k, d in enumerate(applied[::2])]
    rounds = records(run_dir, "rounds.jsonl")
    assert [r["round"] for r in rounds] == [0, 1, 2, 3]
    hit_rounds = set()
    for r in rounds:
        start = r["t_start"] - t0
        end = start + r["round_time_s"]
        hit = any(d < end and u > start for d, u in outages)
        assert r["round_time_s"] > 0 and r["clients_selected"] == 4
        if r["clients_dropped"]:
            # only the flapping client, only by the deadline, only where an outage fell
            assert r["clients_dropped"] == [FLAPPING] and hit, (r, outages)
            assert r["drop_reasons"] == {FLAPPING: "deadline"}
            assert r["round_time_s"] >= DEADLINE_S
            hit_rounds.add(r["round"])
        else:
            assert r["clients_finished"] == 4
        if not hit:  # the same clients without an outage: nobody dropped
            assert not r["clients_dropped"], r
    # round 1: the first outage came 100 ms into the 0.4 s model download
    assert 1 in hit_rounds and rounds[0]["clients_dropped"] == []
    first = applied[0]
    assert first["anchor"] == "fl" and first["iteration"] == 1
    r1 = rounds[1]["t_start"] - t0
    assert first["planned_t_s"] == pytest.approx(r1 + 0.1, abs=1e-3)

    lab_id = manifest["lab_run_id"]
    assert run_namespaces(lab_id) == []
    assert not (set(root_links()) - set(before_links))
    assert not (Path(state_env["AITB_STATE_DIR"]) / lab_id).exists()
