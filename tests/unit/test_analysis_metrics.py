"""Metric formulas against hand-computed values (no root, no network)."""

from __future__ import annotations

import math
from ipaddress import IPv4Interface
from pathlib import Path

import pandas as pd
import pytest

import topologies
from analysis.metrics.counters import root_qdiscs, window_delta
from analysis.metrics.fairness import fairness_metrics, jain_index
from analysis.metrics.fct import fct_metrics, ideal_fct_s
from analysis.metrics.incast import bottleneck_of, incast_loss
from analysis.metrics.links import on_off_periods
from analysis.metrics.stats import distribution
from analysis.metrics.stragglers import collective_straggle, round_metrics
from analysis.paths import ideal_params
from models.paths import PathError
from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
from models.shaping import Shaping

ROOT = Path(__file__).resolve().parents[2]


def test_jain_index_by_hand():
    assert jain_index([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)  # 1/n: one flow gets everything
    assert jain_index([1, 2, 3]) == pytest.approx(36 / 42)  # (1+2+3)^2 / (3 * (1+4+9))
    assert jain_index([]) is None and jain_index([0, 0]) is None


def test_fairness_groups_concurrent_flows_by_burst():
    flows = pd.DataFrame({
        "burst_id": ["b0", "b0", "b1", "b1", "b1"], "collective_id": [None] * 5,
        "step": ["flow"] * 5, "size_bytes": [1000] * 5,
        "fct_s": [1.0, 1.0, 1.0, 2.0, 4.0]})
    out = fairness_metrics(flows)
    # b0: equal -> 1; b1: throughputs 8000, 4000, 2000 bit/s -> 14^2 / (3 * (64+16+4)) x 1e6
    b1 = 14**2 / (3 * 84)
    assert [g["jain"] for g in out["groups"]] == pytest.approx([1.0, b1])
    assert out["jain_mean"] == pytest.approx((1.0 + b1) / 2)


def test_percentiles_are_linear_between_closest_ranks():
    d = distribution([4, 1, 3, 2])
    assert (d["p50"], d["max"], d["mean"], d["count"]) == (2.5, 4.0, 2.5, 4.0)
    d = distribution(range(1, 101))
    assert d["p99"] == pytest.approx(99.01) and d["p95"] == pytest.approx(95.05)
    assert distribution([None, float("nan")])["p50"] is None


def _chain_plan() -> LabPlan:
    """h1 -(100 Mbit/s, 1 ms)- s1 -(10 Mbit/s, 2 ms)- h2; back: 3 ms and 4 ms."""
    net = "198.18.0.{}/29"
    lk1 = LinkPlan("h1-s1", Endpoint("h1", "eth0", IPv4Interface(net.format(1))),
                   Endpoint("s1", "eth0"), a_to_b=Shaping(rate_bps=100_000_000, delay_s=0.001),
                   b_to_a=Shaping(rate_bps=100_000_000, delay_s=0.004))
    lk2 = LinkPlan("h2-s1", Endpoint("h2", "eth0", IPv4Interface(net.format(2))),
                   Endpoint("s1", "eth1"), a_to_b=Shaping(rate_bps=50_000_000, delay_s=0.003),
                   b_to_a=Shaping(rate_bps=10_000_000, delay_s=0.002))
    nodes = (NodePlan("h1", "host"), NodePlan("h2", "host"), NodePlan("s1", "switch"))
    return LabPlan("chain", nodes, (lk1, lk2))


def test_ideal_fct_through_a_switch_by_hand():
    plan = _chain_plan()
    rate, rtt = ideal_params(plan, "h1", "198.18.0.1", "h2", "198.18.0.2")
    assert rate == 10_000_000 and rtt == pytest.approx(0.001 + 0.002 + 0.003 + 0.004)
    # 125000 B = 1e6 bit at 10 Mbit/s = 0.1 s, plus the 10 ms base RTT
    assert ideal_fct_s(125_000, rate, rtt) == pytest.approx(0.11)
    with pytest.raises(PathError):
        ideal_params(plan, "h1", "198.18.0.1", "h2", "198.18.9.9")


def test_slowdown_is_fct_over_ideal():
    flows = pd.DataFrame({"src_node": ["h1", "h2"], "src_ip": ["198.18.0.1", "198.18.0.2"],
                          "dst_node": ["h2", "h1"], "dst_ip": ["198.18.0.2", "198.18.0.1"],
                          "size_bytes": [125_000, 125_000], "fct_s": [0.22, 0.03]})
    out, table = fct_metrics(flows, _chain_plan())
    # h2 -> h1: bottleneck 50 Mbit/s: 0.02 s + 10 ms = 0.03 s -> slowdown 1
    assert list(table["slowdown"]) == pytest.approx([2.0, 1.0])
    assert out["slowdown"]["max"] == pytest.approx(2.0)
    assert out["fct_s"]["p50"] == pytest.approx(0.125)


def test_measured_min_rtt_sets_the_base_rtt_where_it_exceeds_the_plans():
    flows = pd.DataFrame({"src_node": ["h1"] * 3, "src_ip": ["198.18.0.1"] * 3,
                          "dst_node": ["h2"] * 3, "dst_ip": ["198.18.0.2"] * 3,
                          "size_bytes": [125_000] * 3, "fct_s": [0.22, 0.22, 0.22],
                          "tcp_min_rtt_s": [0.030, 0.004, None]})
    _, table = fct_metrics(flows, _chain_plan())
    # plan: 10 ms there and back; measured 30 ms wins, 4 ms (below the plan's delays: an
    # emulation fault or a clock problem) and a missing sample leave the plan's
    assert list(table["base_rtt_s"]) == pytest.approx([0.030, 0.010, 0.010])
    assert list(table["base_rtt_source"]) == ["tcp_min_rtt", "plan", "plan"]
    assert list(table["ideal_fct_s"]) == pytest.approx([0.13, 0.11, 0.11])
    # without a plan only the measurement is left, and no rate: no ideal
    _, alone = fct_metrics(flows, None)
    assert list(alone["base_rtt_source"][:2]) == ["tcp_min_rtt"] * 2
    assert pd.isna(alone["base_rtt_source"][2])
    assert alone["ideal_fct_s"].isna().all()


def test_ideal_over_ecmp_paths_of_two_data_centres():
    plan = topologies.load_topology(ROOT / "topologies/examples/two_dc.yaml")
    hosts = [h.name for h in plan.hosts()]
    src, dst = hosts[0], hosts[-1]
    rate, rtt = ideal_params(plan, src, str(plan.address_of(src)), dst,
                             str(plan.address_of(dst)))
    assert rate == 10_000_000_000 and rtt == pytest.approx(2 * 0.0005)  # the DCI's 0.5 ms


def test_incast_bottleneck_is_the_port_into_the_receiver():
    plan = topologies.load_topology(ROOT / "topologies/examples/incast.yaml")
    rx = str(plan.address_of("rx"))
    assert bottleneck_of(plan, [(f"tx{i}", rx) for i in range(1, 8)]) == ("s1", "rx")


def test_incast_loss_counts_offered_packets():
    # 90 dequeued, 10 dropped, backlog grew by 0: 10 / 100
    assert incast_loss(10, 90, 0) == pytest.approx(0.1)
    assert incast_loss(10, 80, 10) == pytest.approx(0.1)  # 10 still queued were offered too
    assert incast_loss(0, 0, 0) is None


def test_window_delta_uses_the_enclosing_samples():
    s = pd.DataFrame({"t_s": [0.0, 1.0, 2.0, 3.0], "drops": [0, 5, 9, 20]})
    assert window_delta(s, 1.2, 1.8, ("drops",)) == {"drops": 4.0, "t_end_s": 2.0}  # 1.0-2.0
    assert window_delta(s, -5, 10, ("drops",)) == {"drops": 20.0, "t_end_s": 3.0}


def test_consecutive_windows_never_count_an_interval_twice():
    # two bursts: 0.2-1.4 and 1.6-2.5; widened, both would take the interval 1.0-2.0
    s = pd.DataFrame({"t_s": [0.0, 1.0, 2.0, 3.0], "drops": [0, 5, 9, 20]})
    first = window_delta(s, 0.2, 1.4, ("drops",))
    second = window_delta(s, 1.6, 2.5, ("drops",), not_before_s=first["t_end_s"])
    assert first == {"drops": 9.0, "t_end_s": 2.0} and second == {"drops": 11.0, "t_end_s": 3.0}
    assert first["drops"] + second["drops"] == 20.0  # the whole, never more


def test_root_qdiscs_count_each_packet_once():
    q = pd.DataFrame({"kind": ["htb", "pfifo", "netem", "htb"],
                      "parent": ["root", "1:1", "root", "ffff:ffff"]})
    assert list(root_qdiscs(q).index) == [0, 3]


def test_straggler_inflation_by_hand():
    # three ranks arrive at 0, the fourth 10 ms late; everyone ends at 20 ms
    s = collective_straggle([0.0, 0.0, 0.0, 0.010], [0.020, 0.020, 0.021, 0.020])
    assert s["lag_s"] == pytest.approx(0.010) and s["slowest_index"] == 3
    assert s["spread_s"] == pytest.approx(0.001)
    assert s["inflation"] == pytest.approx(0.021 / 0.011)  # T_med / (T_med - lag)
    assert collective_straggle([0, 0], [1, 1])["inflation"] == 1.0


def test_rounds_missed_deadline_and_dropped_clients():
    rounds = pd.DataFrame({"round_time_s": [1.0, 3.0, 2.0], "deadline_s": [2.0, 2.0, None],
                           "clients_dropped": [[], ["e1", "e2"], ["e1"]]})
    out = round_metrics(rounds)
    assert out["missed_deadline"] == 1 and out["clients_dropped"] == 3
    assert out["dropped_clients"] == {"e1": 2, "e2": 1}


def test_on_off_periods():
    on, off = on_off_periods([True, True, False, True, False, False], [0.01] * 6)
    assert on == pytest.approx([0.02, 0.01]) and off == pytest.approx([0.01, 0.02])
    assert math.isclose(sum(on) + sum(off), 0.06)


def test_iteration_split_into_compute_and_exposed_communication():
    """Busiest rank computes 1.0 s of a 1.5 s iteration: 0.5 s exposed, share 2/3."""
    from analysis.metrics.collectives import iteration_times

    timeline = pd.DataFrame([
        {"rank": 0, "iteration": 0, "kind": "compute", "t_start": 0.0, "t_end": 1.0},
        {"rank": 0, "iteration": 0, "kind": "collective", "t_start": 1.0, "t_end": 1.5},
        {"rank": 1, "iteration": 0, "kind": "compute", "t_start": 0.0, "t_end": 0.8},
        {"rank": 1, "iteration": 0, "kind": "collective", "t_start": 0.8, "t_end": 1.5}])
    (row,) = iteration_times(timeline, pd.DataFrame()).to_dict("records")
    assert row["iteration_time_s"] == pytest.approx(1.5)
    assert row["compute_s"] == pytest.approx(1.0)
    assert row["comm_exposed_s"] == pytest.approx(0.5)
    assert row["compute_share"] == pytest.approx(2 / 3)


def test_summary_iteration_time_is_the_main_workloads_not_a_mix():
    """Two training steps of 2 s (workload 0) and three incast repeats of 0.1 s (workload 1):
    the summary's iteration time is 2 s, the main workload's, not the mean 0.86 s of all five
    (which mixes a training step with an incast repeat)."""
    from analysis.metrics import _main_iteration_s
    from analysis.metrics.collectives import cct_metrics

    rows = [{"rank": r, "workload_index": 0, "iteration": i, "kind": "collective",
             "t_start": 2.0 * i, "t_end": 2.0 * i + 2.0} for r in (0, 1) for i in (0, 1)]
    rows += [{"rank": r, "workload_index": 1, "iteration": i, "kind": "collective",
              "t_start": 10 + i, "t_end": 10.1 + i} for r in (0, 1) for i in range(3)]
    cct = cct_metrics(pd.DataFrame(), pd.DataFrame(rows))
    assert cct["main_workload_index"] == 0
    assert cct["iteration_time_s_by_workload"]["1"]["mean"] == pytest.approx(0.1)
    assert cct["iteration_time_s"]["mean"] == pytest.approx(4.3 / 5)
    assert _main_iteration_s(cct) == pytest.approx(2.0)
