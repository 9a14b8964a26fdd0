"""Fidelity checks over hand-built counter frames (contract 2 columns)."""

import math

import pandas as pd
import pytest

from analysis.fidelity import (
    CPU_SATURATED_PCT,
    DirectionRef,
    cpu_summary,
    expected_rtt_s,
    fidelity_report,
    loss_check,
    rate_check,
    rtt_check,
)
from analysis.fidelity.checks import probe_wait_s, rtt_tolerance_s, wilson_interval
from models.shaping import GilbertElliott, Shaping

QCOLS = ["t_s", "node", "ifname", "kind", "handle", "parent", "bytes", "packets", "drops",
         "overlimits", "requeues", "backlog_bytes", "backlog_packets"]
LCOLS = ["t_s", "node", "ifname", "rx_bytes", "tx_bytes", "rx_packets", "tx_packets",
         "rx_dropped", "tx_dropped"]


def ref(shaping, reverse=None, netem=None, precise=False):
    return DirectionRef("a-b", "a->b", "a", "eth0", "b", "eth0", netem, shaping,
                        reverse or Shaping(), precise=precise)


def htb_rows(rate_Bps, backlog, dt=0.01, node="a", t0=1000.0, burst_Bps=None,
             backlog_bytes=400_000):
    """One HTB root row per sample; bytes grow at rate_Bps over an interval that begins
    backlogged (``backlog_bytes`` queued: more than the interval can send), else at
    burst_Bps."""
    rows, sent = [], 0
    for i, q in enumerate(backlog):
        if i:
            sent += int((rate_Bps if backlog[i - 1] else (burst_Bps or 0)) * dt)
        rows.append([t0 + i * dt, node, "eth0", "htb", "1:", "root", sent, sent // 1514, 0, 0,
                     0, backlog_bytes * q, 2 * q])
    return pd.DataFrame(rows, columns=QCOLS)


def test_rate_ok_counts_only_backlogged_intervals():
    # 100 Mbit/s while queued; an unqueued interval sending at 3x (an HTB burst) is ignored
    df = htb_rows(12.5e6, [0, 1, 1, 1, 1, 1, 0, 1, 1, 0], burst_Bps=37.5e6)
    measured, expected, status = rate_check(df, ref(Shaping(rate_bps=100_000_000)))
    assert (status, round(expected)) == ("ok", 100_000_000)
    assert measured == pytest.approx(100e6, rel=1e-3)  # integer bytes per sample


def test_rate_off_when_short_of_configured():
    df = htb_rows(0.8 * 12.5e6, [1] * 10)
    measured, _, status = rate_check(df, ref(Shaping(rate_bps=100_000_000)))
    assert (status, round(measured / 1e6)) == ("off", 80)


