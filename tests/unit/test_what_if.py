"""What-if estimates (analysis.metrics.what_if) against hand-simulated rings: the estimate
of a run with the change made is compared with the same simulation run with that change
(the simulation's rule: a rank sends step k once it has received step k-1 and sent its own
step k-1, as tests/unit/test_attribution.py's ring)."""

from dataclasses import replace

import pandas as pd
import pytest
from test_attribution import HOSTS, _plan, _ring

from analysis.metrics.attribution import attribution_metrics
from analysis.metrics.what_if import SOURCE, transfer_estimate_s
from models.shaping import Shaping


def _x(fct, size=1_000_000, rtt=None, cfg=None, hops=(("a-s", "a", 250_000_000),
                                                    ("s-b", "s", 1_000_000_000))):
    return {"fct_s": fct, "size_bytes": size, "rtt_s": rtt, "rtt_s_configured": cfg,
            "hops": [[*h, f"{h[1]} -> ?"] for h in hops]}


def test_a_transfer_is_alpha_plus_its_bytes_at_the_bottleneck():
    # 1 MB at 250 Mbit/s: 32 ms on the wire, 8 ms of round trips
    x = _x(0.040, rtt=0.010, cfg=0.008)
    assert transfer_estimate_s(x, "link_x2", ("a-s", "a", "a -> s")) == pytest.approx(
        0.008 + 0.016)
    # doubling a hop that is not the bottleneck changes nothing
    assert transfer_estimate_s(x, "link_x2", ("s-b", "s", "s -> b")) == pytest.approx(0.040)
    # halving the configured 8 ms of a 10 ms RTT: the round trips take 6/10 as long
    assert transfer_estimate_s(x, "rtt_half") == pytest.approx(0.032 + 0.008 * 0.6)
    # a doubled bottleneck that the next hop caps: 500 -> 300 Mbit/s
    capped = _x(0.040, hops=(("a-s", "a", 250_000_000), ("s-b", "s", 300_000_000)))
    assert transfer_estimate_s(capped, "link_x2", ("a-s", "a", "a -> s")) == pytest.approx(
        0.008 + 0.032 * 250 / 300)
    assert transfer_estimate_s(x, "straggler_at_median") == 0.040


def _colls(flows, ranks=(0, 1, 2, 3), starts=None):
    fl = pd.DataFrame(flows)
    t0, t1 = float(fl["t_start"].min()), float(fl["t_end"].max())
    return pd.DataFrame([{"collective_id": flows[0]["collective_id"], "workload_index": 0,
                          "iteration": 0, "op": "all_reduce", "group_kind": "world",
                          "ranks": list(ranks), "rank_t_start": starts or [t0] * len(ranks),
                          "rank_t_end": [t1] * len(ranks)}])


def _what_if(plan, flows, timeline=None, starts=None):
    a = attribution_metrics(pd.DataFrame(flows), timeline if timeline is not None
                            else pd.DataFrame(), plan, collectives=_colls(flows, starts=starts))
    return a, a["what_if"]


def test_the_critical_link_twice_as_fast_matches_the_ring_run_so():
    slow = _plan(rate_bps=250_000_000)
    a, w = _what_if(slow, _ring(slow))
    assert a["per_collective"][0]["bound"] == "link"
    (row,) = w["per_workload"]
    assert row["link_x2"]["inputs"] == {"link": "tx2-s1", "direction": "tx2 -> s1"}
    fast = _ring(_plan(rate_bps=500_000_000))
    measured = max(f["t_end"] for f in fast) - min(f["t_start"] for f in fast)
    # the saturated direction's busy time halves; the rest of the CCT stays: exact here,
    # where the slow link is busy the whole collective
    assert row["link_x2"]["cct_s_median"] == pytest.approx(measured, rel=1e-6)
    assert row["link_x2"]["speedup"] == pytest.approx(2.0)
    assert w["source"] == SOURCE and "Lin et al." in SOURCE
    # the other cases change nothing here: no delay, no compute straggler
    assert row["rtt_half"]["cct_s_median"] == pytest.approx(row["cct_s_median"])
    assert row["straggler_at_median"]["cct_s_median"] == pytest.approx(row["cct_s_median"])


def _delayed(plan, delay_s):
    return replace(plan, links=tuple(replace(lk, a_to_b=replace(lk.a_to_b, delay_s=delay_s),
                                             b_to_a=replace(lk.b_to_a, delay_s=delay_s))
                                     for lk in plan.links))


