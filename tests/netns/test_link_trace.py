"""A link that follows a trace, on the host kernel: the goodput of one transfer follows rate
steps, ping's RTT follows delay steps on the native (user-space NFQUEUE) delay line (the host
kernel has no netem), and link_trace.jsonl records each step's planned and applied time."""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import time

import pytest
from plans import two_hosts_router
from traffic import start_server, tcp_goodput_bound_bps

from models.shaping import Shaping
from models.trace import LinkTrace, TraceStep
from models.units import BufferSize
from testbed.live.trace_player import TracePlayer

pytestmark = pytest.mark.netns

HIGH, LOW = 20 * 10**6, 5 * 10**6
STEP_AT_S = 3.0


def test_rate_follows_a_two_step_trace(labs, tmp_path):
    # 50 packets: at 5 Mbit/s a full default buffer (1000 packets) would take 2.4 s to drain
    # and hide the step from the sender's intervals; 50 packets drain in 0.12 s
    base = Shaping(rate_bps=50 * 10**6, buffer=BufferSize(packets=50))
    trace = LinkTrace(link="h1-r1", direction="a_to_b", file="two-steps", format="aitb",
                      loop=False, period_s=STEP_AT_S,
                      steps=(TraceStep(0.0, HIGH), TraceStep(STEP_AT_S, LOW)))
    plan = dataclasses.replace(two_hosts_router(base), traces=(trace,))
    out = tmp_path / "link_trace.jsonl"
    with labs(plan, wire_packets=True) as lab:
        srv = start_server(lab, "h2")
        client = lab.popen("h1", ["iperf3", "-c", "198.18.2.1", "-t", "6", "-i", "0.5", "-J",
                                  "-C", "cubic"], stdout=subprocess.PIPE)
        time.sleep(0.2)  # the transfer is under way before the first step
        player = TracePlayer(lab, out)
        player.check()
        player.start()
        result = json.loads(client.communicate(timeout=60)[0])
        player.stop()
        srv.wait(timeout=10)
        rate_after = lab.plan.links[0].a_to_b.rate_bps
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["step"], r["planned_t_s"], r["rate_bps"]) for r in recs] == [
        (0, 0.0, HIGH), (1, STEP_AT_S, LOW)]
    assert all(r["applied_t_s"] >= r["planned_t_s"] for r in recs)
    assert rate_after == LOW
    # iperf3's intervals are 0.5 s on the client's clock, which started 0.2 s before the
    # trace: [1, 3) s lies inside the 20 Mbit/s step, [4, 6) s inside the 5 Mbit/s one, each
    # with more than 0.5 s to spare for start-up and step lateness
    ivals = [(i["sum"]["start"], i["sum"]["bits_per_second"]) for i in result["intervals"]]
    high = [bps for t, bps in ivals if 1.0 <= t < 3.0]
    low = [bps for t, bps in ivals if 4.0 <= t < 6.0]
    mean_high, mean_low = sum(high) / len(high), sum(low) / len(low)
    # 20 %: sender-side 0.5 s intervals of one cubic flow into a 50-packet buffer saw-tooth
    assert abs(mean_high - tcp_goodput_bound_bps(HIGH)) < 0.2 * HIGH, ivals
    assert abs(mean_low - tcp_goodput_bound_bps(LOW)) < 0.2 * LOW, ivals


