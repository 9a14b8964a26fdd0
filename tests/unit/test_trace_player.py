"""The trace player's schedule (pure) and its loop against a fake lab (no root, no waiting on
the real clock beyond a few milliseconds)."""

from __future__ import annotations

import itertools
import json
import threading

from models.errors import LabError
from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
from models.shaping import Shaping
from models.trace import LinkTrace, TraceStep
from testbed.live.trace_player import PlannedChange, TracePlayer, planned_changes

BASE = Shaping(rate_bps=50 * 10**6, delay_s=0.01)


def _trace(steps, loop=False, period=None, link="l1", direction="a_to_b"):
    steps = tuple(steps)
    return LinkTrace(link=link, direction=direction, file="x.trace", format="aitb", loop=loop,
                     period_s=steps[-1].t_s if period is None else period, steps=steps)


def test_steps_keep_unset_values_and_skip_rows_that_change_nothing():
    tr = _trace([TraceStep(0.0, 20 * 10**6), TraceStep(1.0, None, 0.03),
                 TraceStep(2.0, 20 * 10**6), TraceStep(3.0)])
    got = list(planned_changes([tr], {("l1", "a_to_b"): BASE}))
    assert got == [
        PlannedChange("l1", "a_to_b", 0.0, 0, 0, Shaping(rate_bps=20 * 10**6, delay_s=0.01)),
        PlannedChange("l1", "a_to_b", 1.0, 1, 0, Shaping(rate_bps=20 * 10**6, delay_s=0.03))]


def test_loop_repeats_every_period_and_two_traces_interleave():
    up = _trace([TraceStep(0.0, 10**7), TraceStep(1.0, 5 * 10**6), TraceStep(2.0)], loop=True)
    down = _trace([TraceStep(0.5, 10**6)], direction="b_to_a")
    base = {("l1", "a_to_b"): BASE, ("l1", "b_to_a"): Shaping()}
    got = [(c.direction, c.t_s, c.step, c.loop, c.shaping.rate_bps)
           for c in itertools.islice(planned_changes([up, down], base), 6)]
    assert got == [("a_to_b", 0.0, 0, 0, 10**7), ("b_to_a", 0.5, 0, 0, 10**6),
                   ("a_to_b", 1.0, 1, 0, 5 * 10**6), ("a_to_b", 2.0, 0, 1, 10**7),
                   ("a_to_b", 3.0, 1, 1, 5 * 10**6), ("a_to_b", 4.0, 0, 2, 10**7)]
    assert [c.t_s for c in planned_changes([up], base, until_s=3.0)] == [0.0, 1.0, 2.0, 3.0]


def test_a_traced_loss_replaces_a_burst_model():
    from models.shaping import GilbertElliott

    base = Shaping(delay_s=0.01, loss_gemodel=GilbertElliott(p_pct=1.0))
    (change,) = planned_changes([_trace([TraceStep(0.0, loss_pct=2.0)])], {("l1", "a_to_b"): base})
    assert change.shaping.loss_pct == 2.0 and change.shaping.loss_gemodel is None


class _FakeLab:
    def __init__(self, fail_at: int | None = None):
        self.plan = LabPlan("t", nodes=(NodePlan("h1", "host"), NodePlan("h2", "host")),
                            links=(LinkPlan("l1", Endpoint("h1", "eth0"), Endpoint("h2", "eth0"),
                                            a_to_b=BASE),))
        self.calls: list[tuple[str, str, Shaping]] = []
        self.read_backs: list[tuple[str, str]] = []
        self.fail_at = fail_at
        self.done = threading.Event()

    def set_shaping(self, link, direction, shaping, read_back=True):
        if read_back:  # the player's one read-back at stop
            self.read_backs.append((link, direction))
            return
        if len(self.calls) == self.fail_at:
            self.done.set()
            raise LabError("kernel said no")
        self.calls.append((link, direction, shaping))
        if len(self.calls) == 2:
            self.done.set()


