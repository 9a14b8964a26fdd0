"""What bound a collective (analysis.metrics.bound) on hand-made runs: a ring all-reduce over
incast.yaml's switch (tx1..tx4, 1 Gbit/s host links) with records, counters and fidelity as
the kernel would have written them."""

import pandas as pd
import pytest
from test_attribution import _plan, _ring

from analysis.metrics.attribution import attribution_metrics


def _bounds(a):
    return [c["bound"] for c in a["per_collective"]]


def _slow(**kw):
    plan = _plan()
    return plan, attribution_metrics(pd.DataFrame(_ring(plan)), pd.DataFrame(), plan, **kw)


def test_a_hop_at_its_configured_rate_is_the_critical_link():
    _, a = _slow()
    (c,) = a["per_collective"]
    assert c["bound"] == "link"
    assert (c["critical_link"]["direction"], c["critical_link"]["busy_share"]) == (
        "tx2 -> s1", pytest.approx(1.0))
    assert a["per_iteration"][0]["bound"] == "link"
    (w,) = a["per_workload"]
    assert w["bound"] == "link" and w["critical_link"]["direction"] == "tx2 -> s1"


def test_the_emulation_that_missed_that_rate_is_blamed_not_the_link():
    fid = {"trustworthy": False, "links": [
        {"node": "tx2", "ifname": "eth0", "checks": {"rate": "off"}}]}
    _, a = _slow(fidelity=fid)
    (c,) = a["per_collective"]
    assert c["bound"] == "host_cpu" and c["critical_link"] is None
    assert c["evidence"]["rate_off_direction"] == "tx2 -> s1"
    # the same check passed: the link is to blame again
    fid["links"][0]["checks"]["rate"] = "ok"
    assert _bounds(_slow(fidelity=fid)[1]) == ["link"]


def _slow_transfers(plan, share=0.1, chunk=1_000_000, **tcp):
    """The ring's transfers stretched to run at ``share`` of their rate, with TCP_INFO."""
    rows = []
    for f in _ring(plan, chunk=chunk):
        d = (f["t_end"] - f["t_start"]) / share
        rows.append({**f, "t_start": f["t_start"] / share, "t_end": f["t_start"] / share + d,
                     **tcp})
    return pd.DataFrame(rows)


def test_no_hop_near_its_rate_is_latency_and_retransmissions_are_loss():
    plan = _plan()
    clean = _slow_transfers(plan, tcp_total_retrans=0, tcp_dsack_dups=0, tcp_min_rtt_s=0.01,
                            tcp_snd_cwnd=40)
    a = attribution_metrics(clean, pd.DataFrame(), plan)
    assert set(_bounds(a)) == {"latency"}
    e = a["per_collective"][0]["evidence"]
    assert e["rtt_s"] == 0.01 and e["round_trips"] == pytest.approx(e["transfer_s"] / 0.01)
    assert e["busy_share_max"] == pytest.approx(0.1)
    lossy = clean.assign(tcp_total_retrans=3)
    assert set(_bounds(attribution_metrics(lossy, pd.DataFrame(), plan))) == {"loss"}
    # retransmissions the receiver reported as duplicates (D-SACK) were no losses
    spurious = lossy.assign(tcp_dsack_dups=3)
    assert set(_bounds(attribution_metrics(spurious, pd.DataFrame(), plan))) == {"latency"}


def test_transfers_within_one_shaper_bucket_never_bind_a_link():
    """10 kB at the line rate: a busy share of 1 over 80 us, less than HTB's 1 ms bucket."""
    plan = _plan()
    a = attribution_metrics(pd.DataFrame(_ring(plan, chunk=10_000)), pd.DataFrame(), plan)
    assert set(_bounds(a)) == {"latency"}
    assert all(c["critical_link"] is None for c in a["per_collective"])


