"""examples/python/sweep_incast.py for real (root, host kernel: no delay line needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_namespaces

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_sweep_example_runs_every_point(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "examples/python/sweep_incast.py"),
                          str(tmp_path / "results")], capture_output=True, text=True,
                         timeout=580, env=env, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["64KiB", "256KiB"]
    for ln in lines:
        run_dir = Path(ln.split()[-1])
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "ok"
        assert run_namespaces(manifest["lab_run_id"]) == []  # the lab is gone
        assert float(ln.split()[2]) > 0  # goodput_bps of the point
