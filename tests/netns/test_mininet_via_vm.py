"""`aitb run --backend mininet` of an experiment that needs netem, on a host whose
kernel lacks it, runs inside the stock-kernel VM like the native backend (it used to be
refused), on the Mininet backend, and its iterations pay the DCI delay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.host.capabilities import needs_vm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "vm"))
from test_dci_delay_iteration import (  # noqa: E402
    _dci_steps_per_iteration,
    _experiment,
    _iteration_times_s,
)

pytestmark = [pytest.mark.netns, pytest.mark.timeout(900)]  # one TCG boot plus the run
DELAY_S = 0.300  # one way on the DCI


def test_mininet_run_needing_netem_goes_through_the_vm(tmp_path):
    pytest.importorskip("mininet.net", reason="Mininet is installed by scripts/setup.sh")
    if not needs_vm({"netem"}):
        pytest.skip("this kernel has netem: no VM involved (the vm tier runs it directly)")
    k, _ = _dci_steps_per_iteration()
    exp = tmp_path / "exp.yaml"
    doc = _experiment(DELAY_S)
    # netem asked for explicitly: auto would take the native line on this host (no VM)
    doc["topology"]["inline"]["delay_line"] = "netem"
    exp.write_text(json.dumps(doc))  # JSON is YAML
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(exp), "--results",
                          str(tmp_path / "results"), "--json", "--no-analysis", "--backend",
                          "mininet"], capture_output=True, text=True, timeout=800, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    run_dir = Path(json.loads(out.stdout.splitlines()[-1])["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "mininet"
    times = _iteration_times_s(run_dir)
    print(f"mininet via the VM: K={k}, iteration times s {times}")
    assert times and min(times) >= k * DELAY_S, times  # netem never delivers early
