"""ALTO maps on a live run (host kernel): examples/alto_ring_order.yaml runs the same DP+TP
job with rings in rank order and in cost-map order on three DCs; the cost-map order crosses
the DCIs half as often, moves half the bytes over each DCI link and finishes sooner."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_ok

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]


def _run(example: str, tmp_path: Path, env: dict[str, str]) -> Path:
    return run_ok(ROOT / "examples" / example, tmp_path / "r", env)


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
    from testbed.registry import pid_alive

    assert not pid_alive(server["pid"], None)  # ended with the lab
