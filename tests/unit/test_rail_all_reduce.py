"""Rail-aware hierarchical all-reduce on the rail-optimized generator: the cross-server phase
runs among GPUs of one rail, so its flows stay under their rail leaf (no spine)."""

from collections import defaultdict

from topo_helpers import walk

from topologies import generate
from traffic_gen.algorithms import PlanRequest, build_plan


def test_cross_server_traffic_stays_on_its_rail_and_matches_the_closed_form():
    servers, rails, size = 4, 4, 4 * 4 * 1024
    plan = generate("rail_optimized", servers=servers, rails=rails, spines=2)
    hosts = [h.name for h in plan.hosts()]  # s1g1..s1g4, s2g1..: rank r on GPU r % rails + 1
    sites = tuple(plan.node(h).labels["site"] for h in hosts)
    steps = build_plan("all_reduce", "hierarchical", PlanRequest(len(hosts), size, sites=sites))
    cross = defaultdict(int)
    for r, rank_steps in enumerate(steps):
        for s in rank_steps:
            if s.kind == "send" and sites[s.peer] != sites[r]:
                assert r % rails == s.peer % rails  # same local index: same rail
                cross[(r, s.peer)] += s.size_bytes
                paths = walk(plan, hosts[r], hosts[s.peer])
                assert paths == [[hosts[r], f"rail{r % rails + 1}", hosts[s.peer]]]
    # each rank's cross-server ring: 2(g-1)/g x S/m to its next server on the same rail
    per_rank = 2 * (servers - 1) * size // (servers * rails)
    assert set(cross.values()) == {per_rank} and len(cross) == servers * rails
