"""`aitb topo deploy` of the example topology files through topologies.load_topology."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_namespaces

import topologies

pytestmark = pytest.mark.netns
EXAMPLES = sorted((Path(topologies.__file__).parent / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_deploy_each_example_or_say_why_not(labs, path):
    from testbed.lab.lab import missing_kernel_features

    plan = topologies.load_topology(path)
    # what deploy itself decides: auto delay lines resolved (native where netem is missing)
    missing = missing_kernel_features(plan)
    rid = labs.new_id()
    env = {**os.environ, "AITB_STATE_DIR": str(labs.state_dir)}
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "topo", "deploy", str(path),
                          "--run-id", rid], env=env, capture_output=True, text=True, timeout=300)
    if missing:  # e.g. delay_line: netem on a host without it: a clear error, nothing created
        assert out.returncode == 1 and "aitb --vm" in out.stderr
        assert run_namespaces(rid) == []
        return
    assert out.returncode == 0, out.stderr
    # a namespace per node, and the wire namespace where native delay lines hold packets
    names = {n.removeprefix(f"aitb-{rid}-") for n in run_namespaces(rid)}
    assert names - {"_wire"} == {n.name for n in plan.nodes}, names
    subprocess.run([sys.executable, "-m", "orchestration.cli", "topo", "destroy", rid], env=env,
                   check=True, timeout=120)
