"""The ``events:`` kinds beyond links up/down (orchestration/events/spec.py): trace, partition
and heal, straggler, corrupt (percent or bit error rate), degrade ramps, node_down with its
agents frozen or killed. Expanded before any lab exists, bad values refused naming file, key
and line with suggestions; the native delay line's live limits refused by line_problems; the
scheduler's ramp steps, slowdowns and agent signals against fakes (testbed/live/trace_player.py);
failure records annotated with the links down and agents stopped on their way
(orchestration/events/hits.py)."""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import signal
import threading
from pathlib import Path

import pytest
from test_events_spec import HEAD  # the same two-DC experiment head

from models.errors import LabError, SpecError
from models.events import EventAction
from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
from models.shaping import Shaping
from orchestration.events.hits import annotate_failures, state_at
from orchestration.events.spec import line_problems
from orchestration.run.runner import prepare
from testbed.live.trace_player import TracePlayer, ramp_step

ROOT = Path(__file__).resolve().parents[2]
DCI, DCI2 = "dc1-b1-dc2-b1", "dc1-b1-dc2-b1-2"


def _acts(tmp_path: Path, events: str, head: str = HEAD):
    path = tmp_path / "exp.yaml"
    path.write_text(head + events)
    return prepare(path).events


def _issues(tmp_path: Path, events: str, head: str = HEAD) -> str:
    path = tmp_path / "exp.yaml"
    path.write_text(head + events)
    with pytest.raises(SpecError) as exc:
        prepare(path)
    return "\n".join(str(i) for i in exc.value.issues)


def test_partition_heal_and_duration_are_one_action_each(tmp_path):
    acts = _acts(tmp_path, f"""\
  - {{at: 1s, kind: partition, name: split, link: [{DCI}, {DCI2}]}}
  - {{at: 2s, kind: heal, partition: split}}
  - {{at: 3s, kind: partition, link: [{DCI}, {DCI2}], duration: 500ms}}
""")
    assert [(a.kind, a.op, a.t_s, a.links, a.step) for a in acts] == [
        ("partition", "down", 1.0, (DCI, DCI2), 0), ("heal", "up", 2.0, (DCI, DCI2), 0),
        ("partition", "down", 3.0, (DCI, DCI2), 0), ("partition", "up", 3.5, (DCI, DCI2), 1)]


def test_straggler_ramp_corrupt_and_agent_actions(tmp_path):
    acts = _acts(tmp_path, f"""\
  - {{at: 1s, kind: straggler, rank: 3, factor: 2.5}}
  - {{at: 1s, kind: degrade, link: {DCI}, direction: a_to_b, rate: 100Mbit, delay: 4ms,
     ramp_s: 2, ramp_steps: 4, duration: 5s}}
  - {{at: 2s, kind: corrupt, link: {DCI}, ber: 1e-6}}
  - {{at: 2s, kind: corrupt, link: {DCI2}, direction: b_to_a, corrupt: 0.5%}}
  - {{at: 3s, kind: node_down, node: dc1-l1-h2, agent: freeze}}
  - {{at: 4s, kind: node_up, node: dc1-l1-h2}}
  - {{at: 5s, kind: node_down, node: dc2-l1-h1, agent: kill}}
""")
    st = acts[0]
    assert (st.op, st.workload, st.rank, st.factor) == ("slowdown", "ring", 3, 2.5)
    ramp = [a for a in acts if a.kind == "degrade"]
    assert [(a.t_s, a.ramp, a.step, a.restore) for a in ramp] == [
        (1.5, (1, 4), 0, False), (2.0, (2, 4), 1, False), (2.5, (3, 4), 2, False),
        (3.0, (4, 4), 3, False), (6.0, None, 4, True)]
    assert ramp[0].changes == {"rate_bps": 10**7, "delay_s": 0.004}  # 100Mbit / scale 10
    ber, pct = [a for a in acts if a.kind == "corrupt"]
    # 1 - (1 - 1e-6)^(8 * 1500): the share of MTU packets with at least one flipped bit
    assert ber.changes["corrupt_pct"] == pytest.approx(100 * (1 - (1 - 1e-6) ** 12000),
                                                       rel=1e-5)
    assert math.isclose(ber.changes["corrupt_pct"], 1.1928, rel_tol=1e-3)
    assert ber.directions == ((DCI, "a_to_b"), (DCI, "b_to_a"))
    assert pct.directions == ((DCI2, "b_to_a"),) and pct.changes == {"corrupt_pct": 0.5}
    agents = [(a.kind, a.node, a.agent) for a in acts if a.agent]
    assert agents == [("node_down", "dc1-l1-h2", "freeze"), ("node_up", "dc1-l1-h2", "thaw"),
                      ("node_down", "dc2-l1-h1", "kill")]
    assert acts[0].describe()["factor"] == 2.5 and ramp[1].describe()["ramp"] == [2, 4]


