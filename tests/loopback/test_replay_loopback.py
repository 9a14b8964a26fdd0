import json
import os
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from models.errors import SpecError
from models.records import CollectiveRecord, FlowRecord, RankOpRecord
from models.schedule import Burst, Collective, Compute, Flow, Group, Schedule
from models.stragglers import StragglerSpec
from traffic_gen import ReplayOptions, replay
from traffic_gen.algorithms import PlanRequest, build_plan
from traffic_gen.algorithms.check import bytes_sent
from traffic_gen.jsonl import read_records
from traffic_gen.tcpinfo import TcpKnobs

pytestmark = pytest.mark.timeout(120)


def _sched(ops, n=4, iterations=1):
    return Schedule("t", n, {"g": Group("g", "dp", tuple(range(n)))}, tuple(ops),
                    iterations=iterations)


def _place(n):
    return {r: f"h{r}" for r in range(n)}


def _flows(res):
    return list(read_records(res.paths["flows"], FlowRecord))


def test_ring_all_reduce_moves_closed_form_bytes(launcher, addresses, tmp_path):
    n, size = 4, 8 << 20
    res = replay(_sched([Collective("all_reduce", "g", size)]), _place(n), launcher,
                 tmp_path, addresses)
    assert res.ok, res.failures
    flows = _flows(res)
    app = defaultdict(int)
    kernel = defaultdict(int)
    for f in flows:
        app[f.src_rank] += f.size_bytes
        # TCP_INFO bytes_sent counts retransmitted payload too (tcp(7), tcpi_bytes_sent)
        kernel[f.src_rank] += f.tcp.bytes_sent - f.tcp.bytes_retrans
        assert f.t_first_byte >= f.t_start - 0.001 and f.fct_s > 0
    assert dict(app) == {r: 2 * (n - 1) * size // n for r in range(n)}
    # the kernel's payload count, no retransmissions on loopback: exact
    assert dict(kernel) == dict(app)
    (c,) = read_records(res.paths["collectives"], CollectiveRecord)
    assert c.algorithm == "ring" and c.busbw_factor == 1.5
    assert c.cct_s == pytest.approx(max(c.rank_t_end) - min(c.rank_t_start))
    transport = json.loads((tmp_path / "transport.json").read_text())["h0"]
    assert transport["connections"][0]["nodelay"] is True
    assert transport["sysctls"]["net.ipv4.tcp_congestion_control"] in ("bbr", "cubic", "reno")


def test_steps_striped_over_connections_and_knobs_read_back(launcher, addresses, tmp_path):
    n, size = 3, 3 << 20
    opts = ReplayOptions(conns_per_peer=2, knobs=TcpKnobs(congestion_control="cubic",
                                                          sndbuf_bytes=1 << 20))
    res = replay(_sched([Collective("all_gather", "g", size)], n=n), _place(n), launcher,
                 tmp_path, addresses, opts)
    assert res.ok, res.failures
    flows = _flows(res)
    assert len(flows) == n * (n - 1) * 2  # n-1 steps per rank, each over 2 connections
    assert len({(f.sport, f.src_rank) for f in flows}) == 2 * n
    assert sum(f.size_bytes for f in flows) == (n - 1) * size
    assert {f.tcp.congestion_control for f in flows} == {"cubic"}
    conns = json.loads((tmp_path / "transport.json").read_text())["h1"]["connections"]
    assert {c["sndbuf_bytes"] for c in conns} == {2 << 20}  # the kernel doubles it, socket(7)


def test_every_algorithm_completes_with_plan_bytes(launcher, addresses, tmp_path):
    n = 5
    ops = [("all_reduce", "double_binary_tree"), ("all_reduce", "halving_doubling"),
           ("all_reduce", "hierarchical_leader"), ("all_to_all", "direct"),
           ("broadcast", "binomial_tree"), ("gather", None), ("barrier", None)]
    size = 300_000
    sched = _sched([Collective(op, "g", size, alg, chunk_bytes=64 << 10, root=2)
                    for op, alg in ops], n=n)
    res = replay(sched, _place(n), launcher, tmp_path, addresses,
                 ReplayOptions(sites={"h0": "a", "h1": "a", "h2": "b", "h3": "b", "h4": "b"}))
    assert res.ok, res.failures
    flows = _flows(res)
    for i, (op, alg) in enumerate(ops):
        sites = ("a", "a", "b", "b", "b")
        plan = build_plan(op, alg, PlanRequest(n, size, 64 << 10, 2, sites))
        sent = defaultdict(int)
        for f in flows:
            if f.op_index == i:
                sent[f.src_rank] += f.size_bytes
        assert [sent[r] for r in range(n)] == bytes_sent(plan), (op, alg)
    assert len(list(read_records(res.paths["collectives"], CollectiveRecord))) == len(ops)


@pytest.mark.serial  # timing margins: no other xdist worker runs a test meanwhile
def test_straggler_delays_collective(launcher, addresses, tmp_path):
    sched = _sched([Compute(0.1), Collective("all_reduce", "g", 1 << 20)], iterations=2)
    opts = ReplayOptions(stragglers=StragglerSpec(fixed={2: 4.0}))
    res = replay(sched, _place(4), launcher, tmp_path, addresses, opts)
    assert res.ok, res.failures
    for c in read_records(res.paths["collectives"], CollectiveRecord):
        starts = dict(zip(c.ranks, c.rank_t_start, strict=True))
        others = max(t for r, t in starts.items() if r != 2)
        # rank 2 computes 0.4 s instead of 0.1 s; 50 ms covers sleep jitter on a shared host
        assert starts[2] - others == pytest.approx(0.3, abs=0.05)
        assert c.cct_s >= 0.3  # the others wait inside the collective for the straggler
    ranks = [o for o in read_records(res.paths["timeline"], RankOpRecord)
             if o.kind == "compute"]
    assert {o.slowdown for o in ranks if o.rank == 2} == {4.0}


@pytest.mark.serial  # timing margins: no other xdist worker runs a test meanwhile
def test_burst_records_start_skew_and_udp_counts(launcher, addresses, tmp_path):
    flows = tuple(Flow(s, 0, 200_000) for s in range(1, 4)) + \
        (Flow(1, 2, 140_000, "udp", 50_000_000),)
    res = replay(_sched([Burst(flows, label="incast")]), _place(4), launcher, tmp_path,
                 addresses, ReplayOptions(rt_priority=1 if os.geteuid() == 0 else None))
    assert res.ok, res.failures
    assert res.skew["count"] == 4
    # generous bound: a unit host shared with other tests; the 1 ms target is for bench/
    assert res.skew["max_s"] < 0.05
    (udp,) = [f for f in _flows(res) if f.kind == "udp"]
    assert udp.udp.packets_sent == 100 and udp.udp.packets_received + udp.udp.lost == 100
    # paced at 50 Mbit/s: 140 kB take about 22 ms; allow scheduling noise
    assert 0.015 < udp.t_end - udp.t_start < 0.5


def test_crashed_agent_fails_run_and_keeps_partial_records(launcher, addresses, tmp_path):
    # a 60 s compute phase that the run must not wait for once an agent died
    sched = _sched([Burst((Flow(1, 0, 1000),)), Compute(60.0), Collective("all_reduce", "g",
                                                                           1 << 20)])

    _after_first_phase(tmp_path, lambda: (time.sleep(0.3),
                                          os.kill(launcher.procs["h2"].pid, signal.SIGKILL)))
    t = time.time()
    res = replay(sched, _place(4), launcher, tmp_path, addresses)
    # ended long before the 60 s compute would have (start-up on 2 loaded cores took 3 s)
    assert not res.ok and time.time() - t < 30.0
    (fail,) = res.failures
    assert fail.node == "h2" and "h2" in fail.detail
    assert len(_flows(res)) == 1  # the first phase's flow is kept
    assert all(p.poll() is not None for p in launcher.procs.values())


def _after_first_phase(tmp_path, action):
    def run():
        deadline = time.time() + 20
        while time.time() < deadline:
            if (tmp_path / "flows.jsonl").exists() and (tmp_path / "flows.jsonl").read_text():
                action()
                return
            time.sleep(0.01)
    threading.Thread(target=run, daemon=True).start()


def test_transfer_timeout_names_node_rank_peer_op(launcher, addresses, tmp_path):
    # phase 0: a tiny burst; phase 1: 3 s of compute, during which h3 is frozen (SIGSTOP)
    # once phase 0 is recorded; phase 2: an all-reduce whose 16 MiB steps overflow the socket
    # buffers towards frozen h3. The compute gap keeps h3 from writing any byte of its own
    # step (then h0, receiving from h3, could time out first: a race, not the behaviour here)
    sched = _sched([Burst((Flow(1, 0, 1000),)), Compute(3.0),
                    Collective("all_reduce", "g", 64 << 20)])
    _after_first_phase(tmp_path, lambda: os.kill(launcher.procs["h3"].pid, signal.SIGSTOP))
    # start_mode "sleep": with the starter (kick.py) the first bytes of frozen h3's own step
    # would still be written at the instant, and h0 could time out on them before h2 does
    res = replay(sched, _place(4), launcher, tmp_path, addresses,
                 ReplayOptions(transfer_timeout_s=1.0, start_mode="sleep"))
    assert not res.ok
    (fail,) = res.failures
    assert fail.node == "h2" and (fail.rank, fail.peer, fail.op) == (2, 3, "c0.2")
    assert "within timeouts.transfer (1 s)" in fail.detail
    assert "rank 2 -> peer rank 3" in fail.detail
    assert all(p.poll() is not None for p in launcher.procs.values())


@pytest.mark.parametrize("placement,sched,needle", [
    ({0: "h0", 1: "h1", 2: "h2"}, _sched([Collective("all_reduce", "g", 10)]), r"\[3\]"),
    ({0: "h0", 1: "h1", 2: "h2", 3: "nohost"}, _sched([Collective("all_reduce", "g", 10)]),
     "nohost"),
    (_place(4), _sched([Collective("all_reduce", "g", 10, "butterfly")]),
     "known for all_reduce: ring"),
])
def test_bad_input_refused_before_any_process(launcher, addresses, tmp_path, placement, sched,
                                              needle):
    with pytest.raises(SpecError, match=needle):
        replay(sched, placement, launcher, tmp_path, addresses)
    assert launcher.procs == {}


def test_agent_endpoints_refuse_non_lab_addresses():
    from traffic_gen.endpoints import Endpoints
    from traffic_gen.transfers import Shared

    shared = Shared(lambda r: None, lambda f: None, 1.0)
    eps = Endpoints("h0", "127.0.0.1", {"127.0.0.1", "127.0.0.2"}, shared, {})
    eps.listen([])
    try:
        with pytest.raises(ValueError, match="refusing to connect to 127.0.0.99"):
            eps.connect([[0, 1, 0, "tcp"]], {"1": ["127.0.0.99", 9, "h1"]}, {}, 0)
    finally:
        eps.close()


def test_deep_run_dir_gets_a_short_control_socket(launcher, addresses, tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    res = replay(_sched([Collective("all_reduce", "g", 4096)], n=2), _place(2), launcher, deep,
                 addresses, ReplayOptions(run_id="deadbeef"))
    assert res.ok, res.failures
    assert not list(Path("/tmp").glob("aitb-deadbeef-*"))


def test_live_slowdown_reaches_the_rank_from_its_next_compute(launcher, addresses, tmp_path):
    # an events: straggler (testbed/live/trace_player.py) sends the controller's set_slowdown once
    # the agents are up: rank 1 computes 3 x longer from its first compute on, on top of the
    # compiled straggler factor of rank 2
    sched = _sched([Compute(0.05), Collective("all_reduce", "g", 1 << 16)], iterations=2)
    sent = []

    def on_controller(ctl):
        if ctl is not None:
            sent.append(ctl.set_slowdown(1, 3.0))

    opts = ReplayOptions(stragglers=StragglerSpec(fixed={2: 2.0}), on_controller=on_controller)
    res = replay(sched, _place(4), launcher, tmp_path, addresses, opts)
    assert res.ok, res.failures
    assert sent == ["h1"]
    ranks = [o for o in read_records(res.paths["timeline"], RankOpRecord)
             if o.kind == "compute"]
    assert {o.rank: o.slowdown for o in ranks} == {0: 1.0, 1: 3.0, 2: 2.0, 3: 1.0}
    # a sleep is never shorter than asked: 3 x 50 ms for rank 1
    assert all(o.t_end - o.t_start >= 0.15 for o in ranks if o.rank == 1)


def test_an_agent_frozen_by_the_controller_is_continued_before_the_abort(
        launcher, addresses, tmp_path):
    # node_down with agent: freeze (Controller.signal_agent SIGSTOP): the peers' transfers
    # time out; ending the run continues the agent first, so it hears the abort and ends by
    # itself (exit 3) instead of waiting stopped for the SIGKILL after stop_timeout_s
    sched = _sched([Burst((Flow(1, 0, 1000),)), Compute(3.0),
                    Collective("all_reduce", "g", 64 << 20)])
    ctls, frozen = [], []

    def on_phase(index, iteration, t0):
        if index == 1:
            frozen.append(ctls[0].signal_agent("h3", signal.SIGSTOP))

    opts = ReplayOptions(transfer_timeout_s=1.0, start_mode="sleep", stop_timeout_s=20.0,
                         on_controller=lambda c: ctls.append(c) if c else None,
                         on_phase=on_phase)
    res = replay(sched, _place(4), launcher, tmp_path, addresses, opts)
    assert not res.ok and frozen == [launcher.procs["h3"].pid]
    (fail,) = res.failures
    assert "within timeouts.transfer (1 s)" in fail.detail and fail.peer == 3
    assert launcher.procs["h3"].returncode == 3 and ctls[0].frozen == set()
