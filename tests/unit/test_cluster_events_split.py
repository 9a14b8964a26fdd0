"""``events:`` of a cluster run without root or network: which machine plays what of each
action (a cut link's two ends, a direction on its sender's machine with the underlay's delay
taken out, a slowdown on the driver), the actions carried as JSON, the machines' records
merged into one line per action, and what cannot play across machines refused before
anything exists."""

from __future__ import annotations

import pytest
from test_cluster_experiment import MACHINES, experiment

from models.errors import SpecError
from models.events import EventAction, action_from_dict, action_to_dict
from models.shaping import GilbertElliott
from models.units import BufferSize
from orchestration.events.cluster import DRIVER, merge_records, split_actions
from orchestration.run.runner import prepare

DCI = "dc1-b1-dc2-b1"


@pytest.fixture
def prep(tmp_path):
    path = experiment(tmp_path, MACHINES)
    path.write_text(path.read_text() + f"""events:
  - {{at: 1s, kind: link_down, link: {DCI}}}
  - {{at: 2s, kind: link_up, link: {DCI}}}
  - {{at: 1s, kind: node_down, node: dc1-b1}}
  - {{at: 2s, kind: node_up, node: dc1-b1}}
  - {{at: 1s, kind: degrade, link: {DCI}, delay: 5ms, rate: 10Mbit, duration: 1s}}
  - {{at: 1s, kind: straggler, rank: 1, factor: 2}}
""")
    return prepare(path)


def test_a_cut_links_ends_go_to_both_machines_and_a_direction_to_its_sender(prep):
    plan, where = prep.plan, prep.machines
    dci = next(lk for lk in plan.links if lk.name == DCI)
    assert where[dci.a.node] == "m1" and where[dci.b.node] == "m2"
    share = split_actions(prep.events, plan, where, {DCI: 0.001})
    acts = {m: {a.index: a for a in share.machines[m]} for m in share.machines}
    # link_down / link_up of the DCI: each machine its own end
    for i in (0, 1):
        assert share.expected[i] == ["m1", "m2"]
        assert acts["m1"][i].links == acts["m2"][i].links == (DCI,)
    # node_down of dc1-b1: every link of the node on m1, only the cut one on m2
    own = {lk.name for lk in plan.links_of("dc1-b1")}
    assert set(acts["m1"][2].links) == own and acts["m2"][2].links == (DCI,)
    # degrade both directions: a_to_b shaped on m1 (dc1-b1 sends), b_to_a on m2; the delay
    # less the underlay's one way, as at bring-up; the rate as planned
    shape = [i for i, a in enumerate(prep.events) if a.op == "shape" and not a.restore][0]
    assert acts["m1"][shape].directions == ((DCI, "a_to_b"),)
    assert acts["m2"][shape].directions == ((DCI, "b_to_a"),)
    for m in ("m1", "m2"):
        assert acts[m][shape].changes["delay_s"] == pytest.approx(0.004)
        assert acts[m][shape].changes["rate_bps"] == prep.events[shape].changes["rate_bps"]
    # the straggler: the driver's controller
    (slow,) = share.driver
    assert slow.op == "slowdown" and share.expected[slow.index] == [DRIVER]
    # every action is someone's
    assert sorted(share.expected) == list(range(len(prep.events)))


def test_an_action_goes_as_json_and_comes_back_equal():
    a = EventAction(event=3, kind="degrade", op="shape", t_s=1.5, anchor="ring", iteration=2,
                    directions=(("l", "a_to_b"),), step=4, ramp=(2, 5), index=7, changes={
                        "rate_bps": 10**7, "delay_s": 0.002,
                        "buffer": BufferSize(packets=100),
                        "loss_gemodel": GilbertElliott(p_pct=1.0)})
    import json

    assert action_from_dict(json.loads(json.dumps(action_to_dict(a)))) == a
    assert a.describe()["action"] == 7


def test_the_machines_records_merge_into_one_line_per_action():
    a = EventAction(event=0, kind="link_up", op="up", t_s=2.0, links=("dci",))
    m1 = {"action": 4, "planned_t_s": 2.0, "began_t_s": 2.0001, "applied_t_s": 2.0009,
          "acked_t_s": 2.0005, "late_s": 0.0009, "links": ["dci"],
          "done": {"links": ["dci"], "routes": {"h1": ["10.0.0.0/24"], "x3": []}}}
    m2 = {**m1, "began_t_s": 2.0002, "applied_t_s": 2.0015, "acked_t_s": 2.0007,
          "done": {"links": ["dci"], "routes": {"h2": ["10.0.1.0/24"], "x3": []}}}
    rec = merge_records(a, 4, [("m1", m1), ("m2", m2)], nodes={"h1", "h2"})
    assert rec["action"] == 4 and rec["kind"] == "link_up" and rec["links"] == ["dci"]
    assert rec["planned_t_s"] == 2.0 and rec["began_t_s"] == 2.0001
    assert rec["applied_t_s"] == 2.0015 and rec["acked_t_s"] == 2.0007  # the last end's
    assert rec["late_s"] == pytest.approx(0.0015)
    # the routes each machine restored, not the proxy switches' (x3: none, nobody's)
    assert rec["done"]["routes"] == {"h1": ["10.0.0.0/24"], "h2": ["10.0.1.0/24"]}
    assert rec["machines"]["m1"]["done"]["routes"] == {"h1": ["10.0.0.0/24"]}
    assert rec["machines"]["m2"]["applied_t_s"] == 2.0015 and "error" not in rec
    # a machine that never reported it (lost): the line says so, the action is not applied
    lost = merge_records(a, 4, [("m1", m1)], missing=["m2"])
    assert "machine m2: no record" in lost["error"]
    # not reached on one machine: not reached
    nr = merge_records(a, 4, [("m1", m1), ("m2", {"action": 4, "planned_t_s": 2.0,
                                                  "not_reached": True})])
    assert nr["not_reached"] is True and "error" not in nr


def test_events_are_accepted_on_a_cluster_and_agents_of_a_node_refused(tmp_path, prep):
    assert len(prep.events) == 7  # the degrade's restore after its duration
    path = experiment(tmp_path, MACHINES)
    path.write_text(path.read_text() + "events:\n"
                    "  - {at: 1s, kind: node_down, node: dc2-l1-h1, agent: freeze}\n"
                    "  - {at: 2s, kind: node_up, node: dc2-l1-h1}\n")
    with pytest.raises(SpecError) as exc:
        prepare(path)
    text = str(exc.value)
    assert str(path) in text and "events[0].agent" in text and "dc2-l1-h1" in text
    assert "cannot play on a cluster lab" in text and "events[1]" not in text
