"""Deadline-bounded gathers (FL rounds) on loopback: who is dropped, what the round records
say, and that a cut-off transfer really stops. Late clients are made late by their training
time (loopback has no rate limit; the netns tests use slow links)."""

import json
import os
import signal
import threading
import time

import pytest

from models.records import FlowRecord, RoundRecord
from models.schedule import Burst, Compute, Flow, Gather, Schedule
from traffic_gen import replay
from traffic_gen.jsonl import read_records
from workloads.federated import FedAvg, TrainTime, fedavg_schedule
from workloads.gossip import Gossip, gossip_schedule

pytestmark = pytest.mark.timeout(120)


def _run(schedule, launcher, addresses, tmp_path):
    res = replay(schedule, {r: f"h{r}" for r in range(schedule.world_size)}, launcher,
                 tmp_path, addresses)
    assert res.ok, res.failures
    return list(read_records(res.paths["rounds"], RoundRecord)), \
        list(read_records(res.paths["flows"], FlowRecord))


@pytest.mark.serial  # timing margins: no other xdist worker runs a test meanwhile
def test_late_client_is_dropped_at_the_deadline_every_round(launcher, addresses, tmp_path):
    # client 4 trains 3 s, the others 0.05 s; deadline 0.6 s after the round start
    ops = []
    for r in range(2):
        ops += [Gather(0, (1, 2, 3, 4), 200_000, 1_000_000, (0.05, 0.05, 0.05, 3.0), 0.6,
                       round=r, label=f"round{r}"), Compute(0.01, (0,))]
    rounds, flows = _run(Schedule("t", 5, {}, tuple(ops)), launcher, addresses, tmp_path)
    assert [(r.round, r.clients_selected, r.clients_finished, r.clients_dropped)
            for r in rounds] == [(0, 4, 3, ("h4",)), (1, 4, 3, ("h4",))]
    for r in rounds:
        assert r.drop_reasons == {"h4": "deadline"} and r.aggregator == "h0"
        # the root stops waiting at the deadline; 0.1 s for thread wake-ups on 2 loaded cores
        assert 0.6 <= r.round_time_s < 0.7
        assert r.bytes_down == 4 * 1_000_000  # everyone got the model (loopback is fast)
        assert r.bytes_up == 3 * 200_000  # h4 never started its upload
    # the late client's upload never produced a finished flow; the others did
    ups = [f for f in flows if f.step == "up"]
    assert sorted(f.src_node for f in ups if f.t_end is not None) == ["h1", "h1", "h2", "h2",
                                                                      "h3", "h3"]
    # the dropped client gave up at the deadline instead of training on for 3 s
    timeline = [json.loads(x) for x in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    late = [t for t in timeline if t["node"] == "h4"]
    assert len(late) == 2 and all(t["t_end"] - t["t_start"] < 1.0 for t in late)


@pytest.mark.serial  # timing margins: no other xdist worker runs a test meanwhile
def test_overcommit_stops_after_the_first_k(launcher, addresses, tmp_path):
    trace = [0.1, 0.1, 0.1, 1.5, 1.5]  # the two slowest are over-committed extras
    p = FedAvg(clients=5, model_parameters=50_000, fraction=0.6, overcommit=1.6,
               train_time=TrainTime(dist="trace", per_client_s=trace))
    assert p.selected_per_round == 5 and p.quorum == 3
    (r,), _ = _run(fedavg_schedule(p), launcher, addresses, tmp_path)
    assert (r.clients_selected, r.clients_finished) == (5, 3)
    assert sorted(r.clients_dropped) == ["h4", "h5"]
    assert set(r.drop_reasons.values()) == {"quorum"} and r.deadline_s is None
    assert r.round_time_s < 1.0  # it did not wait for the 1.5 s stragglers


def test_hierarchical_round_records_per_cluster_and_global(launcher, addresses, tmp_path):
    trace = [0.05, 0.05, 0.05, 2.0]  # client 4 (rank 6, cluster 2) misses the deadline
    p = FedAvg(clients=4, clusters=2, model_parameters=20_000, deadline_s=0.8,
               train_time=TrainTime(dist="trace", per_client_s=trace))
    rounds, _ = _run(fedavg_schedule(p), launcher, addresses, tmp_path)
    by = {(r.level, r.aggregator): r for r in rounds}
    assert set(by) == {("cluster", "h1"), ("cluster", "h2"), ("global", "h0")}
    assert by[("cluster", "h1")].clients_dropped == ()
    assert by[("cluster", "h2")].clients_dropped == ("h6",)
    assert by[("global", "h0")].clients_finished == 2
    # all three count from the same round start: the download to the cluster aggregators
    assert len({r.t_start for r in rounds}) == 1
    assert by[("global", "h0")].t_end >= by[("cluster", "h2")].t_end


def test_gossip_records_one_round_per_node(launcher, addresses, tmp_path):
    p = Gossip(clients=4, model_parameters=20_000, peers=2, rounds=2, deadline_s=2.0,
               train_time=TrainTime(seconds=0.05))
    rounds, flows = _run(gossip_schedule(p), launcher, addresses, tmp_path)
    assert len(rounds) == 8 and {r.level for r in rounds} == {"gossip"}
    assert all(r.clients_selected == 2 and r.clients_dropped == () for r in rounds)
    assert sum(r.bytes_up for r in rounds) == 8 * 2 * p.upload_bytes


def test_aggregator_crash_mid_round_fails_the_run_without_waiting(launcher, addresses,
                                                                  tmp_path):
    # phase 0: a tiny burst (its record tells the test the run is going); phase 1: a round
    # whose clients train 60 s. The aggregator's agent is killed once phase 0 is recorded.
    ops = (Burst((Flow(1, 0, 1000),)),
           Gather(0, (1, 2, 3), 1000, 1000, (60.0, 60.0, 60.0), label="round0"))

    def kill_root():
        deadline = time.time() + 20
        while time.time() < deadline:
            f = tmp_path / "flows.jsonl"
            if f.exists() and f.read_text():
                time.sleep(0.3)
                os.kill(launcher.procs["h0"].pid, signal.SIGKILL)
                return
            time.sleep(0.01)

    threading.Thread(target=kill_root, daemon=True).start()
    t = time.time()
    res = replay(Schedule("t", 4, {}, ops), {r: f"h{r}" for r in range(4)}, launcher,
                 tmp_path, addresses)
    # the clients stop training when their connection dies: the run ends long before the
    # 60 s of training (30 s: agent start-up on 2 loaded cores took up to 5 s; waiting for the
    # training would take 60 s, so any margin up to that tells the two apart)
    assert not res.ok and time.time() - t < 30.0
    assert res.failures[0].node == "h0"
    assert all(p.poll() is not None for p in launcher.procs.values())