def test_aitb_run_plays_the_cellular_example_and_records_it(tmp_path, state_env):
    from pathlib import Path

    from conftest import run_example

    root = Path(__file__).resolve().parents[2]
    run_dir = run_example(root / "examples/cellular_fedavg.yaml", tmp_path / "r", state_env)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    info = manifest["link_traces"]
    assert len(info["traces"]) == 8 and info["errors"] == []  # 4 phones, both directions
    recs = [json.loads(x) for x in (run_dir / "link_trace.jsonl").read_text().splitlines()]
    assert info["applied"] == sum(not r.get("skipped") for r in recs) > 0
    directions = {(r["link"], r["direction"]) for r in recs}
    assert directions == {(f"site{i}-agg", d) for i in range(1, 5) for d in ("a_to_b", "b_to_a")}
    assert all(r["applied_t_s"] >= r["planned_t_s"] for r in recs if not r.get("skipped"))
    plan = json.loads((run_dir / "plan.json").read_text())
    assert {t["format"] for t in plan["traces"]} == {"mahimahi"}
    # the uplink trace's 500 ms outage (2.0 s into each pass) was applied as the floor rate
    assert any(r["rate_bps"] == 12000 for r in recs if r["direction"] == "a_to_b")


def _rtts_ms(ping_out: str) -> list[tuple[float, float]]:
    """(unix time s, rtt ms) of every reply of ``ping -D``."""
    out = []
    for line in ping_out.splitlines():
        if line.startswith("[") and "time=" in line:
            out.append((float(line[1:line.index("]")]),
                        float(line.split("time=")[1].split()[0])))
    return out


def test_delay_follows_a_trace_on_the_native_delay_line(labs, tmp_path):
    base = Shaping(rate_bps=100 * 10**6, delay_s=0.010)
    plan = two_hosts_router(base)
    link = dataclasses.replace(plan.links[0], delay_line="native")
    trace = LinkTrace(link="h1-r1", direction="a_to_b", file="delay-steps", format="aitb",
                      loop=False, period_s=1.5,
                      steps=(TraceStep(0.0, delay_s=0.010), TraceStep(1.5, delay_s=0.040)))
    plan = dataclasses.replace(plan, links=(link, *plan.links[1:]), traces=(trace,))
    with labs(plan) as lab:
        ping = lab.popen("h1", ["ping", "-D", "-n", "-i", "0.1", "-c", "30", "198.18.2.1"],
                         stdout=subprocess.PIPE, text=True)
        player = TracePlayer(lab, tmp_path / "link_trace.jsonl")
        player.check()
        t0 = player.start()
        replies = _rtts_ms(ping.communicate(timeout=60)[0])
        player.stop()
    recs = [json.loads(x) for x in (tmp_path / "link_trace.jsonl").read_text().splitlines()]
    assert [(r["step"], r["delay_s"]) for r in recs] == [(1, 0.040)]  # step 0 changes nothing
    applied = t0 + recs[0]["applied_t_s"]
    before = [rtt for t, rtt in replies if t < t0 + 1.4]
    # a reply that arrives later than 50 ms after the change left after it (RTT <= 45 ms)
    after = [rtt for t, rtt in replies if t > applied + 0.05]
    assert before and after
    # the line adds the delay one way only and never releases a packet early: the minimum
    # RTT is at least the delay; the median is within 15 ms of it (veth and user-space hops
    # take a fraction of a ms; single replies were 18 ms late on the loaded 2-core machine)
    assert min(before) >= 10 and statistics.median(before) < 25, ("before", before)
    assert min(after) >= 40 and statistics.median(after) < 55, ("after", after)


