"""The fidelity checks that read more than one direction's counters: the backlog a rate is
measured over, the values events set, a host's own egress drops, retransmission timeouts,
a stalled counter sampler and a scale that shrinks paths to a few packets (hand tables)."""

import pandas as pd
import yaml

from analysis.fidelity import DirectionRef, cpu_summary, fidelity_report, loss_check, rate_check
from analysis.fidelity.checks import host_drops_check
from analysis.fidelity.effects import event_effects, expected_rates
from analysis.fidelity.run_checks import rto_stalls, sampler_gaps, scaled_paths
from models.shaping import Shaping
from topologies import parse_topology, resolve
from topologies.scaling import scale_plan

QCOLS = ["t_s", "node", "ifname", "kind", "handle", "parent", "bytes", "packets", "drops",
         "overlimits", "requeues", "backlog_bytes", "backlog_packets"]
LCOLS = ["t_s", "node", "ifname", "rx_bytes", "tx_bytes", "rx_packets", "tx_packets",
         "rx_dropped", "tx_dropped"]
T0 = 1000.0


def ref(shaping, effects=None, tx_host=False):
    return DirectionRef("a-b", "a->b", "a", "eth0", "b", "eth0", None, shaping, Shaping(),
                        tx_host=tx_host, effects=effects)


