"""ALTO maps on a live run (host kernel): examples/alto_ring_order.yaml runs the same DP+TP
job with rings in rank order and in cost-map order on three DCs; the cost-map order crosses
the DCIs half as often, moves half the bytes over each DCI link and finishes sooner;
examples/alto_placement.yaml places an all-reduce by the cost map (fewer bytes x cost, measured
from the flows, than spread) and groups a hierarchical all-reduce by PID (racks)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_example

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]


def _run(example: str, tmp_path: Path, env: dict[str, str]) -> Path:
    return run_example(ROOT / "examples" / example, tmp_path / "r", env)


@pytest.mark.timeout(900)
def test_cost_map_ring_order_halves_dci_crossings_and_bytes(tmp_path, state_env):
    from analysis.dci_usage import dci_usage

    run_dir = _run("alto_ring_order.yaml", tmp_path, state_env)
    index = json.loads((run_dir / "alto/index.json").read_text())
    assert set(index["pids"].values()) == {"dc1", "dc2", "dc3"}
    rank, cost = dci_usage(run_dir)
    assert (rank["workload"], cost["workload"]) == ("rank-order", "cost-map-order")
    # 2 DP groups x 2 DP all-reduces in iteration 0, 6 vs 3 crossing ring edges each
    assert (rank["ring_crossings"], cost["ring_crossings"]) == (24, 12)
    # the same ring edges' bytes: twice as many per DCI link direction (to a few bytes: the
    # ring's chunks of size/6 differ by one byte where 6 does not divide the size)
    assert rank["bytes_per_dci_link"].keys() == cost["bytes_per_dci_link"].keys()
    assert len(rank["bytes_per_dci_link"]) == 3  # the ring uses one direction of each DCI
    for link, size in rank["bytes_per_dci_link"].items():
        assert abs(size - 2 * cost["bytes_per_dci_link"][link]) <= 16
    # each DCI direction carries 4 instead of 2 ring flows of the DP all-reduce: the
    # gradient exchange is DCI-bound (200 Mbit/s against 2 Gbit/s fabric), so the rank
    # order takes longer whatever the machine's load adds to both
    assert cost["iteration_time_s"] < rank["iteration_time_s"]
    sys.path.insert(0, str(ROOT / "examples"))
    from alto_ring_order import table

    assert "| rank-order | 24 |" in table(run_dir)


@pytest.mark.timeout(900)
def test_an_app_on_a_lab_host_queries_the_lab_alto_server(tmp_path, state_env):
    run_dir = _run("alto_serve.yaml", tmp_path, state_env)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    server = manifest["alto_server"]
    assert server["node"] == "dc1-l1-h1" and server["url"].endswith(":8181/")
    (log,) = (run_dir / "workloads").glob("0-*/logs/dc2-l1-h1.log")
    answer = json.loads(log.read_text().strip().splitlines()[-1])
    index = json.loads((run_dir / "alto/index.json").read_text())
    nmap = json.loads((run_dir / "alto/networkmap.json").read_text())
    assert answer["pid"] == index["pids"]["dc2-l1-h1"] == "dc2"
    assert answer["vtag"] == nmap["meta"]["vtag"]["tag"]
    assert list(answer["costs"]) == ["dc2", "dc1"]  # its own DC first: the DCI costs more
    requests = (run_dir / "alto/server.log").read_text()
    assert "GET /networkmap" in requests and "GET /costmap/routingcost" in requests
    from testbed.lab.registry import pid_alive

    assert not pid_alive(server["pid"], None)  # ended with the lab


@pytest.fixture(scope="module")
def placement_run(tmp_path_factory) -> Path:
    """One run of examples/alto_placement.yaml (two DCs x two racks, PIDs per rack), shared by
    the placement and the hierarchy tests."""
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    tmp = tmp_path_factory.mktemp("alto-placement")
    env = {**os.environ, "AITB_STATE_DIR": str(tmp / "state")}
    return run_example(ROOT / "examples/alto_placement.yaml", tmp / "r", env)


def _flows_by_workload(run_dir: Path) -> dict[str, list[dict]]:
    from conftest import records

    names = {w["index"]: w["name"] for w in
             json.loads((run_dir / "manifest.json").read_text())["workloads"]}
    out: dict[str, list[dict]] = {}
    for f in records(run_dir, "flows.jsonl"):
        out.setdefault(names[f["workload_index"]], []).append(f)
    return out


def _pid_of(run_dir: Path):
    """address -> PID through the run's own network map (as an ALTO client maps endpoints)."""
    from models.alto import pid_of_address

    nmap = json.loads((run_dir / "alto/networkmap.json").read_text())
    return lambda address: pid_of_address(nmap, address)


@pytest.mark.timeout(900)
def test_cost_map_placement_moves_fewer_bytes_x_cost_than_spread(placement_run):
    from models.alto import costs_of

    run_dir = placement_run
    costs = costs_of(json.loads((run_dir / "alto/costmap-routingcost.json").read_text()))
    pid = _pid_of(run_dir)
    flows = _flows_by_workload(run_dir)

    def bytes_x_cost(name: str) -> float:  # measured: every flow's bytes at its PID pair's cost
        total = 0.0
        for f in flows[name]:
            a, b = pid(f["src_ip"]), pid(f["dst_ip"])
            assert a is not None and b is not None
            total += f["size_bytes"] * (0.0 if a == b else costs[(a, b)])
        return total

    def dci_bytes(name: str) -> int:
        return sum(f["size_bytes"] for f in flows[name]
                   if pid(f["src_ip"]).split("-")[0] != pid(f["dst_ip"]).split("-")[0])

    spread, placed = bytes_x_cost("spread"), bytes_x_cost("cost-map-placement")
    # the same all-reduce moves the same bytes; placed by the cost map they cost less
    assert sum(f["size_bytes"] for f in flows["spread"]) == sum(
        f["size_bytes"] for f in flows["cost-map-placement"])
    assert placed < spread
    # the ring of the spread placement crosses the DCI on all 8 of its edges, the cost map's
    # on 2 (into dc2 and back): a quarter of the DCI bytes
    assert dci_bytes("cost-map-placement") * 4 == dci_bytes("spread")


