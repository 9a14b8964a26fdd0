"""The default experiment (orchestration/run/quickstart.yaml, unchanged) on the host kernel:
where it lacks netem, its DCI and edge delays run on the native delay line, no VM. It is the
native twin of tests/vm/test_quickstart_vm.py (the vm tier's end-to-end tests run
on the host against the native line): the same checks of fidelity, metrics and report, plus
the native line's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.host.kernel import missing_features

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vm"))
from test_quickstart_vm import check_quickstart_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.netns, pytest.mark.timeout(600)]


def test_the_quickstart_runs_natively_and_its_lines_hold_the_configured_delays(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if not missing_features({"netem"}):
        pytest.skip("this kernel has netem: auto takes it (tests/vm/test_quickstart_vm.py)")
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", "--results",
                          str(tmp_path / "r"), "--json", "--no-vm"],
                         env=env, capture_output=True, text=True, timeout=550, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout.splitlines()[-1])
    run_dir = Path(doc["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    lines = manifest["delay_lines"]
    assert lines and {v["backend"] for v in lines.values()} == {"native"}
    assert {lk["delay_line"] for lk in json.loads((run_dir / "plan.json").read_text())["links"]
            if lk["a_to_b"]["delay_s"]} == {"native"}
    counters = json.loads((run_dir / "counters" / "delayline.json").read_text())["after"]
    assert set(counters) == set(lines)
    fidelity = json.loads((run_dir / "fidelity.json").read_text())
    native = [e for e in fidelity["links"] if e["delay_line"] == "native"]
    assert len(native) == len(lines)
    # the helper's own median added delay, kernel arrival to release, is what it was told
    # (within max(0.3 ms, 3 %)): independent of how late the probes' process was scheduled
    assert all(e["checks"]["delay"] == "ok" for e in native), [
        (e["link"], e["direction"], e["measured"]) for e in native if e["checks"]["delay"] != "ok"]
    assert fidelity["delay_line_helpers"] and all(
        h["cpu_s"] is not None for h in fidelity["delay_line_helpers"].values())
    check_quickstart_run(doc)  # the vm tier's checks: fidelity, metrics, report