def rows(sent_per_interval, backlog, dt=0.01, kind="htb", drops=None):
    """HTB root rows: cumulative bytes from the bytes sent in each interval, the backlog
    (bytes) at each sample, cumulative drops."""
    out, sent = [], 0
    for i, q in enumerate(backlog):
        sent += sent_per_interval[i - 1] if i else 0
        out.append([T0 + i * dt, "a", "eth0", kind, "1:", "root", sent, sent // 1514,
                    (drops or [0] * len(backlog))[i], 0, 0, q, q // 1514])
    return pd.DataFrame(out, columns=QCOLS)


def test_a_queue_that_empties_between_two_backlogged_samples_is_not_measured():
    """Loss recovery: each sample sees a few packets queued, but the queue drains within the
    interval and the link idles: half the rate between two backlogged samples. The check
    judged that 'off'; it was never backlogged throughout, so nothing is measured."""
    half = [int(0.5 * 12.5e6 * 0.01)] * 9
    doc = rate_check(rows(half, [6000] * 10), ref(Shaping(rate_bps=100_000_000)))
    assert doc == (None, None, "not_exercised")
    # the same link with a standing queue (more than an interval sends) at the right rate
    full = [int(12.5e6 * 0.01)] * 9
    measured, _, status = rate_check(rows(full, [400_000] * 10),
                                     ref(Shaping(rate_bps=100_000_000)))
    assert status == "ok" and round(measured / 1e6) == 100


def _degrade(rate_bps, began, applied, restore_began, restore_applied, plan_rate):
    """events.jsonl lines of a degrade of a-b a_to_b and its restore (times after t0)."""
    return [{"event": 0, "kind": "degrade", "op": "shape", "step": 0,
             "directions": ["a-b a_to_b"], "changes": {"rate_bps": rate_bps},
             "done": {"shaping": {"a-b a_to_b": {"rate_bps": rate_bps, "loss_pct": 0.0}}},
             "began_t_s": began, "applied_t_s": applied},
            {"event": 0, "kind": "degrade", "op": "shape", "step": 1, "restore": True,
             "directions": ["a-b a_to_b"],
             "done": {"shaping": {"a-b a_to_b": {"rate_bps": plan_rate, "loss_pct": 0.0}}},
             "began_t_s": restore_began, "applied_t_s": restore_applied},
            {"record": "convergence", "event": 0, "routers": {}}]


def test_an_event_window_is_judged_against_the_rate_the_event_set():
    """100 Mbit/s planned, 25 Mbit/s from 0.05 s to 0.1 s (a degrade): a link that followed
    the event is ok, and the expected rate is the time-weighted mix; judged against the plan
    alone it would be 'off'."""
    effects = event_effects(_degrade(25_000_000, 0.0495, 0.05, 0.0995, 0.1, 100_000_000),
                            T0)[("a-b", "a->b")]
    sent = [int((25e6 if 0.05 <= i * 0.01 < 0.1 else 100e6) / 8 * 0.01) for i in range(15)]
    df = rows(sent, [400_000] * 16)
    measured, expected, status = rate_check(df, ref(Shaping(rate_bps=100_000_000), effects))
    assert status == "ok"
    assert 25e6 < expected < 100e6 and abs(measured / expected - 1) < 0.01
    assert rate_check(df, ref(Shaping(rate_bps=100_000_000)))[2] == "off"
    # intervals during a change are left out
    want = expected_rates(df["t_s"].to_numpy()[:-1], df["t_s"].to_numpy()[1:], 100_000_000,
                          effects)
    assert pd.isna(want[4]) and want[5] == 25e6 and pd.isna(want[9]) and want[10] == 100e6


def test_planned_loss_is_left_out_of_the_loss_check():
    """A link the events took down drops what is sent while it is down: planned, not an
    emulation error; without the events the same counters are 'off'."""
    recs = [{"event": 0, "kind": "link_down", "op": "down", "links": ["a-b"],
             "began_t_s": 1.0, "applied_t_s": 1.0},
            {"event": 1, "kind": "link_up", "op": "up", "links": ["a-b"],
             "began_t_s": 2.0, "applied_t_s": 2.0}]
    effects = event_effects(recs, T0)
    assert effects[("a-b", "b->a")].down == ((T0 + 1.0, T0 + 2.0),)
    veth = pd.DataFrame([[1.0, "a", "eth0", 0, 0, 0, 0, 0, 0],
                         [9.0, "a", "eth0", 0, 0, 0, 1000, 0, 40]], columns=LCOLS)
    assert loss_check(None, veth, ref(Shaping(rate_bps=10**8)))[1] == "off"
    assert loss_check(None, veth, ref(Shaping(rate_bps=10**8), effects[("a-b", "a->b")])) \
        == (None, "not_exercised")


def test_drops_at_a_hosts_own_egress_make_the_run_untrustworthy():
    sent = [10_000] * 4
    seg = rows(sent, [0] * 5, kind="tbf", drops=[0, 0, 30, 60, 90])
    df = pd.concat([rows(sent, [0] * 5), seg])
    assert host_drops_check(df, ref(Shaping(rate_bps=10**8), tx_host=True)) == (90, "off")
    assert host_drops_check(df, ref(Shaping(rate_bps=10**8))) == (None, None)  # a switch port
    assert host_drops_check(rows(sent, [0] * 5), ref(Shaping(rate_bps=10**8), tx_host=True)) \
        == (0, "ok")
    doc = fidelity_report([ref(Shaping(rate_bps=10**8), tx_host=True)], df, None, {},
                          cpu_summary([10.0] * 5))
    assert doc["trustworthy"] is False
    assert any("90 packets dropped at the host's own egress queue" in r
               for r in doc["reasons"])
    assert doc["coverage"]["exercised"]["host_drops"] == 1


def test_timeouts_without_a_planned_loss_are_the_emulations():
    before = {"h1": {"TCPTimeouts": 3}, "h2": {"TCPTimeouts": 0}}
    after = {"h1": {"TCPTimeouts": 10}, "h2": {"TCPTimeouts": 2}}
    found = rto_stalls(before, after, network_drops=0, planned_loss=False)
    assert (found["timeouts"], found["per_host"]) == (9, {"h1": 7, "h2": 2})
    assert "reason" in found and "h1 7" in found["reason"]
    lossy = rto_stalls(before, after, network_drops=12, planned_loss=False)
    assert "reason" not in lossy and "warning" in lossy
    quiet = rto_stalls(before, before, network_drops=0, planned_loss=False)
    assert quiet["timeouts"] == 0 and "reason" not in quiet and "warning" not in quiet
    assert rto_stalls({}, {}, network_drops=0, planned_loss=False)["timeouts"] is None
    doc = fidelity_report([], None, None, {}, cpu_summary([10.0] * 5), {"stalls": found})
    assert doc["trustworthy"] is False and doc["stalls"]["timeouts"] == 9
    assert "reason" not in doc["stalls"]


def test_a_sampler_stall_during_the_workloads_is_a_reason():
    t = [T0 + 0.01 * i for i in range(100)] + [T0 + 2.5 + 0.01 * i for i in range(50)]
    found = sampler_gaps(t, [(T0 + 0.5, T0 + 2.8)], 0.01)
    assert round(found["gap_max_s"], 2) == 1.51 and "reason" in found
    assert "reason" not in sampler_gaps(t, [(T0 + 2.6, T0 + 2.8)], 0.01)  # outside the work
    assert "reason" not in sampler_gaps([T0 + 0.01 * i for i in range(300)], [], 0.01)


TOPO = """
name: two
profiles:
  port: {rate: 25Gbit, delay: 10us, buffer: 4MiB}
nodes: {h1: {kind: host}, h2: {kind: host}, s1: {kind: switch}}
links:
  - {endpoints: [h1, s1], profile: port}
  - {endpoints: [h2, s1], profile: port}
"""


def test_a_scale_that_leaves_a_path_a_few_packets_is_warned_of():
    """25 Gbit/s and 40 us round trip: 83 packets in flight unscaled, 0.83 at scale 100; a
    4 MiB buffer becomes 28 frames (no warning for it)."""
    plan = resolve(parse_topology(yaml.safe_load(TOPO), "<t>"), "<t>")
    scaled = scale_plan(plan, 100)
    h1, h2 = scaled.address_of("h1"), scaled.address_of("h2")
    pairs = [("h1", str(h1), "h2", str(h2))]
    found = scaled_paths(scaled, 100, pairs)
    assert found["paths_few_packets"] == 1 and found["buffers_few_packets"] == 0
    assert "path h1 -> h2 BDP" in found["warning"]
    assert "warning" not in scaled_paths(plan, 1, pairs)


def test_a_sample_read_across_a_stall_is_not_a_rate():
    """The sampler stopped for 1.5 s in the middle of one dump: that sample's counters were
    read 1.5 s after its stamp (its t_err_s says 0.75 s), so the intervals on either side of
    it are left out instead of reading 150 times the rate."""
    full = [int(12.5e6 * 0.01)] * 9
    full[4] = int(12.5e6 * 1.51)
    df = rows(full, [400_000_000] * 10).assign(t_err_s=0.0002)
    df.loc[5, "t_err_s"] = 0.75
    measured, _, status = rate_check(df, ref(Shaping(rate_bps=100_000_000)))
    assert status == "ok" and round(measured / 1e6) == 100
    assert rate_check(df.drop(columns="t_err_s"), ref(Shaping(rate_bps=100_000_000)))[2] \
        == "off"
