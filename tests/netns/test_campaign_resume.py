"""`aitb campaign` end to end on the host kernel: a campaign of 4 points x 2 repetitions is
interrupted (SIGINT, as Ctrl-C) once 3 runs have completed, then the same command resumes it
to 8 completed runs without touching the first 3, discarding the run that was cut short."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_namespaces

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]

CAMPAIGN = """\
name: resume-test
base:
  inline:
    name: tiny-incast
    seed: 1
    topology:
      inline:
        name: tiny
        generator: {name: single_switch, params: {hosts: 3, link: host-1g}}
        profiles:
          host-1g: {rate: 1Gbit, buffer: 100p}
    workloads:
      - kind: incast
        receiver: h1
        size: 32KiB
        gap: 5ms
grid:
  workloads.0.size: [16KiB, 64KiB]
  workloads.0.repeats: [1, 2]
repetitions: 2
"""


def state(results: Path) -> dict:
    path = results / "resume-test" / "campaign-state.json"
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}


def done(results: Path) -> list[str]:
    return [k for k, e in state(results)["runs"].items() if e["status"] == "ok"]


def half_done(results: Path) -> bool:
    """A run is under way and has created its run directory."""
    root = results / "resume-test"
    return any(e["status"] == "running" and (root / e["run_dir"] / "manifest.json").exists()
               for e in state(results)["runs"].values())


def fingerprint_files(run_dir: Path) -> dict[str, tuple[int, str]]:
    """Every file of a run directory: mtime (ns) and sha256."""
    return {str(p.relative_to(run_dir)): (p.stat().st_mtime_ns,
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.fixture
def env(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    return {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}


def test_interrupted_campaign_resumes_without_touching_completed_runs(tmp_path, env):
    spec, results = tmp_path / "campaign.yaml", tmp_path / "results"
    spec.write_text(CAMPAIGN)
    argv = [sys.executable, "-m", "orchestration.cli",
     "campaign", str(spec), "--results", str(results)]
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (len(done(results)) >= 3 and half_done(results)) and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, f"campaign ended early: {proc.communicate()}"
    proc.send_signal(signal.SIGINT)  # Ctrl-C, to the process we started, inside the 4th run
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    first = state(results)
    kept = sorted(k for k, e in first["runs"].items() if e["status"] == "ok")
    # the interrupt came while the 4th run had its run directory (its lab coming up or
    # running); a run takes ~3 s here and the poll 20 ms, so it cannot have completed too
    assert kept == ["p000/rep0", "p001/rep0", "p002/rep0"]
    root = results / "resume-test"
    before = {k: fingerprint_files(root / first["runs"][k]["run_dir"]) for k in kept}
    cut = [root / e["run_dir"] for e in first["runs"].values() if e["status"] != "ok"]
    assert len(cut) == 1 and (cut[0] / "manifest.json").exists()  # half done, left behind

    out = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    final = state(results)
    assert sorted(done(results)) == sorted(f"p{p:03d}/rep{r}" for p in range(4) for r in (0, 1))
    for k in kept:  # completed runs: same directory, same files, same bytes, same mtimes
        assert final["runs"][k]["run_dir"] == first["runs"][k]["run_dir"]
        assert fingerprint_files(root / final["runs"][k]["run_dir"]) == before[k]
    for path in cut:  # the run that was cut short is gone, redone elsewhere
        assert not path.exists()
    run_dirs = sorted(p.parent for p in root.glob("p*/*/*/manifest.json"))
    assert len(run_dirs) == 8
    for d in run_dirs:
        manifest = json.loads((d / "manifest.json").read_text())
        assert manifest["status"] == "ok"
        assert run_namespaces(manifest["lab_run_id"]) == []
    for path in cut:
        assert run_namespaces(path.name.rsplit("-", 1)[-1]) == []
    # the aggregate: 4 points, 2 repetitions each, flows as the schedule says (2 senders x
    # repeats), and a confidence interval wherever both repetitions gave a value
    table = pd.read_parquet(root / "aggregate.parquet")
    assert list(table["point"]) == ["p000", "p001", "p002", "p003"]
    assert list(table["runs"]) == [2, 2, 2, 2]
    assert list(table["flows_mean"]) == [2.0, 4.0, 2.0, 4.0]
    # (a point whose fidelity check left a run out has one value: no interval)
    both = table["runs_aggregated"] == 2
    assert table.loc[both, "fct_s_p99_ci95_low"].notna().all()
    assert (table.loc[both, "fct_s_p99_ci95_low"] > 0).all()
    assert (root / "aggregate.csv").exists() and list((root / "plots").glob("*.png"))
