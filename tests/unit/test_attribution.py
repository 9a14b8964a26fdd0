"""Attribution against a hand-simulated ring all-reduce with one slow host link: the
critical path, link and network straggler name the slow hop; compute stragglers are apart."""

from pathlib import Path

import pandas as pd
import pytest

import topologies
from analysis.metrics.attribution import attribution_metrics, critical_path, pair_bandwidth
from analysis.metrics.stragglers import straggler_metrics

INCAST = Path(__file__).parents[2] / "topologies" / "examples" / "incast.yaml"
HOSTS = ["tx1", "tx2", "tx3", "tx4"]


def _plan(slow_node="tx2", rate_bps=250_000_000):
    """incast.yaml (1 Gbit/s host links) with ``slow_node``'s uplink at ``rate_bps``."""
    from dataclasses import replace

    from models.shaping import Shaping

    plan = topologies.load_topology(str(INCAST))
    links = tuple(replace(lk, a_to_b=Shaping(rate_bps=rate_bps)) if lk.a.node == slow_node
                  else lk for lk in plan.links)
    return replace(plan, links=links)


def _ring(plan, chunk=1_000_000, n=4, iteration=0, t0=0.0):
    """Flows of a ring all-reduce (2(n-1) steps; step k: r -> r+1 once r has step k-1 from
    r-1 and sent its own), each lasting chunk*8 / min(sender uplink, receiver downlink)."""
    def rate(src, dst):
        up = next(lk for lk in plan.links if lk.a.node == src).a_to_b.rate_bps
        down = next(lk for lk in plan.links if lk.a.node == dst).b_to_a.rate_bps
        return min(up, down)

    recv_end = {r: t0 for r in range(n)}
    send_end = {r: t0 for r in range(n)}
    flows = []
    for k in range(2 * (n - 1)):
        starts = {r: max(recv_end[r], send_end[r]) for r in range(n)}
        new_recv = {}
        for r in range(n):
            d = (r + 1) % n
            t1 = starts[r] + chunk * 8 / rate(HOSTS[r], HOSTS[d])
            send_end[r] = new_recv[d] = t1
            flows.append({"src_rank": r, "dst_rank": d, "src_node": HOSTS[r],
                          "dst_node": HOSTS[d], "dst_ip": str(plan.address_of(HOSTS[d])),
                          "size_bytes": chunk, "t_start": starts[r], "t_end": t1,
                          "collective_id": f"c{iteration}.1", "iteration": iteration,
                          "workload_index": 0, "step": k})
        recv_end = new_recv
    return flows


def test_slow_link_named_by_critical_path_not_rank_zero():
    plan = _plan()
    flows = pd.DataFrame(_ring(plan) + _ring(plan, iteration=1, t0=1.0))
    a = attribution_metrics(flows, pd.DataFrame(), plan)
    assert len(a["per_collective"]) == 2
    for c in a["per_collective"]:
        assert c["network_straggler_rank"] == 1  # rank 1 sits on tx2, whose uplink is slow
        assert c["critical_transfer"]["src_node"] == "tx2"
        assert (c["critical_link"]["link"], c["critical_link"]["node"]) == ("tx2-s1", "tx2")
        assert c["critical_link"]["direction"] == "tx2 -> s1"
        # hand: every transfer over tx2 -> s1 runs at the configured 250 Mbit/s
        assert c["critical_link"]["achieved_bps"] == pytest.approx(250e6)
        assert c["critical_link"]["utilisation"] == pytest.approx(1.0)
        # the chain ends at the last transfer and every hop waited for the one before it
        path = c["critical_path"]
        assert path[-1]["t_end"] == max(f["t_end"] for f in _ring(plan, iteration=0,
                                                                  t0=path[0]["t_start"]))
        assert all(a2["src_rank"] == a1["dst_rank"] for a1, a2 in zip(path, path[1:],
                                                                       strict=False))
    links = {(r["link"], r["node"]): r for r in a["links"]}
    assert links[("tx2-s1", "tx2")]["achieved_bps"] == min(r["achieved_bps"]
                                                           for r in a["links"])
    it = a["per_iteration"]
    assert [r["network_straggler_rank"] for r in it] == [1, 1]
    assert [r["compute_straggler_rank"] for r in it] == [None, None]


def test_arrival_straggler_only_named_when_someone_arrived_late():
    """All ranks enter together (the slow link is inside): no arrival straggler, not rank 0
    with inflation 1.0 as before; a rank 20 ms late is named."""
    colls = pd.DataFrame([
        {"collective_id": "c0.1", "iteration": 0, "ranks": [0, 1, 2, 3],
         "rank_t_start": [0.0, 0.0, 0.0, 0.0], "rank_t_end": [0.1, 0.1, 0.1, 0.1]},
        {"collective_id": "c1.1", "iteration": 1, "ranks": [0, 1, 2, 3],
         "rank_t_start": [1.0, 1.0, 1.02, 1.0], "rank_t_end": [1.12, 1.12, 1.12, 1.12]}])
    s = straggler_metrics(colls)
    assert [r["slowest_rank"] for r in s["per_collective"]] == [None, 2]
    assert s["slowest_rank_counts"] == {"2": 1}


def test_compute_straggler_apart_from_network():
    plan = _plan()
    timeline = pd.DataFrame([{"rank": r, "iteration": 0, "kind": "compute", "t_start": 0.0,
                              "t_end": 0.02 if r == 3 else 0.01, "workload_index": 0}
                             for r in range(4)])
    a = attribution_metrics(pd.DataFrame(_ring(plan, t0=0.02)), timeline, plan)
    (row,) = a["per_iteration"]
    assert row["compute_straggler_rank"] == 3 and row["compute_inflation"] == pytest.approx(2)
    assert row["network_straggler_rank"] == 1


def test_pair_bandwidth_table():
    rows = [{"src_rank": 0, "dst_rank": 1, "size_bytes": 1000, "t_start": 0.0, "t_end": 1.0},
            {"src_rank": 0, "dst_rank": 1, "size_bytes": 1000, "t_start": 0.5, "t_end": 2.0},
            {"src_rank": 1, "dst_rank": 0, "size_bytes": 500, "t_start": 0.0, "t_end": 0.5}]
    t = pair_bandwidth(rows)
    assert [(r["src_rank"], r["dst_rank"], r["bytes"], r["bw_Bps"]) for r in t] == [
        (0, 1, 2000, 1000.0), (1, 0, 500, 1000.0)]  # 2000 B over the union [0, 2] s


def test_critical_path_follows_waits():
    a = {"src_rank": 0, "dst_rank": 1, "t_start": 0.0, "t_end": 1.0}
    b = {"src_rank": 2, "dst_rank": 1, "t_start": 0.0, "t_end": 0.5}
    c = {"src_rank": 1, "dst_rank": 2, "t_start": 1.0, "t_end": 1.5}
    assert critical_path([b, c, a]) == [a, c]