@pytest.mark.timeout(900)
def test_hierarchy_cost_map_groups_by_pid(placement_run):
    run_dir = placement_run
    index = json.loads((run_dir / "alto/index.json").read_text())
    racks = set(index["pids"].values())
    assert racks == {"dc1-l1", "dc1-l2", "dc2-l1", "dc2-l2"}
    pid = _pid_of(run_dir)
    flows = _flows_by_workload(run_dir)

    def across(name: str) -> set[tuple[str, str]]:  # (src, dst) host pairs joining two PIDs
        return {(f["src_node"], f["dst_node"]) for f in flows[name]
                if pid(f["src_ip"]) != pid(f["dst_ip"])}

    # grouped by PID: the racks are the sub-groups, their first hosts the leaders, and only
    # the leaders' ring crosses a rack boundary, rack to rack in ring order
    leaders = {"dc1-l1-h1", "dc1-l2-h1", "dc2-l1-h1", "dc2-l2-h1"}
    by_pid = across("by-pid")
    assert {h for pair in by_pid for h in pair} == leaders
    assert by_pid == {("dc1-l1-h1", "dc1-l2-h1"), ("dc1-l2-h1", "dc2-l1-h1"),
                      ("dc2-l1-h1", "dc2-l2-h1"), ("dc2-l2-h1", "dc1-l1-h1")}
    # grouped by site: each DC's ring reduce crosses between its racks from hosts that are
    # no rack's leader, and only the two DC leaders cross the DCI
    by_site = across("by-site")
    assert {h for pair in by_site for h in pair} - leaders
    assert {(a, b) for a, b in by_site if a[:3] != b[:3]} == {("dc1-l1-h1", "dc2-l1-h1"),
                                                              ("dc2-l1-h1", "dc1-l1-h1")}


@pytest.mark.timeout(900)
def test_live_cost_map_follows_a_loaded_dci(tmp_path, state_env):
    from conftest import records

    from models.paths import dci_links
    from models.plan import plan_from_dict

    run_dir = _run("alto_live.yaml", tmp_path, state_env)
    plan = plan_from_dict(json.loads((run_dir / "plan.json").read_text()))
    (dci,) = [lk for lk in plan.links if lk.name in dci_links(plan)]
    shaping = dci.egress("dc2-b1")  # the transfer's direction, dc2 -> dc1
    rate_bps, buffer_bytes = shaping.rate_bps, shaping.buffer.size_bytes
    (flow,) = records(run_dir, "flows.jsonl")
    assert (flow["src_node"], flow["dst_node"]) == ("dc2-l1-h1", "dc1-l1-h1")
    goodput_bps = flow["size_bytes"] * 8 / flow["fct_s"]
    live = records(run_dir, "alto/live.jsonl")
    bw = [e for e in live if e["metric"] == "bw-available"]
    delay = {e["seq"]: e for e in live if e["metric"] == "delay-ow"}
    inside = [e for e in bw if e["window_s"] is not None
              and flow["t_start"] <= e["t_s"] - e["window_s"] and e["t_s"] <= flow["t_end"]]
    before = [e for e in bw if e["t_s"] < flow["t_start"]]
    assert inside and before
    # idle, the cost is the configured rate (kbit/s) less the lab's stray packets
    assert all(e["cost-map"]["dc2"]["dc1"] > 0.99 * rate_bps / 1e3 for e in before)
    for e in inside:
        # loaded: the DCI's rate less what the transfer sends over it (at least half its
        # goodput in any window it fills); the other direction carries only its ACKs
        assert e["cost-map"]["dc2"]["dc1"] <= (rate_bps - goodput_bps / 2) / 1e3
        assert e["cost-map"]["dc1"]["dc2"] > 0.9 * rate_bps / 1e3
        # the one-way delay (configured: 0) gains the bottleneck buffer's queueing, at most
        # a full buffer's drain time
        queue_ms = delay[e["seq"]]["cost-map"]["dc2"]["dc1"]
        assert 0 < queue_ms <= buffer_bytes * 8 / rate_bps * 1e3
    # served at the lab address while it changed: the app on dc2 saw the cost fall below
    # half the configured one and come back
    (log,) = (run_dir / "workloads").glob("0-*/logs/dc2-l1-h1.log")
    seen = [json.loads(x)["cost"] for x in log.read_text().splitlines() if x.startswith("{")]
    assert seen[0] > 0.99 * rate_bps / 1e3 and min(seen) < rate_bps / 2e3
    assert seen[-1] >= rate_bps / 2e3
    assert "GET /costmap/bw-available" in (run_dir / "alto/server.log").read_text()
    # after the run alto/ holds the plan's configured maps again
    doc = json.loads((run_dir / "alto/costmap-bw-available.json").read_text())
    assert doc["cost-map"]["dc2"]["dc1"] == rate_bps / 1e3
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["alto_live"]["refreshes"] >= len(bw) // 2 > 0
