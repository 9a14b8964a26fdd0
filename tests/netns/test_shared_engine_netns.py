"""The shared traffic engine (traffic_gen/engine.py) against the per-host agents on real
namespaces: the same records from the same schedule (collectives, bytes per rank, flows per
step, timeline, CCT present), with fewer processes; and a failure reaches the controller."""

from collections import Counter, defaultdict

import pytest

from models.records import CollectiveRecord, FlowRecord, RankOpRecord
from models.schedule import Burst, Collective, Compute, Flow, Group, Schedule
from traffic_gen import ReplayOptions, replay
from traffic_gen.jsonl import read_records
from traffic_gen.launch import NetnsExecLauncher

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]


class _Counting(NetnsExecLauncher):
    """Remembers every process it started (agents in a namespace, engines in the root)."""

    def __init__(self, namespaces):
        super().__init__(namespaces)
        self.started, self.in_hosts, self.in_root = [], [], []

    def popen(self, node, argv, **kw):
        p = super().popen(node, argv, **kw)
        self.started.append(p)
        self.in_hosts.append(argv)
        return p

    def popen_host(self, argv, **kw):
        p = super().popen_host(argv, **kw)
        self.started.append(p)
        self.in_root.append(argv)
        return p


def _schedule(n):
    ops = (Compute(0.002, label="fwd"), Collective("all_reduce", "g", 1 << 20, "ring",
                                                   label="grad"),
           Burst(tuple(Flow(s, 0, 256 << 10) for s in range(1, n)), label="incast"))
    return Schedule("eng", n, {"g": Group("g", "dp", tuple(range(n)))}, ops, iterations=2)


def _replay(star, engine, run_dir):
    n = len(star.hosts)
    launcher = _Counting(star.hosts)
    res = replay(_schedule(n), {r: f"h{r}" for r in range(n)}, launcher, run_dir,
                 star.addresses, ReplayOptions(traffic_engine=engine, engines=2,
                                               transfer_timeout_s=30))
    assert res.ok, res.failures
    assert all(p.poll() is not None for p in launcher.started)  # every process ended
    return res, launcher


def _summary(res):
    colls = sorted((c.collective_id, c.op, c.algorithm, c.ranks, c.size_bytes, c.iteration)
                   for c in read_records(res.paths["collectives"], CollectiveRecord))
    flows = list(read_records(res.paths["flows"], FlowRecord))
    per_rank = defaultdict(int)
    for f in flows:
        per_rank[(f.iteration, f.collective_id or f.burst_id, f.src_rank)] += f.size_bytes
    steps = Counter((f.iteration, f.step, f.src_rank, f.dst_rank, f.size_bytes) for f in flows)
    ops = Counter((o.rank, o.iteration, o.op_index, o.kind, o.label)
                  for o in read_records(res.paths["timeline"], RankOpRecord))
    return colls, dict(per_rank), steps, ops


def test_shared_engine_writes_the_per_host_agents_records(star_factory, tmp_path):
    n = 4
    star = star_factory(n)
    agents, by_host = _replay(star, "per_host", tmp_path / "agents")
    shared, by_engine = _replay(star, "shared", tmp_path / "shared")
    assert _summary(shared) == _summary(agents)
    # an agent per host (and the burst starters in the root namespace); two engines, in the
    # root namespace, nothing in the hosts'
    assert len(by_host.in_hosts) == n and all("traffic_gen.agent" in a for a in by_host.in_hosts)
    assert by_engine.in_hosts == []
    assert [a[2] for a in by_engine.in_root] == ["traffic_gen.engine"] * 2
    for c in read_records(shared.paths["collectives"], CollectiveRecord):
        assert c.cct_s > 0 and len(c.rank_t_end) == n
    flows = list(read_records(shared.paths["flows"], FlowRecord))
    # every flow closed at its acknowledgement, with its TCP_INFO, between lab addresses
    assert flows and all(f.tcp is not None and f.t_end is not None and f.fct_s > 0
                         for f in flows)
    assert {f.src_ip for f in flows} <= set(star.addresses.values())
    ring = [f for f in flows if f.collective_id]
    assert sum(f.size_bytes for f in ring) == 2 * 2 * (n - 1) * (1 << 20)  # 2 iterations
    # the incast's senders all started (its burst record has every sender)
    assert shared.skew["count"] == agents.skew["count"] == 2 * (n - 1)


def test_a_transfer_timeout_in_the_shared_engine_fails_the_run_naming_the_node(
        star_factory, tmp_path):
    star = star_factory(2)
    # h1 -> h0 shaped to 1 Mbit/s: 4 MiB cannot arrive within the 1 s transfer timeout
    star.shape_from_host("h1", 1_000_000, 1000)
    sched = Schedule("slow", 2, {"g": Group("g", "dp", (0, 1))},
                     (Burst((Flow(1, 0, 4 << 20),), label="big"),))
    launcher = _Counting(star.hosts)
    res = replay(sched, {0: "h0", 1: "h1"}, launcher, tmp_path, star.addresses,
                 ReplayOptions(traffic_engine="shared", transfer_timeout_s=1.0))
    assert not res.ok
    (f,) = res.failures
    assert f.node in ("h0", "h1") and "timeouts.transfer" in f.detail
    assert all(p.poll() is not None for p in launcher.started)
