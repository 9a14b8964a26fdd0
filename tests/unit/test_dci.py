"""DCI crossing report (analysis.dci) on a generated two-DC plan and hand-made records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import topologies
from analysis.dci import dci_collective_time_s, dci_report, union_length, write_dci
from models.plan import plan_to_dict


@pytest.fixture(scope="module")
def plan():
    return topologies.generate("multi_dc_leaf_spine", n_dcs=2, spines=2, leaves=2,
                               hosts_per_leaf=2)


def test_union_length():
    assert union_length([(0, 1), (0.5, 2), (3, 4)]) == 3.0
    assert union_length([(0, 4), (1, 2)]) == 4.0
    assert union_length([]) == 0.0


def flow(plan, src, dst, cid, size=1000):
    return {"record": "flow", "src_node": src, "dst_node": dst,
            "dst_ip": str(plan.address_of(dst)), "size_bytes": size, "collective_id": cid,
            "workload_index": 0, "fct_s": 0.1}


def coll(cid, group, kind, hosts, lo, hi):
    return {"record": "collective", "collective_id": cid, "op": "all_reduce", "group": group,
            "group_kind": kind, "hosts": hosts, "size_bytes": 4096, "iteration": 0,
            "rank_t_start": [lo, lo], "rank_t_end": [hi - 0.01, hi], "cct_s": hi - lo,
            "workload_index": 0, "workload": "w"}


def write_run(tmp_path: Path, plan) -> Path:
    a, b, c, d = "dc1-l1-h1", "dc2-l1-h1", "dc1-l1-h2", "dc2-l1-h2"
    (tmp_path / "plan.json").write_text(json.dumps(plan_to_dict(plan)))
    flows = [flow(plan, a, b, "c0.0"), flow(plan, b, a, "c0.0"),
             flow(plan, a, c, "c0.1"), flow(plan, c, a, "c0.1"),
             flow(plan, c, d, "c0.2", 500), flow(plan, d, c, "c0.2", 500)]
    colls = [coll("c0.0", "dp0", "dp", [a, b], 10.0, 10.4),
             coll("c0.1", "tp0", "tp", [a, c], 10.3, 10.5),
             coll("c0.2", "dp1", "dp", [c, d], 10.2, 10.6)]
    timeline = [{"workload_index": 0, "iteration": 0, "rank": 0, "t_start": 10.0,
                 "t_end": 10.9}, {"workload_index": 0, "iteration": 0, "rank": 1,
                                  "t_start": 10.05, "t_end": 11.0}]
    for name, rows in (("flows", flows), ("collectives", colls), ("timeline", timeline)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_report_names_the_crossing_collectives_and_their_share(tmp_path, plan):
    run = write_run(tmp_path, plan)
    r = dci_report(run)
    assert [c["collective_id"] for c in r["collectives"]] == ["c0.0", "c0.2"]
    c0 = r["collectives"][0]
    assert (c0["flows"], c0["flows_crossing"], c0["bytes_crossing"]) == (2, 2, 2000)
    assert c0["iteration_time_s"] == pytest.approx(1.0)  # timeline span 10.0 .. 11.0
    assert c0["share_of_iteration"] == pytest.approx(0.4)
    # the two DP all-reduces overlap: union [10.0, 10.6] = 0.6 s of a 1.0 s iteration
    assert r["iterations"][0]["dci_collective_time_s"] == pytest.approx(0.6)
    assert r["totals"]["share"] == pytest.approx(0.6)
    assert r["by_op_group"] == [{"op": "all_reduce", "group_kind": "dp", "size_bytes": 4096,
                                 "instances": 2, "groups": ["dp0", "dp1"],
                                 "cct_s_total": pytest.approx(0.8),
                                 "cct_s_mean": pytest.approx(0.4), "bytes_crossing": 3000}]
    assert dci_collective_time_s(run) == pytest.approx(0.6)
    assert json.loads(write_dci(run).read_text())["totals"] == r["totals"]


def test_no_dci_no_time(tmp_path):
    single = topologies.generate("single_switch", hosts=3)
    (tmp_path / "plan.json").write_text(json.dumps(plan_to_dict(single)))
    (tmp_path / "collectives.jsonl").write_text("")
    assert dci_collective_time_s(tmp_path) is None


def test_generated_multi_dc_plan_keeps_its_name():
    """The generator's name parameter names the plan (a loop variable once shadowed it and the
    plan was named after its last node)."""
    from topologies import build_spec

    assert build_spec("multi_dc_leaf_spine", {"name": "two-sites"}, "<test>").name == "two-sites"
    assert topologies.generate("multi_dc_leaf_spine").name == "multi-dc"


def test_the_runs_share_counts_only_the_iterations_of_workloads_that_ran_collectives(
        tmp_path, plan):
    """An incast after the training (timeline iterations, no collectives): before, the run's
    share divided the training's DCI time by both workloads' iterations (0.6 / 3.0 = 0.2)
    while the training's own result said 0.6; now both say 0.6 of its 1.0 s."""
    run = write_run(tmp_path, plan)
    with (run / "timeline.jsonl").open("a") as f:
        for i in range(2):
            f.write(json.dumps({"workload_index": 1, "iteration": i, "rank": 0,
                                "t_start": 12.0 + i, "t_end": 13.0 + i}) + "\n")
    r = dci_report(run)
    assert r["per_workload"] == [{"workload_index": 0, "workload": "w",
                                  "iteration_time_s": pytest.approx(1.0),
                                  "dci_collective_time_s": pytest.approx(0.6),
                                  "share": pytest.approx(0.6)}]
    assert r["totals"]["iteration_time_s"] == pytest.approx(1.0)
    assert r["totals"]["share"] == pytest.approx(0.6)
