"""``events:`` on a lab split over two sshd "machines" (tests/netns/sshd_machines.py): the DCI,
a link cut between the machines (a VXLAN tunnel), goes down during iteration 1 of a ring
all-reduce across both DCs and comes back half a second later. Each machine sets its own end
down and up and restores its border router's routes; events.jsonl has one line per action
with both machines' ends, planned and applied on the driver's clock (and a degrade of the
DCI's delay, each direction on its sender's machine, whose native delay-line helper, started by
that machine's bring-up, acknowledges the new delay to the machine's event player; a
straggler sent by the driver's controller); the DCI carried nothing
while it was down (both machines' counter samples) and the collective's traffic crossed it
again after (every iteration completes); nothing is left on either machine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from sshd_machines import sshd_machines, two_dc_experiment
from test_cluster_run import aitb_run, leftovers

from analysis.metrics.events import event_windows

pytestmark = pytest.mark.netns

DCI = "dc1-b1-dc2-b1"
ENDS = {"m1": ("dc1-b1", "dci-dc2-1"), "m2": ("dc2-b1", "dci-dc1-1")}  # machine: node, ifname


def _part_processes(rid: str) -> list[str]:
    """Processes of ``aitb topo events`` of either part."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"events" in argv and any(a in argv for a in (f"{rid}0".encode(),
                                                          f"{rid}1".encode())):
            out.append(pid)
    return out


