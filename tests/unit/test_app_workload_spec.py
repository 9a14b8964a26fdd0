"""``kind: app`` entries: placeholders, checks at prepare time (file, key, node), and the
``apps`` metrics section against a hand table."""

from __future__ import annotations

import textwrap

import pandas as pd
import pytest

from analysis.metrics.apps import app_metrics
from models.errors import SpecError
from orchestration.apps.argv import fill
from orchestration.run.runner import prepare

TOPO = """\
    topology:
      inline:
        name: apps
        nodes:
          c1: {kind: host}
          c2: {kind: host}
          h1: {kind: host}
          s1: {kind: switch}
          r1: {kind: router}
        links:
          - {endpoints: [c1, s1]}
          - {endpoints: [c2, s1]}
          - {endpoints: [h1, s1]}
          - {endpoints: [r1, s1]}
"""


def _write(tmp_path, workload: str):
    path = tmp_path / "exp.yaml"
    path.write_text("name: appexp\n" + textwrap.dedent(TOPO) + "workloads:\n"
                    + textwrap.indent(textwrap.dedent(workload), "  "))
    return path


def test_placeholders_filled_per_rank(tmp_path):
    prep = prepare(_write(tmp_path, """\
        - kind: app
          nodes: [c2, c1, h1]
          command: [w, "{node}", "{rank}/{world_size}", "{master_addr}", "{addr:h1}", "{{x}}"]
          env: {MASTER: "{master_addr}", N: 3}
          timeout: 30s
    """))
    app = prep.workloads[0].app
    addr = {n: str(prep.plan.address_of(n)) for n in ("c1", "c2", "h1")}
    assert app.timeout_s == 30.0 and app.name == "app"
    assert [r.node for r in app.ranks] == ["c2", "c1", "h1"]
    assert app.ranks[1].argv == ("w", "c1", "1/3", addr["c2"], addr["h1"], "{x}")
    assert dict(app.ranks[2].env) == {"MASTER": addr["c2"], "N": "3"}
    assert prep.workloads[0].placement == {0: "c2", 1: "c1", 2: "h1"}


@pytest.mark.parametrize(("workload", "key", "needle"), [
    ("{kind: app, nodes: [c1, zz], command: [x]}", "workloads[0].nodes[1]",
     "node 'zz' is not a host"),
    ("{kind: app, nodes: [c1, r1], command: [x]}", "workloads[0].nodes[1]",
     "node 'r1' is not a host"),
    ("{kind: app, nodes: [c1, c1], command: [x]}", "workloads[0].nodes", "listed twice: c1"),
    ("{kind: app, nodes: [c1, c2], command: [x, '{rnak}']}", "workloads[0].command[1]",
     "node c1: unknown placeholder {rnak}"),
    ("{kind: app, nodes: [c1, c2], command: [x, '{addr:nope}']}", "workloads[0].command[1]",
     "'nope' is not a host with a lab address"),
    ("{kind: app, nodes: [c1], command: [x], env: {A: '{rank!r}'}}", "workloads[0].env.A",
     "no conversions"),
    ("{kind: app, nodes: [c1], command: [x, '{rank']}", "workloads[0].command[1]",
     "node c1:"),
    ("{kind: app, nodes: [c1], command: [x], timeout: 5}", "workloads[0].timeout", "unit"),
    ("{kind: app, nodes: [c1], command: []}", "workloads[0].command", "at least 1"),
    ("{kind: app, nodes: [c1], command: [x], extra: 1}", "workloads[0].extra", "unknown key"),
])
def test_bad_entries_name_file_key_and_node(tmp_path, workload, key, needle):
    path = _write(tmp_path, f"- {workload}\n")
    with pytest.raises(SpecError) as info:
        prepare(path)
    found = [(i.to_dict()["key"], i.message, i.file) for i in info.value.issues]
    assert any(k == key and needle in m and f == str(path) for k, m, f in found), found


def test_fill_plain():
    assert fill("a{rank}b", {"rank": "2"}, {}) == "a2b"
    with pytest.raises(ValueError, match="unknown placeholder {rank:x}"):
        fill("{rank:x}", {"rank": "2"}, {})


def test_app_metrics_completion_and_slowest_node():
    rows = pd.DataFrame([
        {"workload": "w", "workload_index": 1, "node": "a", "t_start": 10.0, "t_end": 12.0,
         "duration_s": 2.0, "exit_code": 0},
        {"workload": "w", "workload_index": 1, "node": "b", "t_start": 10.5, "t_end": 13.0,
         "duration_s": 2.5, "exit_code": 0},
        {"workload": "f", "workload_index": 2, "node": "a", "t_start": 20.0, "t_end": 21.0,
         "duration_s": 1.0, "exit_code": 3},
        {"workload": "f", "workload_index": 2, "node": "b", "t_start": 20.0, "t_end": None,
         "duration_s": None, "exit_code": None}])
    w, f = app_metrics(rows)["workloads"]
    assert w == {"workload": "w", "workload_index": 1, "nodes": 2, "ok": True,
                 "completion_time_s": 3.0, "slowest_node": "b", "slowest_duration_s": 2.5,
                 "failed_nodes": []}
    assert not f["ok"] and f["completion_time_s"] is None and f["failed_nodes"] == ["a", "b"]
    assert app_metrics(pd.DataFrame()) == {"workloads": []}


def test_gloo_containers_example_prepares():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    prep = prepare(root / "examples" / "containers" / "gloo_allreduce.yaml")
    gloo, ring = prep.workloads
    assert [r.argv[3] for r in gloo.app.ranks] == ["0", "1", "2", "3"]
    assert gloo.app.ranks[2].argv[7] == f"{prep.plan.address_of('g1')}:29500"
    assert all(n.image == "aitb-gloo:1" for n in prep.plan.hosts()) and ring.app is None