def test_a_trace_event_expands_to_one_shape_per_step_scaled(tmp_path):
    (tmp_path / "dci.csv").write_text("t, rate, delay, loss\n0s, 500Mbit, 2ms\n1s, 200Mbit\n"
                                      "2s, , 5ms, 1%\n3s\n")
    acts = _acts(tmp_path, f"""\
  - {{at: 10s, kind: trace, link: {DCI}, direction: a_to_b, file: dci.csv}}
  - {{at: 20s, kind: trace, link: {DCI2}, direction: b_to_a, file: dci.csv, loop: true,
     duration: 7s}}
""")
    once = [a for a in acts if a.event == 0]
    assert [(a.t_s, a.op, a.directions, a.step) for a in once] == [
        (10.0, "shape", ((DCI, "a_to_b"),), 0), (11.0, "shape", ((DCI, "a_to_b"),), 1),
        (12.0, "shape", ((DCI, "a_to_b"),), 2)]
    assert [(a.changes["rate_bps"], a.changes["delay_s"], a.changes["loss_pct"])
            for a in once] == [(5 * 10**7, 0.002, 0.0), (2 * 10**7, 0.002, 0.0),
                               (2 * 10**7, 0.005, 1.0)]
    looped = [a.t_s for a in acts if a.event == 1]
    assert looped == [20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0]  # period 3 s, to 7 s


@pytest.mark.parametrize("events, needles", [
    ("  - {at: 2s, kind: heal, partition: splt}\n",
     ["events[0].partition: no partition 'splt'"]),
    (f"  - {{at: 1s, kind: partition, name: split, link: [{DCI}]}}\n"
     "  - {at: 2s, kind: heal, partition: splt}\n",
     ["events[1].partition: no partition 'splt'", "did you mean split"]),
    (f"  - {{at: 1s, kind: partition, link: [{DCI}, dc1-b1-dc2-b9]}}\n",
     ["events[0].link[1]: no link 'dc1-b1-dc2-b9'", f"did you mean {DCI}"]),
    ("  - {at: 1s, kind: straggler, rank: 4, factor: 2}\n",
     ["events[0].rank: workload ring has no rank 4 (its ranks: 0..3)"]),
    ("  - {at: 1s, kind: straggler, workload: rnig, rank: 1, factor: 2}\n",
     ["events[0].workload: no workload 'rnig'", "did you mean ring"]),
    ("  - {at: 1s, kind: straggler, rank: 1, factor: 0}\n", ["events[0].factor"]),
    ("  - {at: 1s, kind: straggler, rank: 1}\n", ["events[0].factor"]),
    (f"  - {{at: 1s, kind: corrupt, link: {DCI}, corrupt: 1%, ber: 1e-6}}\n",
     ["events[0]: a corrupt event sets one of corrupt"]),
    (f"  - {{at: 1s, kind: corrupt, link: {DCI}}}\n",
     ["events[0]: a corrupt event sets one of corrupt"]),
    (f"  - {{at: 1s, kind: corrupt, link: {DCI}, ber: 2}}\n", ["events[0].ber"]),
    (f"  - {{at: 1s, kind: corrupt, link: {DCI}, corrupt: 120%}}\n", ["events[0].corrupt"]),
    (f"  - {{at: 1s, kind: degrade, link: {DCI}, rate: 1Mbit, ramp_s: 2, ramp_steps: 1}}\n",
     ["events[0].ramp_steps"]),
    (f"  - {{at: 1s, kind: degrade, link: {DCI}, rate: 1Mbit, ramp_s: 0}}\n",
     ["events[0].ramp_s"]),
    (f"  - {{at: 1s, kind: degrade, link: {DCI}, rate: 1Mbit, ramp_s: 2, duration: 1s}}\n",
     ["events[0].duration: duration 1s ends before the ramp"]),
    (f"  - {{at: 1s, kind: trace, link: {DCI}, file: nope.csv}}\n",
     ["events[0].file:", "nope.csv", "trace file not found"]),
    (f"  - {{at: 1s, kind: trace, link: {DCI}, file: t.csv, loop: true}}\n",
     ["events[0].loop: a looped trace needs a duration"]),
    (f"  - {{at: 1s, kind: trace, link: {DCI}, file: t.csv, window: 50ms}}\n",
     ["events[0].window: window applies to format: mahimahi only"]),
    ("  - {at: 1s, kind: node_down, node: dc1-b1, agent: freeze}\n",
     ["events[0].agent: agent: freeze needs an agent on node 'dc1-b1'"]),
    ("  - {at: 1s, kind: node_down, node: dc1-l1-h1, agent: pause}\n",
     ["events[0].agent", "freeze", "kill"]),
])
def test_bad_new_events_are_refused_naming_file_key_and_line(tmp_path, events, needles):
    (tmp_path / "t.csv").write_text("t, rate\n0s, 1Gbit\n1s, 500Mbit\n2s\n")
    text = _issues(tmp_path, events)
    for needle in needles:
        assert needle in text, text
    assert "exp.yaml:" in text


