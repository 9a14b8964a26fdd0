import pytest
from pydantic import ValidationError

from models.errors import SpecError
from models.schedule import Burst, Compute, Gather, Schedule, ScheduleError
from traffic_gen.program import compile_program
from workloads.federated import FedAvg, TrainTime, fedavg_schedule
from workloads.fl_placement import place_clusters
from workloads.gossip import Gossip, gossip_schedule
from workloads.spec import parse_workload


def test_round_structure_sizes_and_incast():
    p = FedAvg(clients=10, rounds=2, model_parameters=1_000_000, bits_per_parameter=8,
               compression_ratio=4, aggregate_s=0.1, deadline_s=5)
    s = fedavg_schedule(p)
    assert s.world_size == 11
    gathers = [op for op in s.ops if isinstance(op, Gather)]
    assert [g.round for g in gathers] == [0, 1]
    assert all(g.root == 0 and g.srcs == tuple(range(1, 11)) for g in gathers)
    assert {(g.down_bytes, g.size_bytes, g.deadline_s, g.level) for g in gathers} == {
        (1_000_000, 250_000, 5.0, "global")}
    assert sum(isinstance(op, Compute) and op.ranks == (0,) for op in s.ops) == 2


def test_selection_is_seeded_and_overcommitted():
    p = FedAvg(clients=100, rounds=3, model_parameters=10, fraction=0.1, overcommit=1.3,
               seed=7)
    a, b = fedavg_schedule(p), fedavg_schedule(p)
    assert a.meta["rounds"] == b.meta["rounds"]
    assert all(len(r["selected"]) == 13 and r["target"] == 10 for r in a.meta["rounds"])
    # the aggregator stops after the first 10 of the 13 finish
    assert {(len(g.srcs), g.quorum) for g in a.ops if isinstance(g, Gather)} == {(13, 10)}
    other = fedavg_schedule(p.model_copy(update={"seed": 8}))
    assert other.meta["rounds"] != a.meta["rounds"]


def test_training_times_come_from_a_per_client_trace():
    trace = [5.0, 1.0, 3.0]
    s = fedavg_schedule(FedAvg(clients=3, model_parameters=10,
                               train_time=TrainTime(dist="trace", per_client_s=trace)))
    (g,) = s.ops
    assert dict(zip(g.srcs, g.compute_s, strict=True)) == {1: 5.0, 2: 1.0, 3: 3.0}


def test_quantisation_sets_the_model_size():
    sizes = {b: FedAvg(clients=1, model_parameters=1001, bits_per_parameter=b).model_bytes
             for b in (4, 8, 16, 32)}
    assert sizes == {4: 501, 8: 1001, 16: 2002, 32: 4004}  # ceil(1001 x bits / 8)


@pytest.mark.parametrize("kw,needle", [
    ({"deadline_s": -1}, "deadline_s"),
    ({"bits_per_parameter": 2}, "bits_per_parameter"),
    ({"bits_per_parameter": 33}, "bits_per_parameter"),
    ({"fraction": 0}, "fraction"),
    ({"fraction": 1.5}, "fraction"),
    ({"overcommit": 0.5}, "overcommit"),
    ({"compression_ratio": 0.5}, "compression_ratio"),
    ({"train_time": {"dist": "trace", "per_client_s": [1.0]}}, "per_client_s has 1 values"),
])
def test_invalid_parameters_name_the_key(kw, needle):
    with pytest.raises(ValidationError, match=needle):
        FedAvg(clients=3, model_parameters=10, **kw)


@pytest.mark.parametrize("kind", ["fedavg", "hierarchical", "gossip"])
def test_spec_errors_name_the_file_and_key_path(kind):
    data = {"kind": kind, "clients": 4, "model_parameters": 10, "deadline_s": -2}
    with pytest.raises(SpecError) as exc:
        parse_workload(data, file="exp.yaml", prefix=("workloads", 0))
    (issue,) = exc.value.issues
    assert issue.file == "exp.yaml" and issue.key_path == ("workloads", 0, "deadline_s")


