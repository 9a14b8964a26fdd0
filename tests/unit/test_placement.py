import pytest

from models.errors import SpecError
from workloads.layout import Layout
from workloads.placement import place

SITES = {"dc1": ["h1", "h2", "h3", "h4"], "dc2": ["h5", "h6", "h7", "h8"]}


def test_packed_keeps_tp_inside_a_dc_and_dp_crosses():
    lay = Layout(tp=4, dp=2)
    pl = place(lay.world_size, SITES, "packed")
    site = {h: s for s, hs in SITES.items() for h in hs}
    for g in lay.groups("tp").values():
        assert len({site[pl[r]] for r in g.ranks}) == 1
    for g in lay.groups("dp").values():
        assert len({site[pl[r]] for r in g.ranks}) == 2


def test_spread_with_block_1_splits_tp_across_dcs():
    pl = place(4, SITES, "spread")
    assert [pl[r] for r in range(4)] == ["h1", "h5", "h2", "h6"]


def test_spread_block_keeps_blocks_whole():
    pl = place(8, SITES, "spread", block=4)
    assert [pl[r] for r in range(8)] == ["h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"]


def test_slots_put_several_ranks_per_host():
    pl = place(4, {"dc": ["a", "b"]}, slots=2)
    assert [pl[r] for r in range(4)] == ["a", "a", "b", "b"]


def test_too_few_hosts_names_both_numbers():
    with pytest.raises(SpecError, match=r"128 ranks need 128 host slots.*8 host\(s\) x 1 slot"):
        place(128, SITES, key="workloads[0].placement")
    with pytest.raises(SpecError, match=r"workloads\[0\]\.placement"):
        place(128, SITES, key="workloads[0].placement")


def test_unknown_policy():
    with pytest.raises(SpecError, match="unknown placement policy 'ring'"):
        place(2, SITES, "ring")  # type: ignore[arg-type]


def test_sites_of_plan_groups_hosts_by_site_label_then_group():
    from models.plan import LabPlan, NodePlan
    from workloads.placement import sites_of_plan

    plan = LabPlan("lab", nodes=(
        NodePlan("a1", "host", labels={"site": "east"}), NodePlan("r", "router"),
        NodePlan("b1", "host", group="west"), NodePlan("a2", "host", labels={"site": "east"}),
    ), links=())
    assert sites_of_plan(plan) == {"east": ["a1", "a2"], "west": ["b1"]}
    assert place(3, sites_of_plan(plan)) == {0: "a1", 1: "a2", 2: "b1"}
