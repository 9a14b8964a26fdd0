"""Small lies of the command line: ``run --check --json`` prints JSON; ``aitb run`` registers
its lab where ``$AITB_STATE_DIR`` says (where ``aitb clean`` looks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from models.errors import LabError

ROOT = Path(__file__).parent.parent.parent


def test_run_check_json_prints_one_json_object():
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run",
                          str(ROOT / "examples" / "ring_allreduce_quick.yaml"), "--check",
                          "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["ok"] is True and doc["exit_code"] == 0 and doc["nodes"] == 5


def test_run_registers_under_aitb_state_dir(tmp_path, monkeypatch):
    from orchestration.run import runner

    seen = {}

    def fake_make_lab(plan, backend, run_id=None, state_dir=None, **_kw):
        seen["state_dir"] = state_dir
        raise LabError("stop here (test)")

    monkeypatch.setenv("AITB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(runner, "make_lab", fake_make_lab)
    prep = runner.prepare(ROOT / "examples" / "ring_allreduce_quick.yaml")
    outcome = runner.execute(prep, tmp_path / "results", analyze=False)
    assert not outcome.ok
    assert seen["state_dir"] == tmp_path / "state"