def test_a_straggler_must_name_its_workload_when_there_are_two(tmp_path):
    head = HEAD.replace("events:\n", "  - {kind: collective, name: ring2, op: all_reduce, "
                        "algorithm: ring, size: 1MiB}\nevents:\n")
    text = _issues(tmp_path, "  - {at: 1s, kind: straggler, rank: 1, factor: 2}\n", head)
    assert "events[0].workload: the experiment has 2 workloads (ring, ring2)" in text


def _native_plan(a_to_b: Shaping, b_to_a: Shaping) -> LabPlan:
    return LabPlan("t", nodes=(NodePlan("h1", "host"), NodePlan("h2", "host")),
                   links=(LinkPlan("l1", Endpoint("h1", "eth0"), Endpoint("h2", "eth0"),
                                   a_to_b=a_to_b, b_to_a=b_to_a, delay_line="native"),))


def test_native_line_limits_are_refused_before_the_lab_naming_the_event():
    plan = _native_plan(Shaping(rate_bps=10**8, delay_s=0.005),
                        Shaping(rate_bps=10**8, delay_s=0.005, corrupt_pct=0.1))
    acts = [EventAction(0, "corrupt", "shape", 1.0, directions=(("l1", "a_to_b"),),
                        changes={"corrupt_pct": 1.0}),
            EventAction(1, "corrupt", "shape", 1.0, directions=(("l1", "b_to_a"),),
                        changes={"corrupt_pct": 2.0}),  # corrupted from bring-up: fine
            EventAction(2, "degrade", "shape", 2.0, directions=(("l1", "a_to_b"),),
                        changes={"delay_s": 0.02})]  # has a line: fine
    (msg,) = line_problems(plan, acts)
    assert msg.startswith("events[0] (corrupt at 1 s): link l1 a_to_b: the native delay line "
                          "cannot switch corrupt on or off live")
    bare = _native_plan(Shaping(rate_bps=10**8), Shaping(rate_bps=10**8))
    (msg,) = line_problems(bare, [EventAction(3, "trace", "shape", 0.0,
                                              directions=(("l1", "b_to_a"),),
                                              changes={"delay_s": 0.01})])
    assert "events[3] (trace at 0 s): link l1 b_to_a: it starts without a delay" in msg
    netem = dataclasses.replace(bare, links=(dataclasses.replace(bare.links[0],
                                                                 delay_line="netem"),))
    assert line_problems(netem, acts) == []  # netem does all of it live