def test_topo_deploy_plays_until_destroy(labs, tmp_path):
    import os
    import sys

    from conftest import run_namespaces

    from models.plan import plan_to_dict
    from testbed.lab.registry import pid_alive

    trace = LinkTrace(link="h1-r1", direction="a_to_b", file="flip", format="aitb", loop=True,
                      period_s=0.4, steps=(TraceStep(0.0, HIGH), TraceStep(0.2, LOW)))
    plan = dataclasses.replace(two_hosts_router(Shaping(rate_bps=50 * 10**6)), traces=(trace,))
    (tmp_path / "plan.json").write_text(json.dumps(plan_to_dict(plan)))
    env = {**os.environ, "AITB_STATE_DIR": str(labs.state_dir)}
    rid = labs.new_id()

    def aitb(*args):
        out = subprocess.run([sys.executable, "-m", "orchestration.cli", *args], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out

    aitb("topo", "deploy", str(tmp_path / "plan.json"), "--run-id", rid)
    try:
        records = labs.state_dir / rid / "link_trace.jsonl"
        (proc,) = [json.loads(x) for x in (labs.state_dir / rid / "registry.jsonl").read_text()
                   .splitlines() if '"testbed.live.trace_process"' in x]
        deadline = time.monotonic() + 60  # waits for records, not a timing margin
        while time.monotonic() < deadline and (
                not records.exists() or len(records.read_text().splitlines()) < 4):
            time.sleep(0.1)
        recs = [json.loads(x) for x in records.read_text().splitlines()]
        assert len(recs) >= 4, (labs.state_dir / rid / "trace_player.log").read_text()
        assert [r["rate_bps"] for r in recs[:4] if not r.get("skipped")][:2] == [HIGH, LOW]
        assert pid_alive(proc["pid"], proc["start"])  # the deployer exited, the player plays on
        destroy = subprocess.run([sys.executable, "-m", "orchestration.cli", "topo", "destroy",
                                  rid], env=env, capture_output=True, text=True, timeout=120)
        assert destroy.returncode == 0, destroy.stderr
        assert not pid_alive(proc["pid"], proc["start"]) and run_namespaces(rid) == []
    finally:  # a failed check above must not leave the deployed lab behind
        subprocess.run([sys.executable, "-m", "orchestration.cli", "topo", "destroy", rid],
                       env=env, capture_output=True, timeout=120)


def test_delay_steps_a_native_line_cannot_make_are_refused_before_playing(labs, tmp_path):
    from models.errors import LabError

    plan = two_hosts_router(Shaping(rate_bps=100 * 10**6))  # no delay line at bring-up
    link = dataclasses.replace(plan.links[0], delay_line="native")
    trace = LinkTrace(link="h1-r1", direction="a_to_b", file="late-delay", format="aitb",
                      loop=False, period_s=1.0, steps=(TraceStep(1.0, delay_s=0.020),))
    plan = dataclasses.replace(plan, links=(link, *plan.links[1:]), traces=(trace,))
    # refused at bring-up, before any namespace (the labs fixture checks that none is left)
    with pytest.raises(LabError, match=r"trace late-delay, step at 1s: link h1-r1 a_to_b: it "
                                       "starts without a delay"):
        with labs(plan):
            pass


def test_loss_follows_a_trace_on_the_native_delay_line(labs, tmp_path):
    plan = two_hosts_router(Shaping(rate_bps=100 * 10**6, delay_s=0.005))
    link = dataclasses.replace(plan.links[0], delay_line="native")
    trace = LinkTrace(link="h1-r1", direction="a_to_b", file="outage", format="aitb",
                      loop=False, period_s=1.0, steps=(TraceStep(1.0, loss_pct=100.0),))
    plan = dataclasses.replace(plan, links=(link, *plan.links[1:]), traces=(trace,))
    with labs(plan) as lab:
        assert lab.layout.wire_packets  # a traced loss counts packets
        ping = lab.popen("h1", ["ping", "-D", "-n", "-i", "0.1", "-c", "25", "198.18.2.1"],
                         stdout=subprocess.PIPE, text=True)
        player = TracePlayer(lab, tmp_path / "link_trace.jsonl")
        player.check()
        t0 = player.start()
        replies = _rtts_ms(ping.communicate(timeout=60)[0])
        player.stop()
    (rec,) = [json.loads(x) for x in (tmp_path / "link_trace.jsonl").read_text().splitlines()]
    applied = t0 + rec["applied_t_s"]
    assert [t for t, _ in replies if t < t0 + 0.9]  # replies before the outage
    # none once the line drops every request (a reply in flight at the change arrives within
    # one RTT of 5 ms; 0.1 s covers a loaded machine)
    assert [t for t, _ in replies if t > applied + 0.1] == []