def packet_rows(rate_bps, runs, dt=0.01, frame=1514, phase_s=0.011):
    """HTB root rows of a link dequeuing whole ``frame``-byte packets at ``rate_bps`` while
    backlogged: ``runs`` lists the backlogged samples of each run (an idle sample after
    each); the first dequeue of a run comes ``phase_s`` after its first sample."""
    gap = frame * 8 / rate_bps
    rows, sent, t0 = [], 0, 1000.0
    for n in runs:
        for i in range(n + 1):  # n backlogged samples, then the one that sees it empty
            done = 0 if i * dt < phase_s else int((i * dt - phase_s) // gap) + 1
            q = i < n
            rows.append([t0 + i * dt, "a", "eth0", "htb", "1:", "root", sent + done * frame,
                         0, 0, 0, 0, 3 * frame * q, 3 * q])
        sent += done * frame
        t0 += (n + 1) * dt
    return pd.DataFrame(rows, columns=QCOLS)


def test_rate_at_1_mbit_allows_for_whole_packets_per_short_run():
    """At 1 Mbit/s a 1514-byte frame takes 12 ms, more than a 10 ms sample: three runs of
    four intervals that begin backlogged see 3 frames each (4542 B of the 5000 B the rate
    sends in 40 ms), 0.91 x the rate measured from a link that is right."""
    df = packet_rows(1e6, [4, 4, 4])
    measured, _, status = rate_check(df, ref(Shaping(rate_bps=10**6)))
    assert measured == pytest.approx(9 * 1514 * 8 / 0.12, rel=1e-3)
    assert status == "ok"


def test_a_wrong_rate_on_a_slow_link_is_still_caught():
    """One long backlogged run: the granularity is 2 frames in 2 s, 1.2%; half the rate is
    off, the right rate ok."""
    assert rate_check(packet_rows(0.5e6, [201]), ref(Shaping(rate_bps=10**6)))[2] == "off"
    measured, _, status = rate_check(packet_rows(1e6, [201]), ref(Shaping(rate_bps=10**6)))
    assert (status, round(measured / 1e4)) == ("ok", 100)


def test_rate_not_exercised_without_backlog_or_rate():
    df = htb_rows(12.5e6, [0, 1, 0, 0, 1, 0, 0])  # two backlogged intervals only
    assert rate_check(df, ref(Shaping(rate_bps=100_000_000))) == (None, None, "not_exercised")
    assert rate_check(htb_rows(12.5e6, [1] * 5), ref(Shaping(delay_s=0.01)))[2] \
        == "not_exercised"
    assert rate_check(None, ref(Shaping(rate_bps=10**8)))[2] == "not_exercised"


def test_rate_ignores_other_nodes_and_classes():
    mine = htb_rows(12.5e6, [1] * 6)
    other = htb_rows(1e6, [1] * 6, node="b")
    cls = mine.assign(handle="1:1", parent="1:", bytes=mine["bytes"] * 7)
    _, _, status = rate_check(pd.concat([other, cls, mine]), ref(Shaping(rate_bps=10**8)))
    assert status == "ok"


def netem_rows(packets, drops, node="b", dev="ifb101"):
    return pd.DataFrame([[1.0, node, dev, "netem", "1:", "root", 0, 0, 0, 0, 0, 0, 0],
                         [9.0, node, dev, "netem", "1:", "root", packets * 1500, packets,
                          drops, 0, 0, 0, 0]], columns=QCOLS)


def veth_rows(tx_packets, tx_dropped, node="a"):
    return pd.DataFrame([[1.0, node, "eth0", 0, 0, 0, 5, 0, 0],
                         [9.0, node, "eth0", 0, 0, 0, 5 + tx_packets, 0, tx_dropped]],
                        columns=LCOLS)


def test_loss_within_binomial_interval():
    r = ref(Shaping(delay_s=0.01, loss_pct=1.0), netem="ifb101")
    measured, status = loss_check(netem_rows(99_000, 1_000), veth_rows(100_000, 0), r)
    assert status == "ok" and measured == pytest.approx(1.0)
    # 1.3% of 100000 is 9.5 standard deviations away from 1%
    assert loss_check(netem_rows(98_700, 1_300), veth_rows(100_000, 0), r)[1] == "off"


def test_loss_zero_configured_any_drop_is_off():
    r = ref(Shaping(delay_s=0.01), netem="ifb101")
    assert loss_check(netem_rows(5000, 0), veth_rows(5000, 0), r) == (0.0, "ok")
    assert loss_check(netem_rows(5000, 0), veth_rows(5000, 2), r)[1] == "off"  # veth backlog
    no_netem = ref(Shaping(rate_bps=10**8))
    measured, status = loss_check(None, veth_rows(999, 1), no_netem)
    assert status == "off" and measured == pytest.approx(0.1)
    assert loss_check(None, veth_rows(0, 0), no_netem) == (None, "not_exercised")


def test_loss_gemodel_uses_mean_and_burst_length():
    ge = GilbertElliott(p_pct=1.0, r_pct=25.0)  # mean loss 100*1/26 = 3.85%, bursts of 4
    r = ref(Shaping(delay_s=0.01, loss_gemodel=ge), netem="ifb101")
    # 4.4% of 20000: off for independent losses (4 sigma), ok for bursts of mean length 4
    assert loss_check(netem_rows(19_120, 880), veth_rows(20_000, 0), r)[1] == "ok"
    lo, hi = wilson_interval(880, 20_000)
    assert not lo <= ge.mean_loss_pct() / 100 <= hi


def test_wilson_interval_matches_textbook():
    # Wilson (1927) for 1 success in 10 at z=1.96: 0.0179 .. 0.4042 (Newcombe 1998, table I)
    lo, hi = wilson_interval(1, 10, z=1.96)
    assert (round(lo, 4), round(hi, 4)) == (0.0179, 0.4042)


def test_rtt_expected_and_checked():
    fwd = Shaping(rate_bps=10**6, delay_s=0.010)
    rev = Shaping(rate_bps=10**6, delay_s=0.005)
    assert expected_rtt_s(fwd, rev) == pytest.approx(0.015)  # the delays: the floor
    r = ref(fwd, rev)
    assert rtt_check(0.015 + 0.001, r) == "ok"
    assert rtt_check(0.015 * 1.5, r) == "off"
    assert rtt_check(0.005, r) == "off"  # faster than the configured delay
    assert rtt_check(None, r) == "not_exercised"


def test_serialization_at_the_shaped_rate_is_no_floor_of_the_rtt():
    """A 98-byte echo frame at 1 Mbit/s is 0.784 ms each way, but HTB lets it through at veth
    speed while the class has tokens: 24 us measured on a link without delay is right (the
    newcomer's fedavg_flapping_edge report said 'off', 1.568 ms expected)."""
    slow = Shaping(rate_bps=10**6)
    assert expected_rtt_s(slow, slow) == 0.0
    assert probe_wait_s(slow, slow) == pytest.approx(2 * 98 * 8 / 1e6)
    for precise in (False, True):
        r = ref(slow, slow, precise=precise)
        assert rtt_check(24e-6, r) == "ok"
        # waiting for the tokens of one frame each way is also right
        assert rtt_check(2 * 98 * 8 / 1e6, r) == "ok"
        assert rtt_check(0.010, r) == "off"  # a 10 ms RTT nobody configured


def test_a_wrong_delay_on_a_slow_link_is_still_caught():
    """The probe's possible wait for tokens widens only the high side."""
    want = Shaping(rate_bps=10**6, delay_s=0.002)  # 4 ms RTT, ceiling 5.568 ms
    r = ref(want, want, precise=True)
    low, high = rtt_tolerance_s(want, want, precise=True)
    assert (low, high) == pytest.approx((0.0037, 0.004 + 2 * 98 * 8 / 1e6 + 0.0003))
    assert rtt_check(0.0041, r) == "ok"
    assert rtt_check(0.002, r) == "off"  # 1 ms each way: half the configured delay
    assert rtt_check(0.0001, r) == "off"  # no delay line at all
    assert rtt_check(0.008, r) == "off"  # 4 ms each way: twice the configured delay


def test_cpu_summary_threshold():
    calm = cpu_summary([20.0] * 90 + [100.0] * 4)
    assert calm["saturated"] is False and calm["threshold_pct"] == CPU_SATURATED_PCT
    busy = cpu_summary([20.0] * 90 + [100.0] * 10)
    assert busy["saturated"] is True and busy["busy_pct_mean"] == pytest.approx(28.0)
    assert cpu_summary([])["busy_pct_mean"] is None


def test_report_untrustworthy_with_reasons():
    r = ref(Shaping(rate_bps=100_000_000, delay_s=0.01), Shaping(delay_s=0.01),
            netem="ifb101")
    qdisc = pd.concat([htb_rows(0.5 * 12.5e6, [1] * 8), netem_rows(800, 0)])
    doc = fidelity_report([r], qdisc, veth_rows(800, 0), {"a-b": 0.0201},
                          cpu_summary([99.0] * 10))
    (entry,) = doc["links"]
    assert entry["checks"] == {"rate": "off", "rtt": "ok", "loss": "ok"}
    assert entry["ok"] is False and doc["trustworthy"] is False
    assert any("rate 50.000 Mbit/s" in x for x in doc["reasons"])
    assert any("CPU saturated" in x for x in doc["reasons"])
    assert set(entry) == {"link", "node", "ifname", "direction", "configured", "measured",
                          "delay_line", "events_set", "checks", "ok"}
    assert not math.isnan(entry["measured"]["rate_bps"])


def test_report_trustworthy_when_all_ok():
    r = ref(Shaping(rate_bps=100_000_000))
    doc = fidelity_report([r], htb_rows(12.5e6, [1] * 8), veth_rows(800, 0), {},
                          cpu_summary([30.0] * 10))
    assert doc["trustworthy"] is True and doc["reasons"] == []
    assert doc["links"][0]["checks"]["rtt"] == "not_exercised"


def test_cpu_counts_only_while_workloads_ran():
    from analysis.fidelity import samples_in_windows, traffic_windows
    timeline = [{"workload_index": 0, "t_start": 10.0, "t_end": 10.5},
                {"workload_index": 0, "t_start": 10.2, "t_end": 11.0},
                {"workload_index": 1, "t_start": 20.0, "t_end": 20.3}]
    windows = traffic_windows(timeline)
    assert windows == [(10.0, 11.0), (20.0, 20.3)]
    # agents starting between the workloads saturate the CPU: not counted
    samples = [(9.5, 100.0), (10.05, 40.0), (11.05, 50.0), (15.0, 100.0), (20.2, 60.0),
               (20.5, 100.0)]
    assert samples_in_windows(samples, 0.1, windows) == [40.0, 50.0, 60.0]
    assert len(samples_in_windows(samples, 0.1, [])) == 6


def _native(shaping, line, precise=True):
    from analysis.fidelity import LineCounts
    return DirectionRef("a-b", "a->b", "a", "eth0", "b", "eth0", None, shaping, Shaping(),
                        LineCounts(*line), precise)


def test_on_a_host_kernel_the_rtt_tolerance_is_max_of_0_3_ms_and_3_percent():
    from analysis.fidelity import rtt_tolerance_s
    fwd = rev = Shaping(delay_s=0.010)  # 20 ms RTT: 3% = 0.6 ms
    assert rtt_tolerance_s(fwd, rev, precise=True) == pytest.approx((0.0194, 0.0206))
    small = Shaping(delay_s=0.001)  # 2 ms RTT: 3% = 0.06 ms < 0.3 ms
    assert rtt_tolerance_s(small, small, precise=True) == pytest.approx((0.0017, 0.0023))
    # 21 ms measured for 20 ms: inside the TCG tolerance (2 ms + 10%), off on a host kernel
    r = _native(fwd, (0, 0, 0, None, None))
    assert rtt_check(0.021, r) == "off"
    assert rtt_check(0.021, ref(fwd, rev)) == "ok"


def test_the_native_lines_median_delay_is_checked_against_the_configured_one():
    from analysis.fidelity import delay_check
    s = Shaping(delay_s=0.010)
    assert delay_check(_native(s, (100, 0, 0, 0.01002, 0.0101))) == (0.01002, "ok")
    assert delay_check(_native(s, (100, 0, 0, 0.0112, 0.012)))[1] == "off"  # +1.2 ms > 0.3
    assert delay_check(_native(s, (0, 0, 0, None, None))) == (None, "not_exercised")
    assert delay_check(ref(s)) == (None, "not_exercised")  # netem: no such counts


def test_a_fifo_jittered_lines_median_may_rise_to_its_largest_draw():
    from analysis.fidelity import delay_check
    fifo = Shaping(delay_s=0.010, jitter_s=0.001)  # normal: draws beyond delay + jitter
    # dense packets: each waits for the largest draw ahead of it, the median 3.5 sigma up
    dense = (100, 0, 0, 0.0135, 0.0139, 0.0141)
    assert delay_check(_native(fifo, dense)) == (0.0135, "ok")
    # beyond the largest draw (a packet held twice, a wrong delay) is off all the same
    assert delay_check(_native(fifo, (100, 0, 0, 0.0150, 0.0152, 0.0141)))[1] == "off"
    # packets that may pass each other never wait: delay + jitter is the bound
    free = fifo.with_changes(jitter_reorder=True)
    assert delay_check(_native(free, dense))[1] == "off"
    # below the delay less the jitter is off either way (FIFO order only adds)
    assert delay_check(_native(fifo, (100, 0, 0, 0.0085, 0.0139, 0.0141)))[1] == "off"


def test_loss_on_a_native_line_counts_its_model_and_kernel_drops():
    s = Shaping(delay_s=0.01, loss_pct=10.0)
    assert loss_check(None, None, _native(s, (10000, 1000, 0, 0.01, 0.01))) == (10.0, "ok")
    # queue overflow in the kernel is loss nobody configured
    clean = Shaping(delay_s=0.01)
    got, status = loss_check(None, None, _native(clean, (990, 0, 10, 0.01, 0.01)))
    assert status == "off" and got == pytest.approx(1.0)
    # released by a line in the wire, refused by the receiver's backlog: loss too, of packets
    # the line already counted in
    got, status = loss_check(None, None, _native(clean, (1000, 0, 0, 0.01, 0.01, None, 10)))
    assert status == "off" and got == pytest.approx(1.0)


def test_a_verdict_names_the_checks_that_were_not_exercised():
    """An incast-like run: the rate check of every direction without a standing backlog is
    not_exercised; "passed" covers only the checks that ran, and the rest are named."""
    from analysis.fidelity import coverage_words

    busy = ref(Shaping(rate_bps=100_000_000))
    idle = DirectionRef("c-d", "a->b", "c", "eth0", "d", "eth0", None,
                        Shaping(rate_bps=100_000_000), Shaping())
    qdisc = pd.concat([htb_rows(12.5e6, [1] * 8), htb_rows(0, [0] * 8, node="c")])
    doc = fidelity_report([busy, idle], qdisc, pd.concat([veth_rows(800, 0)]), {"a-b": 1e-4},
                          cpu_summary([30.0] * 10))
    assert doc["trustworthy"] is True
    assert doc["coverage"] == {
        "directions": 2,
        "exercised": {"rate": 1, "rtt": 1, "loss": 1},
        "not_exercised": {"rate": ["c-d a->b"], "rtt": ["c-d a->b"], "loss": ["c-d a->b"]}}
    passed, missing = coverage_words(doc["coverage"])
    assert passed == "rate on 1 of 2 shaped directions, RTT on 1 of 2, loss on 1 of 2"
    assert missing == "rate on 1 direction (c-d a->b), RTT on 1 (c-d a->b), loss on 1 (c-d a->b)"
    # every rate check unexercised: "passed" never claims the rate
    none = fidelity_report([idle], htb_rows(0, [0] * 8, node="c"), veth_rows(800, 0),
                           {"c-d": 1e-4}, cpu_summary([30.0] * 10))
    passed, missing = coverage_words(none["coverage"])
    assert "rate" not in passed and missing.startswith("rate on 1 direction")


def test_aitb_run_names_what_its_passed_verdict_did_not_check(tmp_path):
    """The line `aitb run` prints for a trustworthy run comes from fidelity.json's coverage
    (or its entries, for runs written before it had one)."""
    import json

    from orchestration.cli.commands.run import _coverage

    entry = {"link": "a-b", "direction": "a->b",
             "checks": {"rate": "not_exercised", "rtt": "ok", "loss": "ok"}}
    (tmp_path / "fidelity.json").write_text(json.dumps({"links": [entry]}))
    assert _coverage(tmp_path / "fidelity.json") == (
        "RTT on 1 of 1 shaped directions, loss on 1 of 1", "rate on 1 direction (a-b a->b)")
    assert _coverage(tmp_path / "missing.json") == ("", "")