def test_hierarchical_rounds_go_through_cluster_aggregators():
    p = FedAvg(clients=6, model_parameters=100, bits_per_parameter=8, clusters=2,
               deadline_s=4)
    s = fedavg_schedule(p)
    assert s.world_size == 9  # global + 2 cluster aggregators + 6 clients
    first = s.ops[0]
    assert isinstance(first, Burst) and [(f.src, f.dst) for f in first.flows] == [(0, 1), (0, 2)]
    c1, c2, top = s.ops[1:4]
    assert (c1.root, c1.srcs, c1.level) == (1, (3, 5, 7), "cluster")
    assert (c2.root, c2.srcs, c2.level) == (2, (4, 6, 8), "cluster")
    assert (top.root, top.srcs, top.level, top.down_bytes) == (0, (1, 2), "global", 0)
    # every deadline counts from the round's first op (the download to the clusters)
    assert {g.round_start_op for g in (c1, c2, top)} == {0}
    phases = compile_program(s, {r: f"h{r}" for r in range(9)}).phases
    assert len(phases) == 3  # download burst, the cluster gathers together, the global one


def test_cluster_placement_puts_each_cluster_on_its_own_site():
    sites = {"core": ["g"], "a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]}
    assert place_clusters(2, 4, sites) == {0: "g", 1: "a0", 2: "b0", 3: "a1", 4: "b1",
                                           5: "a2", 6: "b2"}
    with pytest.raises(SpecError, match="needs 4 hosts"):
        place_clusters(2, 6, sites)
    with pytest.raises(SpecError, match="needs 4 sites"):
        place_clusters(3, 6, sites)


def test_gossip_ring_exchanges_with_k_neighbours():
    s = gossip_schedule(Gossip(clients=6, model_parameters=100, peers=2, rounds=2,
                               deadline_s=3))
    gathers = [op for op in s.ops if isinstance(op, Gather)]
    assert len(gathers) == 12 and {g.level for g in gathers} == {"gossip"}
    assert {g.root: g.srcs for g in gathers if g.round == 0} == {
        i: tuple(sorted(((i - 1) % 6, (i + 1) % 6))) for i in range(6)}
    assert len(compile_program(s, {r: f"h{r}" for r in range(6)}).phases) == 2  # 1 per round


def test_gossip_random_overlay_is_seeded_and_symmetric():
    p = Gossip(clients=8, model_parameters=10, peers=3, overlay="random", seed=3)
    a, b = gossip_schedule(p), gossip_schedule(p)
    assert a.meta["rounds"] == b.meta["rounds"]
    nb = a.meta["rounds"][0]["neighbours"]
    assert all(len(v) >= 3 and all(i in nb[j] for j in v) for i, v in nb.items())
    with pytest.raises(ValidationError, match="even"):
        Gossip(clients=8, model_parameters=10, peers=3)


@pytest.mark.parametrize("kw,needle", [
    ({"srcs": (0, 1)}, "hold the root"), ({"quorum": 3}, "quorum"),
    ({"deadline_s": -1.0}, "deadline_s"), ({"compute_s": (1.0,)}, "one value per source"),
    ({"level": "edge"}, "unknown level"), ({"round_start_op": 1}, "round_start_op"),
])
def test_bad_gather_is_refused(kw, needle):
    g = Gather(**{"root": 0, "srcs": (1, 2), "size_bytes": 10, **kw})
    with pytest.raises(ScheduleError, match=needle):
        Schedule("t", 3, {}, (g,))


def test_round_record_round_trips_with_the_contract_fields():
    from models.records import RoundRecord

    r = RoundRecord(run_id="x", round=2, t_start=10.0, t_end=11.5, round_time_s=1.5,
                    clients_selected=10, clients_finished=8, clients_dropped=("e3", "e7"),
                    deadline_s=1.5, bytes_down=8_700_000, bytes_up=2_000_000,
                    aggregator="srv1", level="global")
    d = r.to_dict()
    assert d["record"] == "round" and d["schema_version"] == 1
    assert {"round", "t_start", "t_end", "round_time_s", "clients_selected", "clients_finished",
            "clients_dropped", "deadline_s", "bytes_down", "bytes_up", "aggregator",
            "level"} <= set(d)
    assert d["clients_dropped"] == ["e3", "e7"] and RoundRecord.from_dict(d) == r


def test_experiment_errors_name_the_file_and_key(tmp_path):
    from orchestration.run.runner import prepare

    exp = tmp_path / "bad.yaml"
    exp.write_text("name: bad\ntopology: {generator: single_switch, params: {hosts: 4}}\n"
                   "workloads:\n  - kind: fedavg\n    clients: 3\n    model_parameters: 10\n"
                   "    deadline_s: -1\n    bits_per_parameter: 40\n    fraction: 0\n")
    with pytest.raises(SpecError) as exc:
        prepare(exp)
    keys = {i.key_path for i in exc.value.issues}
    assert keys == {("workloads", 0, k) for k in ("deadline_s", "bits_per_parameter",
                                                  "fraction")}
    assert all(i.file == str(exp) for i in exc.value.issues)
