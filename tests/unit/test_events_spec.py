"""``events:`` of experiment files (orchestration/events/spec.py): expanded to actions before
any lab exists; bad names, kinds and times are refused naming file, key and line, with
suggestions, and `aitb run` creates nothing for them. The scheduler's event path against a
fake lab (testbed/live/trace_player.py): order, anchors, records, actions never reached."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from models.errors import AitbError, SpecError
from models.events import EventAction
from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
from models.shaping import Shaping
from orchestration.run.runner import prepare
from testbed.live.trace_player import TracePlayer

ROOT = Path(__file__).resolve().parents[2]
HEAD = """name: ev
scale: 10
topology:
  inline:
    name: two-dc
    generator:
      name: multi_dc_leaf_spine
      params: {n_dcs: 2, spines: 1, leaves: 1, hosts_per_leaf: 2, dci_links_per_pair: 2,
               dci: dci}
    profiles:
      dci: {rate: 1Gbit, buffer: 200p}
workloads:
  - {kind: collective, name: ring, op: all_reduce, algorithm: ring, size: 1MiB}
events:
"""


def _prep(tmp_path: Path, events: str):
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + events)
    return path, prepare


def _issues(tmp_path: Path, events: str) -> list[str]:
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + events)
    with pytest.raises(SpecError) as exc:
        prepare(path)
    return [str(i) for i in exc.value.issues]


def test_example_experiment_expands_to_anchored_actions():
    prep = prepare(ROOT / "examples" / "dci_failover.yaml")
    ops = [(a.kind, a.op, a.anchor, a.iteration, a.links, a.restore) for a in prep.events]
    assert ops == [
        ("link_down", "down", "ring", 10, ("dc1-b1-dc2-b1",), False),
        ("link_up", "up", "ring", 30, ("dc1-b1-dc2-b1",), False),
        ("degrade", "shape", "ring", 40, (), False),
        ("degrade", "shape", "ring", 40, (), True)]
    assert prep.events[2].directions == (("dc1-b1-dc2-b1-2", "a_to_b"),
                                         ("dc1-b1-dc2-b1-2", "b_to_a"))
    assert prep.events[2].changes == {"rate_bps": 50 * 10**6}  # 500Mbit / scale 10
    assert prep.events[3].t_s == 0.5  # duration: 500ms


def test_flap_node_and_absolute_times(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + """\
  - {at: 2s, kind: flap, link: dc1-b1-dc2-b1, period: 1s, down: 200ms, count: 3}
  - {at: 500ms, kind: node_down, node: dc1-b1}
  - {at: {workload: ring, offset: 1s}, kind: node_up, node: dc1-b1}
  - {at: 1s, kind: degrade, link: [dc1-b1-dc2-b1], direction: a_to_b, loss: 1%, buffer: 100p}
