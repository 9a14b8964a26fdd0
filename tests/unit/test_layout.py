import pytest

from workloads.layout import Layout, LayoutError


def test_megatron_docstring_example_16_gpus_tp2_pp4():
    # Megatron-LM initialize_model_parallel docstring: 16 GPUs, tp=2, pp=4 (so dp=2):
    # TP groups [g0,g1],[g2,g3]...; PP groups [g0,g4,g8,g12]...; DP groups [g0,g2],[g1,g3]...
    lay = Layout(tp=2, dp=2, pp=4)
    tp = [g.ranks for g in lay.groups("tp").values()]
    pp = [g.ranks for g in lay.groups("pp").values()]
    dp = [g.ranks for g in lay.groups("dp").values()]
    assert tp[:2] == [(0, 1), (2, 3)]
    assert (0, 4, 8, 12) in pp and (1, 5, 9, 13) in pp
    assert (0, 2) in dp and (1, 3) in dp and (4, 6) in dp


@pytest.mark.parametrize("tp,dp,pp,ep", [(2, 4, 2, 2), (8, 16, 1, 1), (1, 8, 1, 4)])
def test_groups_partition_the_world(tp, dp, pp, ep):
    lay = Layout(tp=tp, dp=dp, pp=pp, ep=ep)
    for kind in ("tp", "dp", "pp", "ep", "ep_tp", "ep_dp"):
        ranks = sorted(r for g in lay.groups(kind).values() for r in g.ranks)
        assert ranks == list(range(lay.world_size)), kind


def test_ep_groups_are_consecutive_dp_ranks():
    lay = Layout(tp=2, dp=4, ep=2)
    assert [g.ranks for g in lay.groups("ep").values()] == [(0, 2), (1, 3), (4, 6), (5, 7)]


def test_ep_must_divide_dp():
    with pytest.raises(LayoutError, match="ep=3 must divide dp=4"):
        Layout(dp=4, ep=3)