def _slow_rtt_ring(plan, rtt_s, chunk=10_000):
    """The ring with every transfer lasting its bytes at 1 Gbit/s plus ``rtt_s`` of round
    trips (a window-limited transfer), TCP_INFO's min RTT ``rtt_s``."""
    flows = _ring(plan, chunk=chunk)
    # replay the ring's rule with the longer transfers
    recv_end, send_end, out = dict.fromkeys(range(4), 0.0), dict.fromkeys(range(4), 0.0), []
    for k in range(6):
        starts = {r: max(recv_end[r], send_end[r]) for r in range(4)}
        new_recv = {}
        for f in [f for f in flows if f["step"] == k]:
            r, d = f["src_rank"], f["dst_rank"]
            t1 = starts[r] + chunk * 8 / 1e9 + rtt_s
            send_end[r] = new_recv[d] = t1
            out.append({**f, "t_start": starts[r], "t_end": t1, "tcp_min_rtt_s": rtt_s,
                        "src_ip": str(plan.address_of(HOSTS[r]))})
        recv_end = new_recv
    return out


def test_the_rtt_halved_matches_the_ring_run_with_half_the_delay():
    plan = _delayed(_plan(rate_bps=1_000_000_000), 0.005)  # 4 x 5 ms there and back: 20 ms
    _, w = _what_if(plan, _slow_rtt_ring(plan, 0.020))
    (row,) = w["per_workload"]
    assert row["rtt_half"]["inputs"] == {"rtt_s_configured": pytest.approx(0.020)}
    half = _slow_rtt_ring(plan, 0.010)
    measured = max(f["t_end"] for f in half) - min(f["t_start"] for f in half)
    assert row["rtt_half"]["cct_s_median"] == pytest.approx(measured, rel=1e-6)
    # one direction of a symmetric ring twice as fast saves nothing: every step still
    # waits for the other ranks' transfers, which the replay follows
    assert row["link_x2"]["cct_s_median"] == pytest.approx(row["cct_s_median"], rel=1e-9)


def _late_ring(plan, arrival, chunk=100_000):
    """The ring where rank r arrives at ``arrival[r]`` (s): its first send starts then, and
    a transfer into it cannot end before it arrives and reads it (1 Gbit/s links)."""
    serial = chunk * 8 / 1e9
    recv_end, send_end, out = dict(enumerate(arrival)), dict(enumerate(arrival)), []
    for f in [f for f in _ring(plan, chunk=chunk)]:
        if f["src_rank"] == 0:
            starts = {r: max(recv_end[r], send_end[r]) for r in range(4)}
            new_recv = {}
        r, d = f["src_rank"], f["dst_rank"]
        t1 = max(starts[r], arrival[d]) + serial
        send_end[r] = new_recv[d] = t1
        out.append({**f, "t_start": starts[r], "t_end": t1})
        if r == 3:
            recv_end = new_recv
    return out


def _timeline(arrival, flows, slowdown):
    end = max(f["t_end"] for f in flows)
    return pd.DataFrame([{"rank": r, "iteration": 0, "kind": k, "t_start": t0, "t_end": t1,
                          "workload_index": 0, "slowdown": slowdown[r]}
                         for r in range(4) for k, t0, t1 in (
                             ("compute", 0.0, arrival[r]), ("collective", arrival[r], end))])


def test_the_straggler_at_the_median_matches_the_ring_run_without_it():
    plan = _plan(rate_bps=1_000_000_000)
    late = [0.01, 0.01, 0.04, 0.01]
    flows = _late_ring(plan, late)
    a, w = _what_if(plan, flows, _timeline(late, flows, [1.0, 1.0, 4.0, 1.0]), starts=late)
    assert a["per_collective"][0]["bound"] == "compute"
    on_time = _late_ring(plan, [0.01] * 4)
    cct = max(f["t_end"] for f in on_time) - 0.01
    (row,) = w["per_workload"]
    assert row["straggler_at_median"]["cct_s_median"] == pytest.approx(cct, rel=1e-6)
    # rank 2 computed 30 ms more than the median and arrived 30 ms late: 30 ms saved
    (it,) = w["per_iteration"]
    assert it["straggler_at_median_s"] == pytest.approx(cct + 0.01, rel=1e-6)
    assert row["straggler_at_median"]["inputs"]["ranks"] == [2]
    assert row["straggler_at_median"]["inputs"]["compute_excess_s_max"] == pytest.approx(0.03)
    # the same lag without a compute straggler behind it: nothing to remove
    _, w = _what_if(plan, flows, _timeline([0.01] * 4, flows, [1.0] * 4), starts=late)
    (it,) = w["per_iteration"]
    assert it["straggler_at_median_s"] == pytest.approx(it["iteration_time_s"])


def test_an_unshaped_lab_has_no_link_to_double():
    plan = _plan()
    bare = replace(plan, links=tuple(replace(lk, a_to_b=Shaping(), b_to_a=Shaping())
                                     for lk in plan.links))
    _, w = _what_if(bare, _ring(plan))
    (row,) = w["per_workload"]
    assert row["link_x2"]["inputs"] == {"link": None, "direction": None}
    assert row["link_x2"]["cct_s_median"] == pytest.approx(row["cct_s_median"])
