"""Cost-map-aware ring order and placement (workloads.cost_aware) on hand-made schedules and
costs, and on the 3-DC plan's own ALTO cost map; no root, no network."""

from __future__ import annotations

import pytest

import topologies
from models.alto import alto_maps, costs_of
from models.schedule import Collective, Group, Schedule
from workloads.cost_aware import (
    cost_map_placement,
    order_rings,
    placement_cost,
    ring_crossings,
    traffic_matrix,
)

COSTS = {(a, b): 10.0 for a in ("dc1", "dc2", "dc3") for b in ("dc1", "dc2", "dc3") if a != b}


def _dp_job(world: int = 6, op: str = "all_reduce") -> Schedule:
    g = Group("dp0", "dp", tuple(range(world)))
    return Schedule("dp", world, {"dp0": g}, (Collective(op, "dp0", 600),))  # type: ignore[arg-type]


def _interleaved(world: int = 6) -> tuple[dict[int, str], dict[str, str]]:
    placement = {r: f"h{r}" for r in range(world)}
    return placement, {f"h{r}": f"dc{r % 3 + 1}" for r in range(world)}


def test_ring_order_groups_ranks_by_pid_and_halves_the_crossings():
    placement, pids = _interleaved()
    s = _dp_job()
    assert ring_crossings(s.groups["dp0"].ranks, placement, pids) == 6
    ordered = order_rings(s, placement, pids, COSTS)
    assert ordered.groups["dp0"].ranks == (0, 3, 1, 4, 2, 5)
    assert ring_crossings(ordered.groups["dp0"].ranks, placement, pids) == 3


def test_ring_order_follows_the_cheapest_cycle_of_pids():
    placement = {r: f"h{r}" for r in range(4)}
    pids = {"h0": "a", "h1": "c", "h2": "b", "h3": "d"}
    ring = "abcd"  # PIDs on a physical ring a-b-c-d-a: neighbours cost 1, diagonals 10
    costs = {(x, y): 1 if abs(ring.index(x) - ring.index(y)) in (1, 3) else 10
             for x in ring for y in ring if x != y}
    ordered = order_rings(_dp_job(4), placement, pids, costs)
    assert [pids[f"h{r}"] for r in ordered.groups["dp0"].ranks] in (
        ["a", "b", "c", "d"], ["a", "d", "c", "b"])  # both 4; every other cycle takes a diagonal


def test_rooted_groups_keep_their_order():
    placement, pids = _interleaved()
    s = _dp_job(op="broadcast")
    assert order_rings(s, placement, pids, COSTS).groups["dp0"].ranks == tuple(range(6))


def test_traffic_matrix_uses_the_ring_model():
    t = traffic_matrix(_dp_job(4))
    # all-reduce: 2 (n-1)/n x size to the ring successor = 2 * 3/4 * 600
    assert t == {(0, 1): 900.0, (1, 2): 900.0, (2, 3): 900.0, (3, 0): 900.0}


def test_cost_map_placement_keeps_heavy_groups_inside_a_pid():
    # two TP pairs (heavy) and one DP pair across them (light); hosts listed alternating DCs,
    # so packed puts each TP pair across the DCI
    tp0, tp1 = Group("tp0", "tp", (0, 1)), Group("tp1", "tp", (2, 3))
    dp = Group("dp0", "dp", (0, 2))
    s = Schedule("job", 4, {"tp0": tp0, "tp1": tp1, "dp0": dp},
                 (Collective("all_reduce", "tp0", 10_000), Collective("all_reduce", "tp1", 10_000),
                  Collective("all_reduce", "dp0", 100)))
    hosts = ["a1", "b1", "a2", "b2"]
    pids = {"a1": "dc1", "a2": "dc1", "b1": "dc2", "b2": "dc2"}
    packed = {r: hosts[r] for r in range(4)}
    placed = cost_map_placement(s, hosts, pids, COSTS)
    assert sorted(placed.values()) == sorted(hosts)
    assert pids[placed[0]] == pids[placed[1]] and pids[placed[2]] == pids[placed[3]]
    t = traffic_matrix(s)
    assert placement_cost(t, placed, pids, COSTS) < placement_cost(t, packed, pids, COSTS)


