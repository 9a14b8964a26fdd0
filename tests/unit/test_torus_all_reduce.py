"""2D-torus all-reduce (a ring per dimension): bytes per directed link in closed form."""

from collections import defaultdict

import pytest

from topologies import generate
from traffic_gen.algorithms import AlgorithmError, PlanRequest, build_plan
from traffic_gen.algorithms.check import check_plan
from traffic_gen.algorithms.torus import link_bytes_2d


def _pair_bytes(plan):
    out = defaultdict(int)
    for r, steps in enumerate(plan):
        for s in steps:
            if s.kind == "send":
                out[(r, s.peer)] += s.size_bytes
    return dict(out)


@pytest.mark.parametrize("x,y", [(3, 3), (4, 2), (4, 4)])
def test_only_neighbours_exchange_and_bytes_match_the_closed_form(x, y):
    size = 9 * 16 * 1024  # divisible by every x and x*y here: exact integer pieces
    rows = tuple(f"row{r // x}" for r in range(x * y))  # rank r at (row r // x, index r % x)
    plan = build_plan("all_reduce", "torus_2d", PlanRequest(x * y, size, sites=rows))
    check_plan(plan)
    row_bytes, col_bytes = link_bytes_2d(x, y, size)
    want = defaultdict(int)
    for r in range(x * y):
        a, k = divmod(r, x)
        want[(r, a * x + (k + 1) % x)] += row_bytes
        want[(r, ((a + 1) % y) * x + k)] += col_bytes
    assert _pair_bytes(plan) == {p: round(b) for p, b in want.items()}


def test_torus_generator_labels_rows_for_the_algorithm():
    plan = generate("torus", dims=[3, 4])
    sites = [h.labels["site"] for h in plan.hosts()]
    assert sites == [f"row{a}" for a in (1, 2, 3) for _ in range(4)]


def test_one_row_or_uneven_rows_are_refused():
    with pytest.raises(AlgorithmError, match="at least 2 rows of equal length"):
        build_plan("all_reduce", "torus_2d", PlanRequest(4, 64, sites=("a",) * 4))
    with pytest.raises(AlgorithmError, match="lengths"):
        build_plan("all_reduce", "torus_2d", PlanRequest(5, 64, sites=("a",) * 3 + ("b",) * 2))
