import pytest
from pydantic import ValidationError

from aitb.models.schedule import Burst, Compute, SendRecv
from workloads.federated import FedAvg, TrainTime, fedavg_schedule


def test_round_structure_sizes_and_incast():
    p = FedAvg(clients=10, rounds=2, model_parameters=1_000_000, bits_per_parameter=8,
               compression_ratio=4, aggregate_s=0.1)
    s = fedavg_schedule(p)
    assert s.world_size == 11
    downloads = [op for op in s.ops if isinstance(op, Burst)]
    uploads = [op for op in s.ops if isinstance(op, SendRecv)]
    assert len(downloads) == 2 and all(len(b.flows) == 10 for b in downloads)
    assert {f.size_bytes for b in downloads for f in b.flows} == {1_000_000}
    assert {u.size_bytes for u in uploads} == {250_000} and {u.dst for u in uploads} == {0}
    assert sum(isinstance(op, Compute) and op.ranks == (0,) for op in s.ops) == 2


def test_selection_is_seeded_and_overcommitted():
    p = FedAvg(clients=100, rounds=3, model_parameters=10, fraction=0.1, overcommit=1.3,
               seed=7)
    a, b = fedavg_schedule(p), fedavg_schedule(p)
    assert a.meta["rounds"] == b.meta["rounds"]
    assert all(len(r["selected"]) == 13 and r["target"] == 10 for r in a.meta["rounds"])
    other = fedavg_schedule(p.model_copy(update={"seed": 8}))
    assert other.meta["rounds"] != a.meta["rounds"]


def test_uploads_in_expected_finish_order_from_a_trace():
    trace = [5.0, 1.0, 3.0]
    s = fedavg_schedule(FedAvg(clients=3, model_parameters=10,
                               train_time=TrainTime(dist="trace", per_client_s=trace)))
    assert [op.src for op in s.ops if isinstance(op, SendRecv)] == [2, 3, 1]
    assert {op.ranks[0]: op.duration_s for op in s.ops if isinstance(op, Compute)} == \
        {1: 5.0, 2: 1.0, 3: 3.0}


@pytest.mark.parametrize("kw,needle", [
    ({"deadline_s": -1}, "deadline_s"),
    ({"bits_per_parameter": 2}, "bits_per_parameter"),
    ({"train_time": {"dist": "trace", "per_client_s": [1.0]}}, "per_client_s has 1 values"),
])
def test_invalid_parameters_name_the_key(kw, needle):
    with pytest.raises(ValidationError, match=needle):
        FedAvg(clients=3, model_parameters=10, **kw)


def test_hierarchical_rounds_go_through_cluster_aggregators():
    p = FedAvg(clients=6, model_parameters=100, bits_per_parameter=8, clusters=2)
    s = fedavg_schedule(p)
    assert s.world_size == 9  # global + 2 cluster aggregators + 6 clients
    uploads = [(op.src, op.dst) for op in s.ops if isinstance(op, SendRecv)]
    assert sorted(uploads[:6]) == [(3, 1), (4, 2), (5, 1), (6, 2), (7, 1), (8, 2)]
    assert uploads[6:] == [(1, 0), (2, 0)]
    first = next(op for op in s.ops if isinstance(op, Burst))
    assert [(f.src, f.dst) for f in first.flows] == [(0, 1), (0, 2)]
