"""Backend selection and the OVS keys of topology files: validated before anything exists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.errors import LabError, SpecError
from models.plan import plan_from_dict, plan_to_dict
from orchestration.run.runner import prepare
from testbed.lab.backends import check_backend
from topologies import load_topology, parse_topology, resolve

ROOT = Path(__file__).resolve().parents[2]


def test_unknown_backend_is_refused_with_the_known_ones():
    with pytest.raises(LabError, match="unknown backend 'ns3'; known: native, mininet") as exc:
        check_backend("ns3", "--backend")
    assert exc.value.exit_code == 2


def test_run_refuses_an_unknown_backend_before_anything_exists():
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run",
                          str(ROOT / "examples/ring_allreduce.yaml"), "--backend", "ns3"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2 and "unknown backend 'ns3'" in out.stderr
    assert "Traceback" not in out.stderr


def test_experiment_backend_key_and_topology_backend_key(tmp_path):
    topo = tmp_path / "t.yaml"
    topo.write_text((ROOT / "topologies/examples/single_switch.yaml").read_text()
                    + "backend: mininet\n")
    assert load_topology(topo).name == "single-switch"  # the key is accepted
    exp = tmp_path / "e.yaml"
    body = (ROOT / "examples/ring_allreduce.yaml").read_text()
    exp.write_text(body)
    assert prepare(exp).backend == "native"
    exp.write_text(body + "backend: mininet\n")
    assert prepare(exp).backend == "mininet"
    exp.write_text(body + "backend: ns3\n")
    with pytest.raises(SpecError, match="backend"):
        prepare(exp)


def test_ovs_datapath_and_flows_reach_the_plan_and_survive_json():
    plan = load_topology(ROOT / "topologies/examples/ovs_leaf_spine.yaml")
    assert {n.datapath for n in plan.nodes if n.kind == "switch"} == {"ovs"}
    assert plan_from_dict(json.loads(json.dumps(plan_to_dict(plan)))) == plan


def _topo(**node_settings):
    return {"name": "t", "nodes": {"h1": {"kind": "host", **node_settings},
                                   "h2": {"kind": "host"}, "s1": {"kind": "switch"}},
            "links": [{"endpoints": ["h1", "s1"]}, {"endpoints": ["h2", "s1"]}]}


def test_datapath_and_flows_apply_to_switches_only():
    with pytest.raises(SpecError, match="datapath applies to switches only"):
        resolve(parse_topology(_topo(datapath="ovs"), "<t>"), "<t>")
    spec = _topo()
    spec["nodes"]["s1"]["flows"] = ["priority=1,actions=drop"]
    with pytest.raises(SpecError, match="flows need datapath: ovs"):
        resolve(parse_topology({**spec, "defaults": {"switch": {"datapath": "bridge"}}},
                               "<t>"), "<t>")


def test_a_loop_of_bridges_needs_stp_but_a_loop_of_ovs_switches_does_not():
    spec = {"name": "loop", "nodes": {"a": {"kind": "switch"}, "b": {"kind": "switch"},
                                      "h1": {"kind": "host"}},
            "links": [{"endpoints": ["a:p1", "b:p1"]}, {"endpoints": ["a:p2", "b:p2"]},
                      {"endpoints": ["h1", "a"]}]}
    with pytest.raises(SpecError, match="form a loop"):
        resolve(parse_topology(spec, "<t>"), "<t>")
    ovs = {**spec, "defaults": {"switch": {"datapath": "ovs"}}}
    assert resolve(parse_topology(ovs, "<t>"), "<t>").node("a").datapath == "ovs"