""")
    acts = prepare(path).events
    flap = [(a.op, a.t_s, a.step) for a in acts if a.kind == "flap"]
    assert flap == [("down", 2.0, 0), ("up", 2.2, 1), ("down", 3.0, 2), ("up", 3.2, 3),
                    ("down", 4.0, 4), ("up", pytest.approx(4.2), 5)]
    node_down = next(a for a in acts if a.kind == "node_down")
    assert node_down.anchor is None and node_down.t_s == 0.5
    assert set(node_down.links) == {"dc1-b1-dc1-s1", "dc1-b1-dc2-b1", "dc1-b1-dc2-b1-2"}
    node_up = next(a for a in acts if a.kind == "node_up")
    assert (node_up.anchor, node_up.iteration, node_up.t_s) == ("ring", None, 1.0)
    degrade = next(a for a in acts if a.kind == "degrade")
    assert degrade.directions == (("dc1-b1-dc2-b1", "a_to_b"),)
    assert degrade.changes["loss_pct"] == 1.0 and degrade.changes["loss_gemodel"] is None
    assert degrade.changes["buffer"].packets == 10  # 100 packets / scale 10


@pytest.mark.parametrize("events, needles", [
    ("  - {at: 1s, kind: link_down, link: dc1-b1-dc2-b3}\n",
     ["exp.yaml:15: events[0].link: no link 'dc1-b1-dc2-b3'", "did you mean dc1-b1-dc2-b1"]),
    ("  - {at: 1s, kind: node_up, node: dc1-s9}\n",
     ["exp.yaml:15: events[0].node: no node 'dc1-s9'", "did you mean dc1-s1"]),
    ("  - {at: {workload: rign, iteration: 3}, kind: link_up, link: dc1-b1-dc2-b1}\n",
     ["events[0].at.workload: no workload 'rign' in the experiment", "did you mean ring"]),
    ("  - {at: 1s, kind: link_up, link: [dc1-b1-dc2-b1, nope]}\n",
     ["events[0].link[1]: no link 'nope'"]),
    ("  - {at: 1s, kind: link_explode, link: dc1-b1-dc2-b1}\n",
     ["events[0]", "link_explode", "link_down"]),
    ("  - {at: 5, kind: link_down, link: dc1-b1-dc2-b1}\n",
     ["exp.yaml:15: events[0].at: a duration 5 has no unit"]),
    ("  - {at: -1s, kind: link_down, link: dc1-b1-dc2-b1}\n",
     ["events[0].at: duration '-1s' is negative"]),
    ("  - {at: {workload: ring, iteration: -1}, kind: link_down, link: dc1-b1-dc2-b1}\n",
     ["events[0].at.iteration"]),
    ("  - {at: {workload: ring, iteration: 1}, kind: link_down, link: dc1-b1-dc2-b1}\n",
     ["exp.yaml:15: events[0].at.iteration: workload ring has iterations (or rounds) 0..0: "
      "an event at iteration 1 would never happen"]),
    ("  - {at: 1s, kind: flap, link: dc1-b1-dc2-b1, period: 1s, down: 1s}\n",
     ["events[0].down: down 1s must be above 0 and shorter than the period 1s"]),
    ("  - {at: 1s, kind: degrade, link: dc1-b1-dc2-b1}\n",
     ["events[0]: a degrade sets at least one of rate"]),
    ("  - {at: 1s, kind: degrade, link: dc1-b1-dc2-b1, direction: up, rate: 1Gbit}\n",
     ["events[0].direction"]),
    ("  - {at: 1s, kind: degrade, link: dc1-b1-dc2-b1, rate: fast}\n",
     ["events[0].rate"]),
    ("  - {at: 1s, kind: degrade, link: dc1-b1-dc2-b1, jitter: 5ms}\n",
     ["events[0]: dc1-b1-dc2-b1 a_to_b:", "jitter"]),
    ("  - {at: 1s, kind: link_down, link: dc1-b1-dc2-b1, node: dc1-b1}\n",
     ["events[0].node"]),
])
def test_bad_events_are_refused_naming_file_key_and_line(tmp_path, events, needles):
    text = "\n".join(_issues(tmp_path, events))
    for needle in needles:
        assert needle in text, text


def test_every_bad_name_is_reported_at_once(tmp_path):
    issues = _issues(tmp_path, "  - {at: 1s, kind: link_down, link: a}\n"
                               "  - {at: 2s, kind: node_down, node: b}\n")
    assert len(issues) == 2 and "events[0].link" in issues[0] and "events[1].node" in issues[1]


def test_aitb_run_refuses_a_bad_event_without_traceback_and_creates_nothing(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD + "  - {at: 1s, kind: link_down, link: dc1-b1-dc2-b3}\n")
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(path),
                          "--results", str(tmp_path / "results")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2
    assert "events[0].link: no link 'dc1-b1-dc2-b3'" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "results").exists()


DCI, DCI2 = "dc1-b1-dc2-b1", "dc1-b1-dc2-b1-2"
_ONE_RING = "  - {kind: collective, name: ring, op: all_reduce, algorithm: ring, size: 1MiB}\n"
assert _ONE_RING in HEAD
# ring with iterations 0..4, and a second workload (its start not ordered against ring's)
HEAD_TWO = HEAD.replace(_ONE_RING, _ONE_RING.replace("1MiB}", "1MiB, iterations: 5}")
                        + _ONE_RING.replace("name: ring", "name: other"))


@pytest.mark.parametrize("events, needle", [
    (f"  - {{at: 1s, kind: link_up, link: {DCI}}}\n",
     f"exp.yaml:16: events[0].link: link {DCI} is already up at this link_up (at 1 s): no "
     "event before it takes the link down"),
    (f"  - {{at: 3s, kind: link_down, link: {DCI}}}\n"  # earlier in the file, later in time
     f"  - {{at: 500ms, kind: link_down, link: {DCI2}}}\n"
     f"  - {{at: 1s, kind: link_up, link: [{DCI2}, {DCI}]}}\n",
     f"exp.yaml:18: events[2].link[1]: link {DCI} is already up at this link_up (at 1 s): no "
     "event before it takes the link down; events[0] (link_down at 3 s) takes it down only "
     "after this one"),
    (f"  - {{at: 1s, kind: link_down, link: {DCI}}}\n"
     f"  - {{at: 2s, kind: link_up, link: {DCI}}}\n"
     f"  - {{at: 3s, kind: link_up, link: {DCI}}}\n",
     f"exp.yaml:18: events[2].link: link {DCI} is already up at this link_up (at 3 s): "
     "events[1] (link_up at 2 s) brought it back up after events[0] (link_down at 1 s) took "
     "it down"),
    (f"  - {{at: 1s, kind: partition, name: split, link: [{DCI}], duration: 500ms}}\n"
     "  - {at: 3s, kind: heal, partition: split}\n",
     f"exp.yaml:17: events[1].partition: link {DCI} is already up at this heal (at 3 s): "
     "events[0] (partition at 1.5 s) brought it back up after events[0] (partition at 1 s) "
     "took it down"),
    (f"  - {{at: 5s, kind: partition, name: split, link: [{DCI}]}}\n"
     "  - {at: 3s, kind: heal, partition: split}\n",
     f"exp.yaml:17: events[1].partition: link {DCI} is already up at this heal (at 3 s): no "
     "event before it takes the link down; events[0] (partition at 5 s) takes it down only "
     "after this one"),
    (f"  - {{at: 1s, kind: link_down, link: {DCI}}}\n"
     f"  - {{at: 2s, kind: link_down, link: {DCI}}}\n",
     f"exp.yaml:17: events[1].link: link {DCI} is already down at this link_down (at 2 s): "
     "events[0] (link_down at 1 s) took it down and no event brings it back up before this "
     "one"),
    (f"  - {{at: 1s, kind: flap, link: {DCI}, period: 1s, down: 200ms, count: 2}}\n"
     f"  - {{at: 2.1s, kind: link_down, link: {DCI}}}\n",  # inside the second flap's down
     f"events[1].link: link {DCI} is already down at this link_down (at 2.1 s): events[0] "
     "(flap at 2 s) took it down"),
    (f"  - {{at: {{workload: ring, iteration: 1}}, kind: link_down, link: {DCI}}}\n"
     f"  - {{at: {{workload: ring, iteration: 3, offset: 10ms}}, kind: link_down, "
     f"link: {DCI}}}\n",
     f"events[1].link: link {DCI} is already down at this link_down (0.01 s after ring's "
     "iteration 3): events[0] (link_down 0 s after ring's iteration 1) took it down"),
], ids=["up-never-down", "up-before-its-down", "up-twice", "heal-after-duration",
        "heal-before-its-partition", "down-twice", "down-in-a-flap", "down-twice-iterations"])
def test_an_up_of_a_link_up_or_a_down_of_a_link_down_is_refused(tmp_path, events, needle):
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD_TWO + events)
    with pytest.raises(SpecError) as exc:
        prepare(path)
    text = "\n".join(str(i) for i in exc.value.issues)
    assert needle in text, text
    assert len(exc.value.issues) == 1, text


@pytest.mark.parametrize("events", [
    f"  - {{at: 1s, kind: link_down, link: {DCI}}}\n  - {{at: 2s, kind: link_up, link: {DCI}}}\n"
    f"  - {{at: 3s, kind: link_down, link: {DCI}}}\n  - {{at: 4s, kind: link_up, link: {DCI}}}\n",
    # the up first in the file, later in time
    f"  - {{at: 2s, kind: link_up, link: {DCI}}}\n  - {{at: 1s, kind: link_down, link: {DCI}}}\n",
    f"  - {{at: 1s, kind: partition, name: split, link: [{DCI}, {DCI2}]}}\n"
    "  - {at: 2s, kind: heal, partition: split}\n",
    f"  - {{at: 1s, kind: node_down, node: dc1-b1}}\n  - {{at: 2s, kind: link_up, link: {DCI}}}\n",
    f"  - {{at: 1s, kind: flap, link: {DCI}, period: 1s, down: 200ms}}\n"
    f"  - {{at: 1.5s, kind: link_down, link: {DCI}}}\n  - {{at: 2s, kind: link_up, link: {DCI}}}\n",
    # one workload: iteration 1 + 0 s comes before iteration 3 + 0 s
    f"  - {{at: {{workload: ring, iteration: 1}}, kind: link_down, link: {DCI}}}\n"
    f"  - {{at: {{workload: ring, iteration: 3}}, kind: link_up, link: {DCI}}}\n",
    # orders not known before the run: left to it
    f"  - {{at: 1s, kind: link_down, link: {DCI}}}\n"
    f"  - {{at: {{workload: ring, offset: 500ms}}, kind: link_up, link: {DCI}}}\n",
    f"  - {{at: {{workload: ring}}, kind: link_down, link: {DCI}}}\n"
    f"  - {{at: {{workload: other}}, kind: link_down, link: {DCI}}}\n",
    # ring's up may come between the two absolute downs
    f"  - {{at: 1s, kind: link_down, link: {DCI}}}\n"
    f"  - {{at: {{workload: ring, offset: 500ms}}, kind: link_up, link: {DCI}}}\n"
    f"  - {{at: 3s, kind: link_down, link: {DCI}}}\n",
    f"  - {{at: {{workload: ring, iteration: 1, offset: 5s}}, kind: link_down, link: {DCI}}}\n"
    f"  - {{at: {{workload: ring, iteration: 3}}, kind: link_up, link: {DCI}}}\n",
], ids=["down-up-down-up", "file-order-is-not-time", "partition-heal", "node-down-link-up",
        "flap-then-down-up", "iterations", "absolute-vs-workload", "two-workloads",
        "an-up-of-unknown-order-between-downs",
        "later-iteration-smaller-offset"])
def test_down_up_pairs_and_orders_unknown_before_the_run_are_accepted(tmp_path, events):
    path = tmp_path / "exp.yaml"
    path.write_text(HEAD_TWO + events)
    acts = prepare(path).events
    assert {a.op for a in acts} <= {"down", "up"} and acts


class _FakeLab:
    """Records set_links and set_shaping calls (and the time on the fake clock)."""

    def __init__(self, now: list[float]) -> None:
        self.now = now
        self.plan = LabPlan("t", nodes=(NodePlan("h1", "host"), NodePlan("h2", "host")),
                            links=(LinkPlan("l1", Endpoint("h1", "eth0"),
                                            Endpoint("h2", "eth0"),
                                            a_to_b=Shaping(rate_bps=10**8)),))
        self.calls: list[tuple] = []

    def set_links(self, names, up, node=None):
        self.calls.append(("up" if up else "down", tuple(names), self.now[0]))
        if up and names == ("bad",):
            raise AitbError("kernel said no")
        return {"links": list(names)}

    def set_shaping(self, link, direction, shaping, read_back=True):
        self.calls.append(("shape", link, direction, shaping.rate_bps, self.now[0]))


class _Time:
    """A fake clock; ``sleep`` advances it, once ``go`` is set."""

    def __init__(self, now: list[float]) -> None:
        self.now = now
        self.go = threading.Event()
        self.go.set()

    def clock(self) -> float:
        return self.now[0]

    def sleep(self, s: float) -> None:
        self.go.wait(10)
        self.now[0] += s


def test_scheduler_applies_absolute_and_anchored_events_in_time_order(tmp_path):
    now = [100.0]
    lab, t = _FakeLab(now), _Time(now)
    events = [EventAction(0, "link_down", "down", 2.0, links=("l1",)),
              EventAction(1, "link_up", "up", 0.5, anchor="w", iteration=3, links=("l1",)),
              EventAction(2, "degrade", "shape", 1.0, directions=(("l1", "a_to_b"),),
                          changes={"rate_bps": 10**6}),
              EventAction(2, "degrade", "shape", 3.0, directions=(("l1", "a_to_b"),),
                          restore=True, step=1),
              EventAction(3, "link_up", "up", 0.0, anchor="w", iteration=99, links=("bad",))]
    out = tmp_path / "events.jsonl"
    player = TracePlayer(lab, tmp_path / "link_trace.jsonl", traces=[], clock=t.clock,  # type: ignore[arg-type]
                         sleep=t.sleep, events=events, events_out=out)
    t.go.clear()  # the clock stands still until the anchor is in
    player.start(t0=100.0)
    assert player.anchor("w", 101.0, iteration=3) == 1  # at 1.0 + 0.5
    assert player.anchor("w", 101.0, iteration=3) == 0  # only the first start counts
    t.go.set()
    while len(lab.calls) < 4:
        player.wait(0.01)
    player.stop()
    assert [c[0] for c in lab.calls] == ["shape", "up", "down", "shape"]
    assert lab.calls[3][3] == 10**8  # restored to the shaping at the start
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["event"], r["planned_t_s"]) for r in recs[:4]] == [
        (2, 1.0), (1, 1.5), (0, 2.0), (2, 3.0)]
    assert all(r["applied_t_s"] >= r["planned_t_s"] and r["late_s"] >= 0 for r in recs[:4])
    assert recs[1]["anchor"] == "w" and recs[1]["iteration"] == 3
    # iteration 99 never started: accounted for, not applied
    assert recs[4] == {**events[4].describe(), "planned_t_s": None, "not_reached": True}
    assert player.events_applied == 4 and player.errors == []


def test_a_failed_event_is_recorded_and_the_next_still_runs(tmp_path):
    now = [0.0]
    lab, t = _FakeLab(now), _Time(now)
    events = [EventAction(0, "link_up", "up", 1.0, links=("bad",)),
              EventAction(1, "link_down", "down", 2.0, links=("l1",))]
    out = tmp_path / "events.jsonl"
    player = TracePlayer(lab, tmp_path / "t.jsonl", traces=[], clock=t.clock,  # type: ignore[arg-type]
                         sleep=t.sleep, events=events, events_out=out)
    player.start(t0=0.0)
    assert player.wait(10)
    player.stop()
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert "kernel said no" in recs[0]["error"] and player.errors == [recs[0]["error"]]
    assert "error" not in recs[1] and lab.calls[-1][0] == "down"
