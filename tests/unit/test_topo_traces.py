"""``trace:`` on a link direction: read and checked with the topology, carried into the plan
(and plan.json); a bad trace is one error naming the trace file, its line and the link key."""

from __future__ import annotations

import json

import pytest
from topo_helpers import find_issue, issues, load, write

from models.errors import SpecError
from models.plan import plan_from_dict, plan_to_dict
from models.trace import LinkTrace, TraceStep
from topologies import load_topology

TOPO = """
name: t
profiles:
  cell: {rate: 50Mbit, trace: {file: cell.trace, loop: true}}
nodes:
  h1: {kind: host}
  h2: {kind: host}
  s1: {kind: switch}
links:
  - endpoints: [h1, s1]
    a_to_b: {trace: {file: up.mm, format: mahimahi, window: 50ms}}
  - endpoints: [s1, h2]
    name: second
    profile: cell
"""


def _files(tmp_path):
    (tmp_path / "cell.trace").write_text("t, rate\n0s, 20Mbit\n2s, 5Mbit\n4s\n")
    (tmp_path / "up.mm").write_text("\n".join(str(ms) for ms in range(1, 101)) + "\n")


def test_traces_reach_the_plan_and_plan_json(tmp_path):
    _files(tmp_path)
    plan = load(tmp_path, TOPO)
    first, *cell = plan.traces
    assert first == LinkTrace(link="h1-s1", direction="a_to_b", file=str(tmp_path / "up.mm"),
                              format="mahimahi", loop=False, period_s=0.1,
                              steps=(TraceStep(0.0, 12_000_000),), window_s=0.05)
    # the profile's trace applies to both directions of the link that names it
    assert [(t.link, t.direction, t.loop, t.period_s) for t in cell] == [
        ("second", "a_to_b", True, 4.0), ("second", "b_to_a", True, 4.0)]
    assert cell[0].steps == (TraceStep(0.0, 20 * 10**6), TraceStep(2.0, 5 * 10**6),
                             TraceStep(4.0))
    again = plan_from_dict(json.loads(json.dumps(plan_to_dict(plan))))
    assert again.traces == plan.traces


def test_a_link_without_trace_has_none(tmp_path):
    plan = load(tmp_path, "name: t\nnodes: {h1: {kind: host}, h2: {kind: host}}\n"
                          "links: [{endpoints: [h1, h2], rate: 1Gbit}]\n")
    assert plan.traces == ()


def test_bad_trace_row_names_trace_file_line_and_link_key(tmp_path):
    _files(tmp_path)
    (tmp_path / "up.mm").write_text("1\n2\n1\n")
    found = issues(tmp_path, TOPO)
    issue = find_issue(found, "links[0].a_to_b.trace", "timestamp 1 ms is before")
    assert (issue.file, issue.line) == (str(tmp_path / "up.mm"), 3)
    assert issue.message.endswith(f"(a trace named in {tmp_path / 'lab.yaml'})")


def test_missing_trace_file_is_one_error_at_the_key_that_names_it(tmp_path):
    # the profile's trace applies to both directions: reported once, at profiles.cell's
    # trace.file and its line in the topology file, with the path that was looked for
    (tmp_path / "up.mm").write_text("1\n")
    with pytest.raises(SpecError) as err:
        load_topology(write(tmp_path, TOPO))
    [issue] = err.value.issues
    assert (issue.file, issue.line) == (str(tmp_path / "lab.yaml"), 4)
    assert issue.key_path == ("profiles", "cell", "trace", "file")
    assert issue.message == f"trace file not found: {tmp_path / 'cell.trace'}"


