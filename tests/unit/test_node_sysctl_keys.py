"""A node may set net.* sysctls only (the per-namespace tree; anything else would change the
whole machine), and the triples (tcp_rmem, tcp_wmem, ...) must be three ordered non-negative
integers: refused by `aitb topo validate` and by plan checks, with file, layer and key named.
The kernel's part (a net.* key a fresh namespace lacks or keeps read-only) is
tests/netns/test_node_sysctls_host.py."""

import dataclasses
import json
import subprocess
import sys

import pytest
from topo_helpers import find_issue, issues, load, write

from models.plan import LabPlan, PlanError

TOPO = """
name: t
defaults:
  host: {DEFAULTS}
groups:
  g: {kind: host, GROUP}
nodes:
  h1: {kind: host, NODE}
  h2: {group: g}
links:
  - endpoints: [h1, h2]
"""


def topo(node: str = "", group: str = "", defaults: str = "") -> str:
    return (TOPO.replace("DEFAULTS", f"sysctls: {{{defaults}}}" if defaults else "")
            .replace("GROUP", f"sysctls: {{{group}}}" if group else "")
            .replace("NODE", f"sysctls: {{{node}}}" if node else ""))


@pytest.mark.parametrize("layer,key", [
    ("node", "kernel.panic"),
    ("node", "vm.swappiness"),
    ("group", "fs.file-max"),
    ("defaults", "kernel.sched_rt_runtime_us"),
    ("node", "dev.raid.speed_limit_max"),
])
def test_non_net_keys_are_refused_in_every_layer(tmp_path, layer, key):
    found = issues(tmp_path, topo(**{layer: f"{key}: 1"}))
    path = {"node": "nodes.h1", "group": "groups.g", "defaults": "defaults.host"}[layer]
    issue = find_issue(found, f"{path}.sysctls.{key}", "not per network namespace")
    assert "whole machine" in issue.message and key in issue.message
    assert issue.file and issue.file.endswith("lab.yaml")


def test_net_keys_and_ordered_triples_pass(tmp_path):
    plan = load(tmp_path, topo(node="net.ipv4.tcp_rmem: '4096 131072 6291456', "
                                    "net.ipv4.tcp_ecn: 1",
                               group="net.ipv4.tcp_wmem: '4096  16384 16384'"))
    assert plan.node("h1").sysctls["net.ipv4.tcp_rmem"] == "4096 131072 6291456"
    assert plan.node("h2").sysctls["net.ipv4.tcp_wmem"] == "4096  16384 16384"


@pytest.mark.parametrize("value,needle", [
    ("'4096 131072'", "three non-negative integers"),
    ("'4096,131072,6291456'", "three non-negative integers"),
    ("'4096 131072 6291456 1'", "three non-negative integers"),
    ("'-1 131072 6291456'", "three non-negative integers"),
    ("'4k 128k 6m'", "three non-negative integers"),
    ("4096", "three non-negative integers"),
    ("'4096 100 50'", "min <= default <= max"),
    ("'8192 4096 6291456'", "min <= default <= max"),
])
@pytest.mark.parametrize("key", ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"])
def test_triples_must_be_three_ordered_integers(tmp_path, key, value, needle):
    found = issues(tmp_path, topo(node=f"{key}: {value}"))
    find_issue(found, f"nodes.h1.sysctls.{key}", needle)


def _validate(path):
    return subprocess.run([sys.executable, "-m", "orchestration.cli", "topo", "validate",
                           str(path), "--json"], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)


def test_cli_validate_names_file_layer_key_and_reason(tmp_path):
    path = write(tmp_path, topo(defaults="kernel.panic: 1", node="net.ipv4.tcp_wmem: '1 2'"))
    res = _validate(path)
    assert res.returncode == 2 and "Traceback" not in res.stdout + res.stderr
    errors = {e["key"]: e for e in json.loads(res.stdout)["errors"]}
    assert errors["defaults.host.sysctls.kernel.panic"]["file"] == str(path)
    assert "whole machine" in errors["defaults.host.sysctls.kernel.panic"]["message"]
    assert "three" in errors["nodes.h1.sysctls.net.ipv4.tcp_wmem"]["message"]


def test_a_plan_refuses_them_too(tmp_path):
    """plan.json and programmatic plans go through models.plan.plan_problems, not the
    topology checks: the same rules hold there."""
    plan = load(tmp_path, topo())
    h1 = plan.node("h1")
    for sysctls, needle in (({"kernel.panic": "1"}, "not per network namespace"),
                            ({"net.ipv4.tcp_rmem": "9 8 7"}, "min <= default <= max")):
        bad = dataclasses.replace(h1, sysctls=sysctls)
        with pytest.raises(PlanError, match=needle) as exc:
            LabPlan(plan.name, tuple(bad if n.name == "h1" else n for n in plan.nodes),
                    plan.links)
        assert "node 'h1'" in str(exc.value) or "node h1" in str(exc.value)