class _Time:
    """A fake clock whose sleep moves it on."""

    def __init__(self, now: float) -> None:
        self.now = now

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_player_applies_in_order_and_records_planned_and_applied(tmp_path):
    lab = _FakeLab()
    fake = _Time(1000.0)
    tr = _trace([TraceStep(0.0, 20 * 10**6), TraceStep(2.5, 5 * 10**6)])
    player = TracePlayer(lab, tmp_path / "link_trace.jsonl", traces=[tr],  # type: ignore[arg-type]
                         clock=fake.clock, sleep=fake.sleep)
    t0 = player.start(t0=1001.0)
    assert player.wait(10)
    player.stop()
    assert [c[2].rate_bps for c in lab.calls] == [20 * 10**6, 5 * 10**6]
    recs = [json.loads(x) for x in (tmp_path / "link_trace.jsonl").read_text().splitlines()]
    assert [(r["link"], r["direction"], r["step"], r["planned_t_s"], r["rate_bps"])
            for r in recs] == [("l1", "a_to_b", 0, 0.0, 20 * 10**6),
                               ("l1", "a_to_b", 1, 2.5, 5 * 10**6)]
    assert [(r["began_t_s"], r["applied_t_s"]) for r in recs] == [(0.0, 0.0), (2.5, 2.5)]
    assert lab.read_backs == [("l1", "a_to_b")]  # once, at stop, not per step
    assert player.t0 == t0 == 1001.0 and player.applied == 2 and player.errors == []


def test_player_waits_on_the_injected_clock_and_stops(tmp_path):
    now = [1000.0]
    lab = _FakeLab()
    tr = _trace([TraceStep(0.0, 20 * 10**6), TraceStep(3600.0, 5 * 10**6)])
    player = TracePlayer(lab, tmp_path / "t.jsonl", traces=[tr], clock=lambda: now[0])  # type: ignore[arg-type]
    player.start(t0=1000.0)
    player.stop()  # the second step is an hour away: stop ends the wait at once
    assert [c[2].rate_bps for c in lab.calls] in ([], [20 * 10**6])
    assert not player._thread.is_alive()


def test_a_failed_change_ends_playing_and_is_recorded(tmp_path):
    lab = _FakeLab(fail_at=0)
    fake = _Time(0.0)
    player = TracePlayer(lab, tmp_path / "t.jsonl", clock=fake.clock,  # type: ignore[arg-type]
                         sleep=fake.sleep,
                         traces=[_trace([TraceStep(0.0, 10**6), TraceStep(1.0, 10**7)])])
    player.start()
    assert player.wait(10)
    (rec,) = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert "kernel said no" in rec["error"] and player.errors == [rec["error"]]
    assert player.applied == 0 and lab.calls == []


def test_no_traces_no_thread(tmp_path):
    lab = _FakeLab()
    player = TracePlayer(lab, tmp_path / "t.jsonl")  # type: ignore[arg-type]
    player.start()
    player.stop()
    assert player._thread is None and not (tmp_path / "t.jsonl").exists()


class _SlowLab(_FakeLab):
    """Each change takes 10 s on the fake clock."""

    def __init__(self, now):
        super().__init__()
        self.now = now

    def set_shaping(self, link, direction, shaping, read_back=True):
        if not read_back:
            self.calls.append((link, direction, shaping))
            self.now[0] += 10.0


def test_behind_schedule_superseded_steps_are_skipped_not_applied_late(tmp_path):
    now = [0.0]
    lab = _SlowLab(now)
    tr = _trace([TraceStep(float(t), (t + 1) * 10**6) for t in range(4)])
    player = TracePlayer(lab, tmp_path / "t.jsonl", traces=[tr], clock=lambda: now[0])  # type: ignore[arg-type]
    player.start(t0=0.0)
    assert player.wait(10)
    # step 0 ends at 10 s: steps 1, 2 and 3 are all due; only 3 (holding every value) applies
    assert [c[2].rate_bps for c in lab.calls] == [10**6, 4 * 10**6]
    recs = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("skipped", False)) for r in recs] == [
        (0, False), (1, True), (2, True), (3, False)]
    assert recs[3]["began_t_s"] == 10.0 and recs[3]["applied_t_s"] == 20.0
    assert (player.applied, player.skipped) == (2, 2)


def test_a_traced_loss_step_makes_the_lab_hand_out_wire_sized_packets():
    import dataclasses

    from testbed.lab.layout import needs_wire_packets

    plan = _FakeLab().plan
    assert not needs_wire_packets(plan)
    rate = dataclasses.replace(plan, traces=(_trace([TraceStep(0.0, 10**6)]),))
    assert not needs_wire_packets(rate)  # a rate behaves the same with GSO
    lossy = dataclasses.replace(plan, traces=(_trace([TraceStep(0.0, loss_pct=1.0)]),))
    assert needs_wire_packets(lossy)
