"""A rail-optimized server as ONE host with a rank per NIC, on the host kernel
(``rail_optimized`` with ``server_as_host``: servers s1 and s2, each with NIC j on rail leaf
rail<j>, ``ranks_per_host: 2``). Rank j of a server is bound to NIC j (models.paths.
rank_addresses): a ring all-reduce over the four ranks sends rank 1's share (s1 NIC 2 -> s2
NIC 1) out of rail 2 although the main table would take rail 1, so each rank's traffic leaves
on its own rail only (interface counters), and the records carry the bound addresses."""

from __future__ import annotations

import pytest
from pyroute2 import IPRoute

from models.paths import rank_addresses
from models.records import FlowRecord
from models.schedule import Collective, Group, Schedule
from topologies import generate
from traffic_gen import replay
from traffic_gen.jsonl import read_records
from traffic_gen.launch import LabLauncher

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]

SIZE = 256 << 10


def _tx(lab, node: str) -> dict[str, int]:
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        return {m.get_attr("IFLA_IFNAME"): m.get_attr("IFLA_STATS64")["tx_bytes"]
                for m in ipr.get_links()}


def _ifname(plan, node: str, peer: str) -> str:
    (lk,) = [lk for lk in plan.links_of(node) if peer in (lk.a.node, lk.b.node)]
    return lk.endpoint(node).ifname


def test_rank_j_of_a_server_sends_on_rail_j_only(labs, tmp_path):
    plan = generate("rail_optimized", servers=2, rails=2, spines=1, server_as_host=True)
    place = {0: "s1", 1: "s1", 2: "s2", 3: "s2"}
    bound = rank_addresses(plan, place)
    sched = Schedule("ring", 4, {"w": Group("w", "dp", (0, 1, 2, 3))},
                     (Collective("all_reduce", "w", SIZE, algorithm="ring"),))
    nodes = [n.name for n in plan.nodes]
    with labs(plan) as lab:
        before = {n: _tx(lab, n) for n in nodes}
        res = replay(sched, place, LabLauncher(lab), tmp_path,
                     {h: str(plan.address_of(h)) for h in ("s1", "s2")},
                     rank_addresses=bound)
        assert res.ok, res.failures
        after = {n: _tx(lab, n) for n in nodes}
    sent = {(n, i): after[n][i] - before[n][i] for n in nodes for i in after[n]}
    share = 2 * 3 * SIZE // 4  # a 4-rank ring all-reduce: 2 (n - 1) / n x S to the next rank
    # ring 0 -> 1 -> 2 -> 3 -> 0: 0 -> 1 and 2 -> 3 stay inside their server (loopback);
    # rank 1 (s1, NIC 2) -> rank 2 (s2, NIC 1) and rank 3 (s2, NIC 2) -> rank 0 (s1, NIC 1)
    # leave on rail 2 and reach rail 1 over the spine
    for server in ("s1", "s2"):
        rail2, rail1 = _ifname(plan, server, "rail2"), _ifname(plan, server, "rail1")
        assert sent[(server, rail2)] >= share, (server, sent)
        assert sent[(server, rail1)] < share // 10, (server, sent)  # ACKs of what it receives
    assert sent[("rail2", _ifname(plan, "rail2", "sp1"))] >= 2 * share
    assert sent[("sp1", _ifname(plan, "sp1", "rail1"))] >= 2 * share
    flows = {(f.src_rank, f.dst_rank): (f.src_ip, f.dst_ip)
             for f in read_records(res.paths["flows"], FlowRecord)}
    assert set(flows) == {(0, 1), (1, 2), (2, 3), (3, 0)}
    for (s, d), ips in flows.items():
        assert ips == (bound[s], bound[d]), (s, d, ips)
