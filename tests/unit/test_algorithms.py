import pytest

from traffic_gen.algorithms import REGISTRY, AlgorithmError, PlanRequest, build_plan
from traffic_gen.algorithms.check import PlanCheckError, bytes_sent, check_plan
from traffic_gen.algorithms.steps import Step
from traffic_gen.algorithms.trees import dtree

SIZES = (2, 3, 4, 5, 6, 7, 8, 12, 16)


def _sites(n):
    return tuple("ab"[i * 2 // n] for i in range(n))


def _req(n, size, chunk=None, root=0):
    return PlanRequest(n, size, chunk, root % n, _sites(n))


@pytest.mark.parametrize("op,alg", [(op, a) for op, algs in REGISTRY.items() for a in algs])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("chunk", [None, 1000])
def test_every_plan_matches_and_completes(op, alg, n, chunk):
    if alg in ("hierarchical", "torus_2d") and n % 2:
        pytest.skip("needs equal sub-groups")
    plan = build_plan(op, alg, _req(n, 4096 * n + 7, chunk, root=1))
    assert len(plan) == n
    check_plan(plan)  # raises on unmatched sends/receives or a deadlock


@pytest.mark.parametrize("n", SIZES)
def test_ring_all_reduce_closed_form(n):
    size = 1000 * n
    plan = build_plan("all_reduce", "ring", _req(n, size))
    assert bytes_sent(plan) == [2 * (n - 1) * size // n] * n
    assert check_plan(plan) == 2 * (n - 1)  # 2(n-1) dependent steps


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("n", SIZES)
def test_ring_gather_scatter_closed_form(op, n):
    size = 1000 * n
    plan = build_plan(op, "ring", _req(n, size))
    assert bytes_sent(plan) == [(n - 1) * size // n] * n
    assert check_plan(plan) == n - 1


@pytest.mark.parametrize("alg", ["direct", "pairwise"])
@pytest.mark.parametrize("n", SIZES)
def test_all_to_all_closed_form(alg, n):
    size = 1000 * n
    plan = build_plan("all_to_all", alg, _req(n, size))
    assert bytes_sent(plan) == [(n - 1) * size // n] * n
    assert check_plan(plan) == (1 if alg == "direct" else n - 1)


def test_pairwise_step_k_peers():
    plan = build_plan("all_to_all", "pairwise", _req(5, 5000))
    sends = [s.peer for s in plan[2] if s.kind == "send"]
    recvs = [s.peer for s in plan[2] if s.kind == "recv"]
    assert sends == [3, 4, 0, 1] and recvs == [1, 0, 4, 3]


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_halving_doubling_power_of_two(n):
    size = 1024 * n
    plan = build_plan("all_reduce", "halving_doubling", _req(n, size))
    assert bytes_sent(plan) == [2 * (n - 1) * size // n] * n
    assert check_plan(plan) == 2 * (n.bit_length() - 1)  # 2 log2 n exchanges


@pytest.mark.parametrize("n", [3, 5, 6, 7, 12])
def test_halving_doubling_folds_extra_ranks_like_mpich(n):
    size, pof2 = 1024 * 64, 1 << (n.bit_length() - 1)
    rem = n - pof2
    sent = bytes_sent(build_plan("all_reduce", "halving_doubling", _req(n, size)))
    inner = 2 * (pof2 - 1) * size // pof2
    for r in range(n):
        if r < 2 * rem:
            assert sent[r] == (size if r % 2 == 0 else inner + size)
        else:
            assert sent[r] == inner


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 13, 14])
def test_double_binary_tree_structure_and_bytes(n):
    size = 2000 * n
    for tree in dtree(n):
        roots = [r for r, (up, _) in enumerate(tree) if up == -1]
        assert len(roots) == 1
        for r, (up, kids) in enumerate(tree):
            assert all(tree[c][0] == r for c in kids)
            if up != -1:
                assert r in tree[up][1]
    plan = build_plan("all_reduce", "double_binary_tree", _req(n, size))
    expect = [sum(size // 2 * ((up != -1) + len(kids)) for up, kids in (t[r] for t in dtree(n)))
              for r in range(n)]
    assert bytes_sent(plan) == expect
    assert sum(expect) == 2 * (n - 1) * size


def test_nccl_btree_shape_14_ranks():
    first, _ = dtree(14)  # the picture in NCCL src/graph/trees.cc
    assert first[0] == (-1, [8])
    assert first[8] == (0, [4, 12])
    assert first[12] == (8, [10, 13])
    assert first[13] == (12, [])


@pytest.mark.parametrize("alg", ["ring", "binomial_tree"])
@pytest.mark.parametrize("n", SIZES)
def test_broadcast_reduce_move_n_minus_1_buffers(alg, n):
    for op in ("broadcast", "reduce"):
        plan = build_plan(op, alg, _req(n, 777, root=1))
        assert sum(bytes_sent(plan)) == (n - 1) * 777
        root_bytes = bytes_sent(plan)[1 % n]
        assert root_bytes == 0 if op == "reduce" else root_bytes > 0


def test_gather_is_incast_at_root():
    plan = build_plan("gather", None, _req(8, 8000, root=3))
    assert check_plan(plan) == 1
    assert {s.peer for r, st in enumerate(plan) if r != 3 for s in st} == {3}
    assert len(plan[3]) == 7


def test_hierarchical_cross_traffic_is_smaller_than_flat_ring():
    n, size = 8, 8000
    sites = _sites(n)
    plan = build_plan("all_reduce", "hierarchical", PlanRequest(n, size, sites=sites))
    cross = sum(s.size_bytes for r, st in enumerate(plan) for s in st
                if s.kind == "send" and sites[s.peer] != sites[r])
    # per local index a 2-rank ring all-reduce of S/m: 2 x (2-1)/2 x S/4 per rank, 8 ranks
    assert cross == 8 * size // 4
    m, g = 4, 2  # local ranks per site, sites
    intra = 2 * (m - 1) * size // m  # reduce-scatter + all-gather inside the site
    assert bytes_sent(plan) == [intra + 2 * (g - 1) * size // (g * m)] * n


def test_chunking_pipelines_ring_steps():
    plan = build_plan("all_reduce", "ring", _req(4, 4000, chunk=250))
    assert bytes_sent(plan) == [6000] * 4
    first_forward = [s for s in plan[0] if s.kind == "send"][4]  # step 1, piece 0
    assert len(first_forward.deps) == 1 and plan[0][first_forward.deps[0]].kind == "recv"


def test_unknown_algorithm_lists_known_ones():
    with pytest.raises(AlgorithmError, match="known for all_reduce: ring, double_binary_tree"):
        build_plan("all_reduce", "butterfly", _req(4, 100))


def test_hierarchical_needs_equal_subgroups():
    with pytest.raises(AlgorithmError, match="hierarchical_leader"):
        build_plan("all_reduce", "hierarchical", PlanRequest(3, 300, sites=("a", "a", "b")))


def test_checker_finds_deadlock_and_mismatch():
    deadlock = ((Step("recv", 1, 10), Step("send", 1, 10, (0,))),
                (Step("recv", 0, 10), Step("send", 0, 10, (0,))))
    with pytest.raises(PlanCheckError, match="deadlock"):
        check_plan(deadlock)
    with pytest.raises(PlanCheckError, match="sizes differ"):
        check_plan(((Step("send", 1, 10),), (Step("recv", 0, 11),)))
