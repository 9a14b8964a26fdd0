"""Multi-NIC hosts on the host kernel: a GPU of a rail-optimized server has a NIC on its rail
leaf and one on its server's NVSwitch; each peer is reached over the NIC nearest to it
(models.paths.peer_addresses), so an all-reduce between the GPUs of one server stays on the
intra-server links and one between the same GPU of two servers on their rail leaf; no byte
crosses a spine (interface counters)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import records, run_example
from pyroute2 import IPRoute

from models.paths import peer_addresses
from models.records import FlowRecord
from models.schedule import Collective, Group, Schedule
from orchestration.run.runner import prepare
from topologies import generate
from traffic_gen import replay
from traffic_gen.jsonl import read_records
from traffic_gen.launch import LabLauncher

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]

SIZE = 4 << 20


def _tx(lab, node: str) -> dict[str, int]:
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        return {m.get_attr("IFLA_IFNAME"): m.get_attr("IFLA_STATS64")["tx_bytes"]
                for m in ipr.get_links() if m.get_attr("IFLA_IFNAME") != "lo"}


def _ifname(plan, node: str, peer: str) -> str:
    (lk,) = [lk for lk in plan.links_of(node) if peer in (lk.a.node, lk.b.node)]
    return lk.endpoint(node).ifname


def test_rail_server_all_reduce_stays_on_nvlink_and_rail_traffic_on_its_leaf(labs, tmp_path):
    plan = generate("rail_optimized", servers=2, rails=2, spines=1)
    place = {0: "s1g1", 1: "s1g2", 2: "s2g1"}
    sched = Schedule("rails", 3, {"tp": Group("tp", "tp", (0, 1)),  # server 1's two GPUs
                                  "dp": Group("dp", "dp", (0, 2))},  # GPU 1 of both: rail 1
                     (Collective("all_reduce", "tp", SIZE, algorithm="ring"),
                      Collective("all_reduce", "dp", SIZE, algorithm="ring")))
    hosts = sorted(set(place.values()))
    pairs = peer_addresses(plan, hosts)
    nodes = [n.name for n in plan.nodes]
    with labs(plan) as lab:
        before = {n: _tx(lab, n) for n in nodes}
        res = replay(sched, place, LabLauncher(lab), tmp_path,
                     {h: str(plan.address_of(h)) for h in hosts}, pair_addresses=pairs)
        assert res.ok, res.failures
        after = {n: _tx(lab, n) for n in nodes}
    sent = {(n, i): after[n][i] - before[n][i] for n in nodes for i in after[n]}
    # a 2-rank ring all-reduce: each rank sends 2 (n - 1) / n x S = S to the other
    nv = {("s1g1", _ifname(plan, "s1g1", "s1nv")), ("s1g2", _ifname(plan, "s1g2", "s1nv")),
          ("s1nv", _ifname(plan, "s1nv", "s1g1")), ("s1nv", _ifname(plan, "s1nv", "s1g2"))}
    rail = {("s1g1", _ifname(plan, "s1g1", "rail1")), ("s2g1", _ifname(plan, "s2g1", "rail1")),
            ("rail1", _ifname(plan, "rail1", "s1g1")), ("rail1", _ifname(plan, "rail1", "s2g1"))}
    for key in nv | rail:
        assert SIZE <= sent[key] <= 1.1 * SIZE + 65536, (key, sent[key])
    idle = {k: v for k, v in sent.items() if k not in nv | rail}
    assert max(idle.values()) < SIZE // 20, idle  # spine, rail 2, server 2's NVSwitch
    flows = list(read_records(res.paths["flows"], FlowRecord))
    by_pair = {(f.src_node, f.dst_node): (f.src_ip, f.dst_ip) for f in flows}
    for pair in (("s1g1", "s1g2"), ("s1g2", "s1g1"), ("s1g1", "s2g1"), ("s2g1", "s1g1")):
        assert by_pair[pair] == pairs[pair], pair  # records carry the NICs that were used


def test_aitb_run_of_the_rail_example_uses_nvlink_for_tp_and_the_rail_for_dp(tmp_path,
                                                                              state_env):
    example = Path(__file__).resolve().parents[2] / "examples" / "rail_tp_dp.yaml"
    plan = prepare(example).plan
    run_dir = run_example(example, tmp_path / "results", state_env)
    flows = records(run_dir, "flows.jsonl")
    nv = {str(ep.ipv4.ip) for lk in plan.links if lk.b.node.endswith("nv") for ep in (lk.a, lk.b)}
    rail1 = {str(ep.ipv4.ip) for lk in plan.links if lk.b.node == "rail1"
             for ep in (lk.a,)}
    tp = [f for f in flows if f["workload"] == "tp"]
    dp = [f for f in flows if f["workload"] == "dp"]
    assert len(tp) >= 4 and len(dp) >= 2
    assert all(f["src_ip"] in nv and f["dst_ip"] in nv for f in tp), tp[0]
    assert all(f["src_ip"] in rail1 and f["dst_ip"] in rail1 for f in dp), dp[0]