@pytest.mark.timeout(900)
def test_a_cut_link_goes_down_and_up_on_both_machines_during_a_collective(tmp_path):
    (tmp_path / "machines").mkdir()
    with sshd_machines(tmp_path / "machines") as m:
        exp = two_dc_experiment(m, tmp_path / "exp.yaml", size="4MiB", iterations=3,
                                observe=True)
        doc = json.loads(exp.read_text())
        doc["events"] = [
            {"at": {"workload": "ring", "iteration": 1, "offset": "50ms"},
             "kind": "link_down", "link": DCI},
            {"at": {"workload": "ring", "iteration": 1, "offset": "550ms"},
             "kind": "link_up", "link": DCI},
            {"at": {"workload": "ring", "iteration": 2}, "kind": "straggler", "rank": 1,
             "factor": 1.5},
            {"at": {"workload": "ring", "iteration": 2}, "kind": "degrade", "link": DCI,
             "delay": "5ms", "duration": "300ms"}]
        exp.write_text(json.dumps(doc, indent=1))
        out, got = aitb_run(m, exp, tmp_path / "results")
        assert out.returncode == 0 and got.get("ok"), (got.get("error"), out.stderr[-3000:])
        run_dir = Path(got["run_dir"])
        manifest = json.loads((run_dir / "manifest.json").read_text())
        left = leftovers(m)
        parts = _part_processes(m.rid)
    assert manifest["status"] == "ok"
    info = manifest["events"]
    assert info["actions"] == 5 and info["applied"] == 5 and info["errors"] == []
    assert {m: x["actions"] for m, x in info["machines"].items()} == {
        "m1": 4, "m2": 4, "driver": 1}

    # one line per action, both machines' ends in it, never begun before its time
    evs = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert sorted((e["action"], e["kind"], e["op"]) for e in evs) == [
        (0, "link_down", "down"), (1, "link_up", "up"), (2, "straggler", "slowdown"),
        (3, "degrade", "shape"), (4, "degrade", "shape")]
    down, up, slow, degrade, restore = sorted(evs, key=lambda e: e["action"])
    # the degrade: each direction on its sender's machine, the delay less the underlay's
    # one way (as the DCI's own at bring-up); back to the plan's after its duration
    (cut,) = manifest["cluster"]["cut_links"]
    for e in (degrade, restore):
        assert "error" not in e and sorted(e["machines"]) == ["m1", "m2"]
        assert e["machines"]["m1"]["directions"] == [f"{DCI} a_to_b"]
        assert e["machines"]["m2"]["directions"] == [f"{DCI} b_to_a"]
    for name, d in (("m1", "a_to_b"), ("m2", "b_to_a")):
        new = degrade["machines"][name]["done"]["shaping"][f"{DCI} {d}"]["delay_s"]
        assert new == pytest.approx(0.005 - cut["underlay_one_way_s"])
        back = restore["machines"][name]["done"]["shaping"][f"{DCI} {d}"]["delay_s"]
        assert back == pytest.approx(cut[d]["emulated_delay_s"])
    # the straggler's slowdown: sent by the driver's controller over the agent's SSH channel
    assert list(slow["machines"]) == ["driver"] and slow["done"]["sent"] is True
    assert slow["done"]["node"] == "dc1-l1-h2" and "error" not in slow
    for e in (down, up):
        assert "error" not in e and "not_reached" not in e and e["links"] == [DCI]
        assert sorted(e["machines"]) == ["m1", "m2"]
        for mine in e["machines"].values():
            assert mine["links"] == [DCI]
            assert mine["began_t_s"] >= e["planned_t_s"] - 1e-6
            assert mine["applied_t_s"] >= mine["began_t_s"]
        assert e["began_t_s"] == min(x["began_t_s"] for x in e["machines"].values())
        assert e["applied_t_s"] == max(x["applied_t_s"] for x in e["machines"].values())
        assert e["late_s"] == pytest.approx(e["applied_t_s"] - e["planned_t_s"], abs=1e-6)
    assert up["planned_t_s"] == pytest.approx(down["planned_t_s"] + 0.5, abs=1e-6)
    # each machine restored its own border router's routes over the DCI, read back
    for name, (node, _) in ENDS.items():
        routes = up["machines"][name]["done"]["routes"]
        assert list(routes) == [node] and routes[node], routes  # not the proxy switch's
        assert up["machines"][name]["acked_t_s"] <= up["machines"][name]["applied_t_s"]
    assert sorted(up["done"]["routes"]) == ["dc1-b1", "dc2-b1"]

    # the analysis reads the merged lines as a local run's: the DCI's outage window runs
    # from the first machine's down to the last machine's up
    t0 = info["t0_unix_s"]
    outage, back = event_windows(evs, t0)[:2]
    assert outage["state"] == back["state"] == "applied" and outage["links"] == {DCI}
    assert outage["start"] == t0 + down["began_t_s"] and outage["end"] == t0 + up["applied_t_s"]

    # the collective: every iteration completed; the down came while iteration 1 ran
    colls = [json.loads(x) for x in (run_dir / "collectives.jsonl").read_text().splitlines()]
    assert [c["iteration"] for c in colls] == [0, 1, 2] and all(c["cct_s"] > 0 for c in colls)
    span = {c["iteration"]: (min(c["rank_t_start"]) - t0, max(c["rank_t_end"]) - t0)
            for c in colls}
    assert down["applied_t_s"] < span[1][1]
    assert span[1][1] > up["applied_t_s"]  # its traffic waited for the DCI to return

    # the DCI's two ends (one per machine, counters moved onto the driver's clock): nothing
    # sent while it was down, every byte of the later crossing flows after it came back
    cluster = manifest["cluster"]["machines"]
    unc = max(cluster[k]["clock"]["uncertainty_s"] for k in ("m1", "m2"))
    links = pd.read_parquet(run_dir / "counters" / "links.parquet")
    flows = [json.loads(x) for x in (run_dir / "flows.jsonl").read_text().splitlines()]
    assert all(f["t_end"] is not None for f in flows)
    for name, (node, ifname) in ENDS.items():
        rows = links[(links["node"] == node) & (links["ifname"] == ifname)].sort_values("t_s")
        t = rows["t_s"] - t0
        inside = rows[(t >= down["applied_t_s"] + unc) & (t <= up["began_t_s"] - unc)]
        assert len(inside) >= 2, (name, len(rows))  # sampled while it was down
        assert inside["tx_bytes"].iloc[-1] == inside["tx_bytes"].iloc[0], name
        after = rows[t >= up["applied_t_s"] + unc]
        first = after["t_s"].iloc[0] - t0  # the flows that start after it cross in full
        dc = node[:3]
        crossing = sum(f["size_bytes"] for f in flows if f["src_node"][:3] == dc
                       and f["dst_node"][:3] != dc and f["t_start"] - t0 >= first + unc)
        assert crossing > 0
        assert after["tx_bytes"].iloc[-1] - after["tx_bytes"].iloc[0] >= crossing, name

    # nothing left on either machine: registries, namespaces, agents, observers, players
    assert left == {"registries": [], "namespaces": [], "processes": []}
    assert parts == []
    assert not list(Path("/tmp").glob(f"aitb-observe-{m.rid}*"))
    assert not list(Path("/tmp").glob(f"aitb-part-{m.rid}*"))
