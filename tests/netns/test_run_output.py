"""`aitb run` output modes on a host-kernel example: the run directory is stdout's last line,
--json is one strict JSON object, --quiet prints no progress, run.log and fidelity.json are
in the run directory; bad input exits 2 in every mode."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "examples" / "ring_allreduce_quick.yaml"


def aitb(*args, env):
    return subprocess.run([sys.executable, "-m", "orchestration.cli",
     "run", *args], capture_output=True,
                          text=True, timeout=300, env=env, cwd=ROOT)


@pytest.fixture
def env(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    return {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}


def test_plain_json_and_quiet(tmp_path, env):
    res = str(tmp_path / "results")
    plain = aitb(str(QUICK), "--results", res, env=env)
    assert plain.returncode == 0, plain.stderr[-2000:]
    run_dir = Path(plain.stdout.splitlines()[-1])
    assert "workload 0 (all_reduce-ring)" in plain.stderr and "fidelity" in plain.stderr
    log = (run_dir / "run.log").read_text()
    assert "bringing up lab ring4" in log and "status ok" in log
    fidelity = json.loads((run_dir / "fidelity.json").read_text())
    assert len(fidelity["links"]) == 8  # 4 host links x 2 shaped directions

    as_json = aitb(str(QUICK), "--results", res, "--json", env=env)
    doc = json.loads(as_json.stdout)  # the whole of stdout: one strict JSON object
    assert doc["ok"] is True and doc["exit_code"] == 0 and Path(doc["run_dir"]).is_dir()
    assert doc["trustworthy"] == json.loads(
        (Path(doc["run_dir"]) / "fidelity.json").read_text())["trustworthy"]
    assert as_json.stderr == ""

    quiet = aitb(str(QUICK), "--results", res, "-q", env=env)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert len(quiet.stdout.splitlines()) == 1 and Path(quiet.stdout.strip()).is_dir()


def test_bad_input_exits_2(tmp_path, env):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntopology: {generator: nope}\nworkloads: []\n")
    for mode in ([], ["--json"], ["-q"]):
        out = aitb(str(bad), "--results", str(tmp_path / "r"), *mode, env=env)
        assert out.returncode == 2, (mode, out.stderr)
    doc = json.loads(aitb(str(bad), "--json", env=env).stdout)
    assert doc["exit_code"] == 2 and any("workloads" in (i["key"] or "") for i in doc["issues"])
    assert not (tmp_path / "r").exists()


def test_early_ctrl_c_exits_130_with_no_traceback_and_no_manifestless_run_dir(tmp_path, env):
    """SIGINT from the first moments on (imports, preparing, host facts, lab bring-up): the
    console script exits 130 with one line, and a run directory, if one was made, has a
    manifest saying ``interrupted`` (an early Ctrl-C used to print a KeyboardInterrupt
    traceback, or leave a folder with only experiment.json and plan.json)."""
    import signal
    import time

    script = Path(sys.executable).parent / "aitb"
    results = tmp_path / "results"
    for delay_s in (0.15, 0.4, 0.7, 1.0, 1.5, 2.5):
        proc = subprocess.Popen([str(script), "run", str(QUICK), "--results", str(results)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, cwd=ROOT)
        time.sleep(delay_s)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 130) and "Traceback" not in err, (delay_s, err[-3000:])
    for run_dir in results.glob("*/*"):
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] in ("ok", "interrupted"), (run_dir, manifest["status"])
