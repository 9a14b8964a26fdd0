"""Incast per burst: counts from counter samples read in the idle time around each burst,
or none at all where the sampler had no sample there (hand tables on the incast example's
plan)."""

from pathlib import Path

import pandas as pd
import pytest

import topologies
from analysis.metrics.incast import incast_metrics

ROOT = Path(__file__).resolve().parents[2]
PLAN = topologies.load_topology(ROOT / "topologies/examples/incast.yaml")
STARTS = (100.0, 100.1, 100.2)  # three bursts 100 ms apart, each done within 20 ms


def _bursts() -> pd.DataFrame:
    return pd.DataFrame([{"burst_id": f"b0.{b}", "planned_start": t0, "sender_ranks": [1, 2],
                          "actual_start": [t0, t0], "iteration": b, "workload_index": 0}
                         for b, t0 in enumerate(STARTS)])


def _flows(slow: int = 1) -> pd.DataFrame:
    rx = str(PLAN.address_of("rx"))
    return pd.DataFrame([{"src_node": f"tx{i}", "dst_node": "rx", "dst_ip": rx,
                          "size_bytes": 100_000, "t_start": t0,
                          "t_end": t0 + (0.05 if b == slow else 0.01) + 0.001 * i,
                          "burst_id": f"b0.{b}", "workload_index": 0}
                         for b, t0 in enumerate(STARTS) for i in (1, 2)])


def _qdisc(times: list[float]) -> pd.DataFrame:
    """s1:rx root htb sampled at ``times``: burst b drops 3 x (b + 1) packets of 100 + b."""
    rows = []
    for t in times:
        done = [b for b, t0 in enumerate(STARTS) if t >= t0 + 0.005]
        drops = sum(3 * (b + 1) for b in done)
        sent = sum(100 + b - 3 * (b + 1) for b in done)
        rows.append({"t_s": t, "node": "s1", "ifname": "rx", "kind": "htb", "handle": "1:",
                     "parent": "root", "bytes": sent * 1500, "packets": sent, "drops": drops,
                     "overlimits": 0, "requeues": 0, "backlog_bytes": 0,
                     "backlog_packets": 0})
    return pd.DataFrame(rows)


def test_each_burst_is_counted_between_idle_time_samples():
    times = [99.99 + 0.01 * k for k in range(30)]
    inc = incast_metrics(_bursts(), _flows(), PLAN, _qdisc(times), [])
    assert [b["drops"] for b in inc["per_burst"]] == [3, 6, 9]
    assert [b["offered"] for b in inc["per_burst"]] == [100, 101, 102]
    assert {b["counts"] for b in inc["per_burst"]} == {"exact"}
    assert inc["bursts_counted"] == 3 and inc["drops"] == 18
    # the worst burst is the slow one, beside the mean
    assert inc["worst_burst"]["burst_id"] == "b0.1"
    assert inc["worst_burst"]["finish_s"] == pytest.approx(0.052)
    assert inc["finish_s_mean"] == pytest.approx((0.012 + 0.052 + 0.012) / 3)


def test_a_sampler_gap_over_the_idle_time_leaves_both_bursts_unknown():
    """No sample between 100.07 and 100.25: the idle time after burst 1 and before burst 2
    has none, so their counts cannot be split (spreading the drops over the gap, as the
    windows widened to the enclosing samples did, gave burst 2's to burst 1); the two
    together are still exact, and so are the run's totals."""
    times = [t for t in (99.99 + 0.01 * k for k in range(30)) if not 100.075 < t < 100.25]
    inc = incast_metrics(_bursts(), _flows(), PLAN, _qdisc(times), [])
    rows = inc["per_burst"]
    assert rows[0]["drops"] == 3 and rows[0]["counts"] == "exact"
    for r in rows[1:]:
        assert r["drops"] is None and r["loss"] is None
        assert r["counts"] == ("unknown: the sampler read no idle time between bursts "
                               "b0.1..b0.2 (together: 15 drops of 203 offered)")
    assert inc["bursts_counted"] == 1 and (inc["drops"], inc["offered"]) == (18, 303)


def test_a_burst_after_the_last_sample_is_unknown():
    times = [99.99 + 0.01 * k for k in range(22)]  # the sampler stopped at 100.2
    rows = incast_metrics(_bursts(), _flows(), PLAN, _qdisc(times), [])["per_burst"]
    assert [r["counts"] for r in rows[:2]] == ["exact", "exact"]
    assert rows[2]["counts"] == "unknown: no counter sample in the idle time after the burst"