class _Lab:
    """A lab whose set_shaping updates its plan (the player reads the current shaping from
    it), set_links records."""

    def __init__(self) -> None:
        self.plan = _native_plan(Shaping(rate_bps=10**8, delay_s=0.01), Shaping())
        self.calls: list[tuple] = []

    def set_links(self, names, up, node=None):
        self.calls.append(("up" if up else "down", tuple(names)))
        return {"links": list(names)}

    def set_shaping(self, link, direction, shaping, read_back=True):
        lk = dataclasses.replace(self.plan.links[0], **{direction: shaping})
        self.plan = dataclasses.replace(self.plan, links=(lk,))
        self.calls.append(("shape", shaping.rate_bps, shaping.delay_s))


class _Ctl:
    """Stands in for traffic_gen's Controller: records slowdowns and agent signals."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def set_slowdown(self, rank, factor):
        self.calls.append(("slowdown", rank, factor))
        return "h2"

    def signal_agent(self, node, sig):
        self.calls.append(("signal", node, sig))
        return 4242 if node == "h2" else None


def _play(tmp_path: Path, lab, events, before=None):
    now = [0.0]
    go = threading.Event()

    def sleep(s):
        go.wait(10)
        now[0] += s

    out = tmp_path / "events.jsonl"
    player = TracePlayer(lab, tmp_path / "t.jsonl", traces=[], clock=lambda: now[0],
                         sleep=sleep, events=events, events_out=out)
    player.start(t0=0.0)
    if before is not None:
        before(player)
    go.set()
    assert player.wait(10)
    player.stop(read_back=False)
    return player, [json.loads(x) for x in out.read_text().splitlines()]


def test_ramp_steps_move_from_the_values_at_its_start_to_the_target(tmp_path):
    lab = _Lab()
    d = (("l1", "a_to_b"),)
    events = [EventAction(0, "degrade", "shape", 1.0, directions=d,
                          changes={"rate_bps": 5 * 10**7}),  # before the ramp: its start
              *[EventAction(1, "degrade", "shape", 2.0 + k, directions=d, step=k - 1,
                            changes={"rate_bps": 10**7, "delay_s": 0.03}, ramp=(k, 4))
                for k in range(1, 5)]]
    player, recs = _play(tmp_path, lab, events)
    assert [c[1] for c in lab.calls] == [5 * 10**7, 4 * 10**7, 3 * 10**7, 2 * 10**7, 10**7]
    assert [c[2] for c in lab.calls] == pytest.approx([0.01, 0.015, 0.02, 0.025, 0.03])
    assert [r["done"]["shaping"]["l1 a_to_b"]["rate_bps"] for r in recs] == [
        5 * 10**7, 4 * 10**7, 3 * 10**7, 2 * 10**7, 10**7]
    assert [r.get("ramp") for r in recs] == [None, [1, 4], [2, 4], [3, 4], [4, 4]]
    assert player.errors == []


def test_ramp_step_switches_what_it_cannot_mix_at_once_and_ends_on_the_target():
    start = Shaping(delay_s=0.02)  # unshaped: no rate to start the ramp from
    target = Shaping(rate_bps=200, delay_s=0.01, loss_pct=2.0)
    assert ramp_step(start, target, 1, 2) == Shaping(rate_bps=200, delay_s=0.015,
                                                     loss_pct=1.0)
    assert ramp_step(start, target, 2, 2) == target


def test_slowdowns_wait_for_their_workload_and_agents_are_signalled(tmp_path):
    lab, ctl = _Lab(), _Ctl()
    events = [EventAction(0, "straggler", "slowdown", 1.0, workload="w", rank=3, factor=2.0),
              EventAction(1, "node_down", "down", 2.0, node="h2", links=("l1",),
                          agent="freeze"),
              EventAction(2, "node_up", "up", 3.0, node="h2", links=("l1",), agent="thaw"),
              EventAction(3, "straggler", "slowdown", 4.0, workload="w", rank=3, factor=1.0)]
    attached = []

    def on_down(player):
        orig = player._do_event

        def do(a):
            if a.event == 1:  # the workload's agents are up from here on
                player.attach("w", ctl)
                attached.append(list(ctl.calls))
            out = orig(a)
            if a.event == 2:
                player.attach("w", None)  # and gone again
            return out
        player._do_event = do

    player, recs = _play(tmp_path, lab, events, on_down)
    assert recs[0]["done"] == {"sent": False, "pending": True}
    assert attached == [[("slowdown", 3, 2.0)]]  # sent on attach
    assert recs[1]["done"]["agents"] == {"signal": "SIGSTOP", "pids": {"w": 4242}}
    assert recs[2]["done"]["agents"] == {"signal": "SIGCONT", "pids": {"w": 4242}}
    assert ctl.calls == [("slowdown", 3, 2.0), ("signal", "h2", signal.SIGSTOP),
                         ("signal", "h2", signal.SIGCONT)]
    assert recs[3]["done"] == {"sent": False, "pending": True}  # detached: kept
    assert [c[0] for c in lab.calls] == ["down", "up"] and player.errors == []


def test_failure_records_name_the_links_down_and_agents_stopped_on_their_way(tmp_path):
    prep = prepare(_write(tmp_path))
    events = [{"event": 0, "kind": "link_down", "op": "down", "links": [DCI],
               "applied_t_s": 1.0},
              {"event": 1, "kind": "link_down", "op": "down", "links": [DCI2],
               "applied_t_s": 2.0},
              {"event": 2, "kind": "node_down", "op": "down", "node": "dc1-l1-h2",
               "links": ["dc1-l1-h2-dc1-l1"], "agent": "freeze", "applied_t_s": 3.0},
              {"event": 3, "kind": "link_up", "op": "up", "links": [DCI], "applied_t_s": 4.0}]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    base = {"kind": "failure", "run_id": "r", "detail": "timeout", "rank": 0, "peer": 2,
            "op": "c0.1"}
    fails = [{**base, "node": "dc1-l1-h1", "t": 102.5,  # both DCIs down, across them
              "extra": {"src_node": "dc1-l1-h1", "dst_node": "dc2-l1-h1"}},
             {**base, "node": "dc1-l1-h1", "t": 103.5,  # inside DC1, to the frozen host
              "extra": {"src_node": "dc1-l1-h1", "dst_node": "dc1-l1-h2"}},
             {**base, "node": "dc2-l1-h2", "t": 105.0,  # DCI back: only the second down
              "extra": {"src_node": "dc2-l1-h2", "dst_node": "dc1-l1-h1"}}]
    path = tmp_path / "failures.jsonl"
    path.write_text("".join(json.dumps(f) + "\n" for f in fails))
    assert annotate_failures(prep.plan, path, tmp_path / "events.jsonl", t0=100.0) == 3
    got = [json.loads(x)["extra"] for x in path.read_text().splitlines()]
    assert [(g["links_down"], g["agents_stopped"], g["events"]) for g in got] == [
        ([DCI, DCI2], {}, [0, 1]),
        (["dc1-l1-h2-dc1-l1"], {"dc1-l1-h2": "freeze"}, [2]),
        ([DCI2], {}, [1])]
    assert got[0]["src_node"] == "dc1-l1-h1"  # the agent's fields kept
    down, agents = state_at(events, 0.5)
    assert down == {} and agents == {}


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + "  []\n")
    return path


def test_fl_rounds_are_the_iterations_events_anchor_to():
    # events at {workload: fl, iteration: k} wait for round k's start: a fedavg schedule has
    # one iteration whose gather phases are the rounds (traffic_gen Phase.anchor_iteration)
    from traffic_gen.program import compile_program

    prep = prepare(ROOT / "examples" / "faults" / "fedavg_flapping_edge.yaml")
    w = prep.workloads[0]
    phases = compile_program(w.schedule, w.placement).phases
    gathers = [ph for ph in phases if ph.round is not None]
    assert [ph.anchor_iteration for ph in gathers] == [0, 1, 2, 3]
    assert {ph.iteration for ph in phases} == {0}
    assert [(a.anchor, a.iteration, a.t_s) for a in prep.events][:2] == [
        ("fl", 1, 0.1), ("fl", 1, pytest.approx(0.3))]


def test_a_killed_agent_gets_sigkill_and_the_record_says_so(tmp_path):
    lab, ctl = _Lab(), _Ctl()
    events = [EventAction(0, "node_down", "down", 1.0, node="h2", links=("l1",), agent="kill"),
              EventAction(1, "node_down", "down", 2.0, node="h1", links=(), agent="kill")]
    player, recs = _play(tmp_path, lab, events, lambda p: p.attach("w", ctl))
    assert ctl.calls == [("signal", "h2", signal.SIGKILL), ("signal", "h1", signal.SIGKILL)]
    assert recs[0]["done"]["agents"] == {"signal": "SIGKILL", "pids": {"w": 4242}}
    assert recs[1]["done"]["agents"] == {"signal": "SIGKILL", "pids": {}}  # none on h1
    assert recs[0]["agent"] == "kill" and player.errors == []


class _PreparingLab(_Lab):
    """A lab that makes link changes ready ahead (like testbed.lab.lab.Lab.prepare_links):
    records when it prepares and applies, and whether the garbage collector was on."""

    def prepare_links(self, names, up, node=None):
        if "bad" in names:
            raise LabError("no link 'bad' in lab t")
        self.calls.append(("prepare", tuple(names), up, self.clock()))
        lab = self

        class Change:
            def apply(self):
                lab.calls.append(("apply", tuple(names), up, lab.clock(), gc.isenabled()))
                return {"links": list(names)}
        return Change()

    def set_links(self, names, up, node=None):
        if "bad" in names:
            raise LabError("no link 'bad' in lab t")
        return super().set_links(names, up, node)


def test_link_actions_are_prepared_before_their_instant_and_applied_without_gc(tmp_path):
    lab = _PreparingLab()
    events = [EventAction(0, "link_down", "down", 1.0, links=("l1",)),
              EventAction(1, "link_up", "up", 2.0, links=("bad",)),
              EventAction(2, "link_up", "up", 3.0, links=("l1",))]
    assert gc.isenabled()
    now = [0.0]
    lab.clock = lambda: now[0]

    def sleep(s):
        now[0] += s

    out = tmp_path / "events.jsonl"
    player = TracePlayer(lab, tmp_path / "t.jsonl", traces=[], clock=lab.clock, sleep=sleep,
                         events=events, events_out=out)
    player.start(t0=0.0)
    assert player.wait(10)
    player.stop(read_back=False)
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    # made ready while waiting (event 2 after event 1 at 2.0 s), sent at the planned time
    # with the collector off
    assert lab.calls == [("prepare", ("l1",), False, 0.0), ("apply", ("l1",), False, 1.0, False),
                         ("prepare", ("l1",), True, 2.0), ("apply", ("l1",), True, 3.0, False)]
    # the refused one is tried at its instant (set_links) and its record says why
    assert "no link 'bad'" in recs[1]["error"] and "error" not in recs[2]
    assert [r["done"] for r in (recs[0], recs[2])] == [{"links": ["l1"]}] * 2
    assert gc.isenabled()  # back on after each action


def test_a_failure_explained_by_an_event_says_so_instead_of_advising_a_longer_timeout():
    from orchestration.events.hits import failure_cause
    from traffic_gen.transfers import OVERDUE_ADVICE

    detail = f"TimeoutError: could not send 10 bytes within timeouts.transfer (2 s): 4 moved; " \
             f"{OVERDUE_ADVICE}"
    rec = {"node": "h2", "detail": detail,
           "extra": {"links_down": ["h3-s1"], "agents_stopped": {"h3": "freeze"}, "events": [0]}}
    told = failure_cause(rec)
    assert "raise timeouts.transfer" not in told
    assert "4 moved; link h3-s1 down on its path; agent h3 frozen (events.jsonl event 0)" in told
    # no event on its way: the advice stands
    assert failure_cause({"detail": detail, "extra": {"links_down": []}}) == detail
    assert failure_cause({"detail": "ConnectionResetError", "extra": {"links_down": ["a-b"]}}) \
        == "ConnectionResetError; link a-b down on its path"