def test_too_few_slots_is_a_spec_error():
    from models.errors import SpecError

    with pytest.raises(SpecError, match="6 ranks need 6 host slots"):
        cost_map_placement(_dp_job(), ["h0", "h1"], {"h0": "a", "h1": "a"}, {}, slots=2)


def test_ordering_with_the_plans_own_cost_map():
    plan = topologies.generate("multi_dc_leaf_spine", n_dcs=3, spines=1, leaves=1,
                               hosts_per_leaf=2)
    maps = alto_maps(plan)
    costs = costs_of(maps.cost_maps["routingcost"])
    hosts = [h.name for h in plan.hosts()]  # dc1-l1-h1, dc1-l1-h2, dc2-..., dc3-...
    placement = {r: hosts[(r % 3) * 2 + r // 3] for r in range(6)}  # rank r in DC r % 3
    ordered = order_rings(_dp_job(), placement, maps.pids, costs)
    assert ring_crossings(ordered.groups["dp0"].ranks, placement, maps.pids) == 3


def test_experiment_keys_reach_the_built_workload(tmp_path):
    from pathlib import Path

    from orchestration.run.runner import prepare
    from workloads.cost_aware import placement_cost, traffic_matrix

    root = Path(__file__).resolve().parents[2]
    text = (root / "examples/alto_ring_order.yaml").read_text()
    text = text.replace("placement: {policy: spread, slots: 2, block: 2}\n    ring_order",
                        "placement: {policy: cost_map, slots: 2}\n    hierarchy: cost_map\n"
                        "    ring_order")
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    rank, cost = prepare(path).workloads
    assert rank.sites is None and cost.sites is not None
    assert set(cost.sites.values()) == {"dc1", "dc2", "dc3"}  # hierarchy: the PIDs
    maps = alto_maps(prepare(path).plan)
    costs = costs_of(maps.cost_maps["routingcost"])
    t = traffic_matrix(cost.schedule)
    for g in cost.schedule.groups.values():
        if g.kind == "tp":  # the heavy TP pairs never cross a DCI
            assert len({maps.pids[cost.placement[r]] for r in g.ranks}) == 1
    assert placement_cost(t, cost.placement, maps.pids, costs) <= placement_cost(
        t, rank.placement, maps.pids, costs)


def test_a_collective_is_placed_by_its_placement_key():
    from pathlib import Path

    from orchestration.run.runner import prepare

    root = Path(__file__).resolve().parents[2]
    prep = prepare(root / "examples/alto_placement.yaml")
    spread, placed, by_site, by_pid = prep.workloads
    # the key was ignored before (every collective ran in host order)
    assert [h[:3] for h in spread.placement.values()] == ["dc1", "dc2"] * 4
    assert [placed.placement[r] for r in range(8)] == [h.name for h in prep.plan.hosts()]
    assert by_site.sites is None and set(by_pid.sites.values()) == {
        "dc1-l1", "dc1-l2", "dc2-l1", "dc2-l2"}


def test_a_pattern_refuses_placement(tmp_path):
    import pytest

    from models.errors import SpecError
    from orchestration.run.runner import prepare

    path = tmp_path / "exp.yaml"
    path.write_text("name: p\ntopology: {generator: single_switch, params: {hosts: 3}}\n"
                    "workloads:\n  - kind: incast\n    receiver: h1\n    size: 1KiB\n"
                    "    placement: {policy: spread}\n")
    with pytest.raises(SpecError) as err:
        prepare(path)
    assert "workloads[0].placement" in str(err.value) and "hosts:" in str(err.value)