def test_missing_trace_file_of_generated_links_names_the_profile_key(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text("name: t\ngenerator: {name: single_switch, params: {hosts: 2, link: gig}}\n"
                    "profiles:\n  gig:\n    rate: 1Gbit\n    trace:\n      file: nope.csv\n")
    with pytest.raises(SpecError) as err:
        load_topology(path)
    [issue] = err.value.issues
    assert str(issue) == f"{path}:7: profiles.gig.trace.file: trace file not found: " \
                         f"{tmp_path / 'nope.csv'}"


def test_missing_trace_file_of_a_link_direction_names_its_file_key(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text("name: t\nnodes: {h1: {kind: host}, h2: {kind: host}}\nlinks:\n"
                    "  - endpoints: [h1, h2]\n    b_to_a:\n      trace: {file: gone.csv}\n")
    with pytest.raises(SpecError) as err:
        load_topology(path)
    [issue] = err.value.issues
    assert (issue.file, issue.line) == (str(path), 6)
    assert issue.key_path == ("links", 0, "b_to_a", "trace", "file")


@pytest.mark.parametrize(("trace", "key", "needle"), [
    ("{file: cell.trace, window: 10ms}", "links[0].a_to_b.trace.window", "mahimahi only"),
    ("{file: cell.trace, format: csv}", "links[0].a_to_b.trace.format", "'aitb' or 'mahimahi'"),
    ("{file: cell.trace, window: 10}", "links[0].a_to_b.trace.window", "no unit"),
    ("{file: cell.trace, speed: 2}", "links[0].a_to_b.trace.speed", "unknown key"),
    ("{file: one.trace, loop: true}", "links[0].a_to_b.trace.loop", "last time is above 0"),
])
def test_bad_trace_keys(tmp_path, trace, key, needle):
    _files(tmp_path)
    (tmp_path / "one.trace").write_text("t,rate\n0s,1Mbit\n")
    text = ("name: t\nnodes: {h1: {kind: host}, h2: {kind: host}}\n"
            f"links:\n  - endpoints: [h1, h2]\n    a_to_b: {{trace: {trace}}}\n")
    find_issue(issues(tmp_path, text), key, needle)


def test_trace_values_checked_against_the_link(tmp_path):
    (tmp_path / "d.trace").write_text("t, delay\n0s, 10ms\n1s, 1ms\n")
    text = ("name: t\nnodes: {h1: {kind: host}, h2: {kind: host}}\n"
            "links:\n  - endpoints: [h1, h2]\n    jitter: 5ms\n    delay: 10ms\n"
            "    trace: {file: d.trace}\n")
    # the trace is the link's own: reported at links[0].trace, line 7, for each direction
    found = issues(tmp_path, text)
    issue = find_issue(found, "links[0].trace", "a_to_b: the step at 1 s")
    assert "jitter" in issue.message and issue.line == 7 and len(found) == 2


def test_scaled_plan_scales_trace_rates_too(tmp_path):
    from topologies.scaling import scale_plan

    _files(tmp_path)
    plan = scale_plan(load(tmp_path, TOPO), 10)
    assert plan.traces[0].steps == (TraceStep(0.0, 1_200_000),)
    assert [s.rate_bps for s in plan.traces[1].steps] == [2 * 10**6, 5 * 10**5, None]


def test_fidelity_has_no_single_rate_for_a_traced_direction(tmp_path):
    from orchestration.fidelity.run import direction_refs
    from testbed.lab.layout import make_layout

    _files(tmp_path)
    plan = load(tmp_path, TOPO)
    refs = {(r.link, r.direction): r.configured for r in direction_refs(
        plan, make_layout(plan, "abc123"))}
    assert refs[("second", "a->b")].rate_bps is None  # follows cell.trace
    assert ("h1-s1", "a->b") not in refs  # a trace without a rate of its own: unshaped until
    # the first step, so the fidelity checks leave it out


def test_a_bad_trace_stops_an_experiment_before_anything_is_made(tmp_path):
    from orchestration.run.runner import prepare

    (tmp_path / "bad.trace").write_text("t, rate\n0s, 10Mbit\n1s, 5\n")
    exp = write(tmp_path, """
        name: e
        topology:
          inline:
            name: t
            nodes: {h1: {kind: host}, h2: {kind: host}}
            links: [{endpoints: [h1, h2], a_to_b: {trace: {file: bad.trace}}}]
        workloads:
          - {kind: collective, op: all_reduce, algorithm: ring, size: 1MiB}
        """, name="exp.yaml")
    with pytest.raises(SpecError) as err:
        prepare(exp)
    assert str(err.value).startswith(f"{tmp_path / 'bad.trace'}:3: ")
    assert "column rate: a rate '5' has no unit" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.trace", "exp.yaml"]


def test_a_nul_in_a_trace_file_name_is_refused_at_its_key(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text('name: t\nnodes: {h1: {kind: host}, h2: {kind: host}}\nlinks:\n'
                    '  - endpoints: [h1, h2]\n    trace: {file: "a\\0b"}\n')
    with pytest.raises(SpecError) as err:
        load_topology(path)
    [issue] = err.value.issues
    assert (issue.line, issue.key_path) == (5, ("links", 0, "trace", "file"))
    assert "NUL" in issue.message