def _qdisc(node, ifname, t0, t1, backlog):
    """Root-queue samples every 10 ms over [t0, t1] with ``backlog`` bytes waiting."""
    n = int((t1 - t0) / 0.01) + 1
    return pd.DataFrame({"t_s": [t0 + 0.01 * i for i in range(n)], "node": node,
                         "ifname": ifname, "kind": "htb", "handle": "1:", "parent": "root",
                         "drops": 0, "backlog_bytes": backlog,
                         "backlog_packets": backlog // 1500})


def test_a_standing_queue_names_a_link_busy_over_half_its_rate():
    plan = _plan()
    flows = _slow_transfers(plan, share=0.6)
    end = float(flows["t_end"].max())
    quiet = attribution_metrics(flows, pd.DataFrame(), plan,
                                counters={"qdisc": _qdisc("tx2", "eth0", 0.0, end, 0)})
    assert set(_bounds(quiet)) == {"latency"}
    queued = attribution_metrics(flows, pd.DataFrame(), plan,
                                 counters={"qdisc": _qdisc("tx2", "eth0", 0.0, end, 30_000)})
    assert set(_bounds(queued)) == {"link"}
    lk = queued["per_collective"][0]["critical_link"]
    assert lk["direction"] == "tx2 -> s1" and lk["standing_queue"]
    assert lk["backlog_bytes_max"] == 30_000


def test_a_rank_computing_longer_than_the_collective_is_compute():
    plan = _plan()
    flows = pd.DataFrame(_ring(plan, chunk=10_000, t0=0.04))
    t_end = float(flows["t_end"].max())
    colls = pd.DataFrame([{"collective_id": "c0.1", "workload_index": 0, "iteration": 0,
                           "op": "all_reduce", "group_kind": "world", "ranks": [0, 1, 2, 3],
                           "rank_t_start": [0.01, 0.01, 0.04, 0.01],
                           "rank_t_end": [t_end] * 4}])
    timeline = pd.DataFrame([{"rank": r, "iteration": 0, "kind": "compute", "t_start": 0.0,
                              "t_end": 0.04 if r == 2 else 0.01, "workload_index": 0}
                             for r in range(4)])
    a = attribution_metrics(flows, timeline, plan, collectives=colls)
    (c,) = a["per_collective"]
    assert c["bound"] == "compute" and c["critical_link"] is None
    assert (c["evidence"]["late_rank"], c["evidence"]["compute_straggler_rank"]) == (2, 2)
    # the same lag without a compute straggler behind it (all computed alike): not compute
    even = timeline.assign(t_end=0.01)
    assert _bounds(attribution_metrics(flows, even, plan, collectives=colls)) == ["latency"]
    # rank 2 given four times the compute (its straggler factor): compute; given the same
    # as the others, it overran its sleeps (a loaded host): not the workload's compute
    planned = timeline.assign(slowdown=[4.0 if r == 2 else 1.0 for r in timeline["rank"]])
    assert _bounds(attribution_metrics(flows, planned, plan, collectives=colls)) == [
        "compute"]
    overran = timeline.assign(slowdown=1.0)
    a = attribution_metrics(flows, overran, plan, collectives=colls)
    assert _bounds(a) == ["latency"]
    assert a["per_iteration"][0]["compute_straggler_rank"] == 2
    assert a["per_iteration"][0]["compute_straggler_planned"] is False


def test_an_unshaped_path_without_delay_is_the_hosts_not_latency():
    from dataclasses import replace

    from models.shaping import Shaping

    plan = _plan()
    bare = replace(plan, links=tuple(replace(lk, a_to_b=Shaping(), b_to_a=Shaping())
                                     for lk in plan.links))
    flows = pd.DataFrame(_ring(plan))
    flows["src_ip"] = [str(plan.address_of(n)) for n in flows["src_node"]]
    a = attribution_metrics(flows, pd.DataFrame(), bare)
    assert set(_bounds(a)) == {"host_cpu"}
    assert a["per_collective"][0]["evidence"]["unshaped_path"] is True
    # a delay alone makes round trips the lab's: latency
    slow = replace(plan, links=tuple(replace(lk, a_to_b=Shaping(delay_s=0.005),
                                             b_to_a=Shaping(delay_s=0.005))
                                     for lk in plan.links))
    a = attribution_metrics(flows, pd.DataFrame(), slow)
    assert set(_bounds(a)) == {"latency"}
    assert a["per_collective"][0]["evidence"]["rtt_s_configured"] == pytest.approx(0.02)


def test_a_failure_is_told_with_the_link_down_on_its_path():
    from analysis.report.narrative import failure_words

    detail = ("node h2, rank 1 -> peer rank 2, op c3.0 (collective rs0): TimeoutError: could "
              "not send 4194304 bytes within timeouts.transfer (2 s): 4170240 moved; raise "
              "timeouts.transfer in the experiment or shrink the transfer")
    f = {"detail": detail, "extra": {"links_down": ["h2-s1"], "agents_stopped": {},
                                     "events": [0]}}
    assert failure_words(f) == detail.replace(
        "raise timeouts.transfer in the experiment or shrink the transfer",
        "link h2-s1 down on its path (events[0])")
    assert failure_words({"detail": detail, "extra": {}}) == detail


def test_compute_is_named_only_for_the_rank_that_computed_longer_before_that_collective():
    """Two all-reduces in one iteration: rank 2 computes four times as long (its straggler
    factor) before the first, nothing before the second, which it reaches 30 ms late for
    another reason. Only the first is compute-bound; a rank without a factor or a measured
    compute excess before a collective is never its compute straggler."""
    plan = _plan()
    first = _ring(plan, chunk=10_000, t0=0.04)
    end = max(f["t_end"] for f in first)
    second = [{**f, "collective_id": "c0.2"} for f in _ring(plan, chunk=10_000,
                                                            t0=end + 0.03)]
    t_end = max(f["t_end"] for f in second)
    colls = pd.DataFrame([
        {"collective_id": "c0.1", "workload_index": 0, "iteration": 0, "op_index": 1,
         "op": "all_reduce", "group_kind": "world", "ranks": [0, 1, 2, 3],
         "rank_t_start": [0.01, 0.01, 0.04, 0.01], "rank_t_end": [end] * 4},
        {"collective_id": "c0.2", "workload_index": 0, "iteration": 0, "op_index": 2,
         "op": "all_reduce", "group_kind": "world", "ranks": [0, 1, 2, 3],
         "rank_t_start": [end, end, end + 0.03, end], "rank_t_end": [t_end] * 4}])
    rows = []
    for r in range(4):
        arrive = 0.04 if r == 2 else 0.01
        rows += [{"op_index": 0, "kind": "compute", "t_start": 0.0, "t_end": arrive,
                  "slowdown": 4.0 if r == 2 else 1.0},
                 {"op_index": 1, "kind": "collective", "t_start": arrive, "t_end": end,
                  "slowdown": 1.0},
                 {"op_index": 2, "kind": "collective", "t_start": end + (0.03 if r == 2
                                                                         else 0.0),
                  "t_end": t_end, "slowdown": 1.0}]
        for row in rows[-3:]:
            row.update(rank=r, iteration=0, workload_index=0)
    timeline = pd.DataFrame(rows)
    a = attribution_metrics(pd.DataFrame(first + second), timeline, plan, collectives=colls)
    assert _bounds(a) == ["compute", "latency"]
    assert [c["evidence"]["compute_straggler_rank"] for c in a["per_collective"]] == [2, None]
    # the same compute without the factor behind it (rank 2 overran its sleeps): neither
    even = timeline.assign(slowdown=1.0)
    a = attribution_metrics(pd.DataFrame(first + second), even, plan, collectives=colls)
    assert _bounds(a) == ["latency", "latency"]


def test_a_slow_rank_and_a_slow_port_are_both_named():
    """Rank 3 computes 90 ms longer (its straggler factor) before a ring whose tx2 uplink
    runs at a quarter of the others' rate: the port holds the collective longer (192 ms
    after the last arrival) and the rank's lag is a second cause (90 ms, a third of it)."""
    from analysis.report.narrative import verdict

    plan = _plan()
    flows = pd.DataFrame(_ring(plan, t0=0.1))
    t_end = float(flows["t_end"].max())
    colls = pd.DataFrame([{"collective_id": "c0.1", "workload_index": 0, "iteration": 0,
                           "op_index": 1, "op": "all_reduce", "group_kind": "world",
                           "ranks": [0, 1, 2, 3], "rank_t_start": [0.01, 0.01, 0.01, 0.1],
                           "rank_t_end": [t_end] * 4}])
    timeline = pd.DataFrame([{"rank": r, "iteration": 0, "op_index": 0, "kind": "compute",
                              "t_start": 0.0, "t_end": 0.1 if r == 3 else 0.01,
                              "workload_index": 0, "slowdown": 10.0 if r == 3 else 1.0}
                             for r in range(4)])
    a = attribution_metrics(flows, timeline, plan, collectives=colls)
    (c,) = a["per_collective"]
    assert (c["bound"], c["secondary_bound"]) == ("link", "compute")
    assert c["critical_link"]["direction"] == "tx2 -> s1"
    assert c["secondary_critical_link"] is None
    assert c["evidence"]["secondary_s"] == pytest.approx(0.09)
    (w,) = a["per_workload"]
    assert (w["bound"], w["secondary_bound"]) == ("link", "compute")
    assert w["secondary_evidence"]["late_rank"] == 3
    words = verdict(w)
    assert "link-bound: tx2 -> s1 (tx2-s1) busy " in words
    assert "; also compute-bound: rank 3 (it computed longest before it) arrived 90 ms " \
        "after the median rank." in words
    # the rank on time: one cause
    even = colls.assign(rank_t_start=[[0.1] * 4])
    a = attribution_metrics(flows, timeline.assign(t_end=0.1), plan, collectives=even)
    assert a["per_collective"][0]["secondary_bound"] is None
    assert a["per_workload"][0]["secondary_bound"] is None
    # the rank's lag longer than the port's time: compute first, the port second
    slow = colls.assign(rank_t_start=[[0.01, 0.01, 0.01, 0.5]])
    late = timeline.assign(t_end=[0.01, 0.01, 0.01, 0.5])
    shifted = flows.assign(t_start=flows["t_start"] + 0.4, t_end=flows["t_end"] + 0.4)
    a = attribution_metrics(shifted, late, plan, collectives=slow.assign(
        rank_t_end=[[t_end + 0.4] * 4]))
    (c,) = a["per_collective"]
    assert (c["bound"], c["secondary_bound"]) == ("compute", "link")
    assert c["critical_link"] is None
    assert c["secondary_critical_link"]["direction"] == "tx2 -> s1"
    (w,) = a["per_workload"]
    assert "; also link-bound: tx2 -> s1 (tx2-s1) busy " in verdict(w)


def test_a_starved_host_is_told_by_its_cpu_not_a_rate_it_did_not_miss():
    """Transfers at a tenth of the links' rate on a path with no delay, the run's CPU
    saturated: host_cpu, and the words say the CPU, not a direction's rate."""
    from analysis.report.narrative import verdict

    plan = _plan()
    flows = _slow_transfers(plan, tcp_total_retrans=0, tcp_dsack_dups=0,
                            tcp_min_rtt_s=0.0001, tcp_snd_cwnd=40)
    fid = {"trustworthy": False, "cpu": {"busy_pct_p95": 99.0, "saturated": True},
           "links": []}
    a = attribution_metrics(flows, pd.DataFrame(), plan, fidelity=fid)
    assert set(_bounds(a)) == {"host_cpu"}
    (w,) = a["per_workload"]
    words = verdict(w)
    assert "host-CPU-bound: the host's CPU was saturated (busy 99% at p95) and round " \
        "trips at the configured RTT explain " in words
    assert "None" not in words and w["critical_link"] is None
