import json
import math

import pytest

from models.errors import SpecError
from models.records import (
    BurstRecord,
    CollectiveRecord,
    FailureRecord,
    FlowRecord,
    RankOpRecord,
    RecordError,
    TcpInfo,
    UdpStats,
    busbw_factor,
    percentile,
)
from models.schedule import Burst, Collective, Compute, Group, Schedule
from models.stragglers import SlowdownDraw, StragglerSpec
from traffic_gen.jsonl import RecordWriter, read_records
from traffic_gen.program import compile_program
from workloads.patterns import all_pairs, incast, one_to_many, pattern_schedule, permutation


def test_incast_builds_repeated_bursts_with_gaps():
    ops = incast(range(1, 17), 0, 64 << 10, repeats=3, gap_s=0.05)
    bursts = [o for o in ops if isinstance(o, Burst)]
    # the gap is the next burst's after_s (idle time after the previous burst's end)
    assert len(bursts) == 3 and len(ops) == 3
    assert [b.after_s for b in bursts] == [0.0, 0.05, 0.05]
    assert {f.dst for f in bursts[0].flows} == {0} and len(bursts[0].flows) == 16
    with pytest.raises(ValueError, match="also a sender"):
        incast([0, 1], 0, 10)


def test_permutation_is_a_seeded_derangement():
    (b,) = permutation(range(10), 1000, seed=3)
    pairs = [(f.src, f.dst) for f in b.flows]
    assert sorted(s for s, _ in pairs) == sorted(d for _, d in pairs) == list(range(10))
    assert all(s != d for s, d in pairs)
    assert permutation(range(10), 1000, seed=3) == (b,)
    assert permutation(range(10), 1000, seed=4) != (b,)


def test_all_pairs_and_one_to_many_counts():
    assert len(all_pairs(range(5), 10)[0].flows) == 20
    (b,) = one_to_many(0, [1, 2, 3], 10, "udp", 10**6)
    assert {f.protocol for f in b.flows} == {"udp"}


def test_burst_gets_its_own_phase():
    s = pattern_schedule("p", 5, (Compute(0.1),) + incast([1, 2, 3, 4], 0, 100, repeats=2,
                                                          gap_s=0.01))
    prog = compile_program(s, {r: f"h{r}" for r in range(5)})
    # the gap is the second burst's after_s, not a compute phase between the bursts
    assert [p.burst_id for p in prog.phases] == [None, "b0.1", "b0.2"]
    assert [p.after_s for p in prog.phases] == [0.0, 0.0, 0.01]
    (recv_op,) = prog.ranks[0][1]
    assert [st[1] for st in recv_op["steps"]] == [1, 2, 3, 4]  # one op: all receives at once


def test_udp_without_rate_is_refused():
    s = pattern_schedule("p", 2, one_to_many(0, [1], 10, "udp", None))
    with pytest.raises(SpecError, match="rate_bps"):
        compile_program(s, {0: "a", 1: "b"})


def test_lognormal_slowdowns_are_seeded():
    spec = StragglerSpec(fixed={1: 3.0}, lognormal_sigma=0.5, seed=7)
    da, db = SlowdownDraw(spec), SlowdownDraw(spec)
    a = [da.factor(r) for r in range(4)]
    b = [db.factor(r) for r in range(4)]
    assert a == b and len(set(a)) == 4
    assert SlowdownDraw(StragglerSpec(fixed={1: 3.0})).factor(1) == 3.0
    with pytest.raises(ValueError):
        StragglerSpec(fixed={0: 0.0})


def test_compile_refuses_unplaced_rank_naming_it():
    s = Schedule("x", 3, {"g": Group("g", "dp", (0, 1, 2))}, (Collective("all_reduce", "g", 9),))
    with pytest.raises(SpecError, match=r"rank\(s\) \[2\]"):
        compile_program(s, {0: "a", 1: "b"})


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 8, 2 * 7 / 8), ("all_gather", 8, 7 / 8), ("reduce_scatter", 4, 3 / 4),
    ("all_to_all", 4, 3 / 4), ("broadcast", 8, 1.0), ("reduce", 8, 1.0)])
def test_busbw_factors_are_nccl_tests(op, n, factor):
    assert busbw_factor(op, n) == pytest.approx(factor)


def test_percentile_matches_numpy_linear():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(101)), 99) == 99
    assert math.isnan(percentile([], 50))


def _records():
    tcp = TcpInfo(3, 4096, 1 << 20, 1, 0.001, 0.0005, 10, 10**9, "cubic")
    return [
        FlowRecord("r", "tcp", "a", "b", 0, 1, "198.18.0.1", "198.18.0.2", 1, 2, 10, 1.0, 1.1,
                   1.2, 0.2, collective_id="c0.0", tcp=tcp),
        FlowRecord("r", "udp", "a", "b", 0, 1, "198.18.0.1", "198.18.0.2", 1, 2, 10, 1.0, None,
                   None, None, burst_id="b0.0", udp=UdpStats(10, 8, 2, 1, 14000)),
        CollectiveRecord.build(rank_t_start=[1.0, 1.5], rank_t_end=[3.0, 2.0], op="all_reduce",
                               size_bytes=200, ranks=[0, 1], run_id="r", collective_id="c",
                               algorithm="ring", group="g", group_kind="dp", hosts=("a", "b"),
                               iteration=0, op_index=0),
        BurstRecord.build(planned_start=10.0, sender_ranks=[1, 2], actual_start=[10.001, 10.003],
                          run_id="r", burst_id="b", label="", iteration=0, op_index=0),
        RankOpRecord("r", 0, "a", 0, 1, "compute", "fwd", 1.0, 2.0, 2.5),
        FailureRecord("r", "a", "boom", rank=1, peer=2, op="c0.1"),
    ]


def test_records_round_trip_through_jsonl(tmp_path):
    w = RecordWriter(tmp_path)
    w.write(_records())
    w.close()
    back = []
    for cls, name in [(FlowRecord, "flows"), (CollectiveRecord, "collectives"),
                      (BurstRecord, "bursts"), (RankOpRecord, "timeline"),
                      (FailureRecord, "failures")]:
        back += list(read_records(tmp_path / f"{name}.jsonl", cls))
    assert back == _records()
    c = back[2]
    assert (c.cct_s, c.algbw_Bps, c.busbw_Bps) == (2.0, 100.0, 100.0)
    assert back[3].skew_p50_s == pytest.approx(0.002) and back[3].skew_max_s == \
        pytest.approx(0.003)


def test_wrong_kind_or_version_is_refused():
    d = _records()[4].to_dict()
    with pytest.raises(RecordError, match="expected a flow"):
        FlowRecord.from_dict(d)
    with pytest.raises(RecordError, match="schema_version"):
        RankOpRecord.from_dict({**d, "schema_version": 99})
    json.dumps(d)
