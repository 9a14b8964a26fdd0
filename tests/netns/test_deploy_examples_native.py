"""`aitb topo deploy` of every example topology on the host kernel: where it lacks netem, the
links' delays run on the native delay line (no VM), and destroy leaves nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.host.kernel import missing_features
from testbed.lab.registry import pid_alive

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "topologies" / "examples").glob("*.yaml"))

pytestmark = [pytest.mark.netns, pytest.mark.timeout(600)]


def _aitb(*args: str, env: dict) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestration.cli", *args], env=env,
                          capture_output=True, text=True, timeout=500, cwd=ROOT)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_deploys_on_the_host_kernel(path, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}
    out = _aitb("topo", "deploy", str(path), "--json", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    rid = json.loads(out.stdout.splitlines()[-1])["run_id"]
    plan = json.loads((tmp_path / "state" / rid / "plan.json").read_text())
    records = [json.loads(line) for line in
               (tmp_path / "state" / rid / "registry.jsonl").read_text().splitlines() if line]
    destroyed = _aitb("topo", "destroy", rid, env=env)
    assert destroyed.returncode == 0, destroyed.stderr[-2000:]
    assert not (tmp_path / "state" / rid).exists()
    assert not [n for n in os.listdir("/var/run/netns") if n.startswith(f"aitb-{rid}-")]
    delayed = [lk for lk in plan["links"] for d in ("a_to_b", "b_to_a")
               if lk[d]["delay_s"] or lk[d]["loss_pct"]]
    helpers = [r for r in records if r.get("role") == "delay-line"]
    if delayed and missing_features({"netem"}):  # no netem here: every line is native
        assert {lk["delay_line"] for lk in delayed} == {"native"}
        # ended by destroy (a zombie until whoever adopted it reaps it counts as ended)
        assert helpers and not any(pid_alive(r["pid"], r["start"]) for r in helpers)
