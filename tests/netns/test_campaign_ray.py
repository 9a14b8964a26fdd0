"""`aitb campaign --executor ray` on a Ray cluster this test starts (`ray start --head --block`
with 2 CPUs and token authentication on, `RAY_AUTH_MODE=token` with its own token file; ended
by its pid: SIGTERM makes it stop the GCS, raylet and workers it started). Every command runs
with HOME a temporary folder holding a stale `~/.ray/auth_token` (another token), as on a
machine where Ray ran before: aitb must use the token it is given, never that file.

1. A 4-point campaign of a tiny lab on Ray gives the local executor's aggregate: the same
   points, swept values, seeds, columns and every count (flows, values per metric); the
   measured times differ from run to run on any executor, so they are not compared.
2. A worker killed under a running point: the point is redone in the same invocation; then the
   driver killed (SIGKILL) while points run: the same command resumes, completed runs keep
   their bytes, the cut ones are gone and no lab of any run id remains.
3. No token, or the stale one, for that cluster: exit 2 with one line naming the cause, no
   run started.
4. `--executor ray` without `--address` (a Ray instance aitb starts) in an empty HOME leaves
   HOME without `.ray/auth_token`: aitb's own instance carries its token in the environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
from conftest import run_namespaces

pytestmark = [pytest.mark.netns, pytest.mark.timeout(1500)]
ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")

CAMPAIGN = """\
name: {name}
base:
  inline:
    name: tiny-incast
    seed: 3
    topology:
      inline:
        name: tiny
        generator: {{name: single_switch, params: {{hosts: 3, link: host-1g}}}}
        profiles:
          host-1g: {{rate: 1Gbit, buffer: 100p}}
    workloads:
      - kind: incast
        receiver: h1
        size: 32KiB
        gap: 5ms
grid:
  workloads.0.size: [16KiB, 64KiB]
  workloads.0.repeats: [1, 2]
repetitions: {reps}
seeds: repetition
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@pytest.fixture
def env(tmp_path):
    """The environment of every command: HOME with a stale ``.ray/auth_token``, no RAY_AUTH_*
    of the caller's."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if not RAY.exists():
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32) + "\n")
    out = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    return {**out, "HOME": str(home), "AITB_STATE_DIR": str(tmp_path / "state"),
            "PYTHONPATH": str(ROOT)}


@pytest.fixture
def cluster(env, tmp_path):
    """A Ray head with 2 CPUs, a 100 MB object store and token authentication with the token
    in ``cluster.token``; yields (address, its process, that file)."""
    port = free_port()
    token = tmp_path / "cluster.token"
    token.write_text(secrets.token_hex(32) + "\n")
    temp = tempfile.mkdtemp(prefix="aitb-ray-", dir="/tmp")  # short: Ray's socket paths
    proc = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", "--port", str(port), "--num-cpus", "2",
         "--object-store-memory", str(100 * 10**6), "--include-dashboard", "false",
         "--disable-usage-stats", "--temp-dir", temp],
        env={**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.5)
    assert proc.poll() is None, "ray start ended early"
    yield f"127.0.0.1:{port}", proc, token
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shutil.rmtree(temp, ignore_errors=True)  # Ray's session files and sockets


def argv(spec: Path, results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "orchestration.cli", "campaign", str(spec), "--results",
            str(results), *extra]


def state(root: Path) -> dict:
    path = root / "campaign-state.json"
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}


def done(root: Path) -> list[str]:
    return sorted(k for k, e in state(root)["runs"].items() if e["status"] == "ok")


def running_with_manifest(root: Path) -> list[str]:
    return [k for k, e in state(root)["runs"].items()
            if e["status"] == "running" and (root / e["run_dir"] / "manifest.json").exists()]


def files(run_dir: Path) -> dict[str, tuple[int, str]]:
    return {str(p.relative_to(run_dir)): (p.stat().st_mtime_ns,
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def wait_for(cond, proc, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not cond() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, f"campaign ended early: {proc.communicate()}"
    assert cond(), "the campaign never reached the state the test waits for"


def point_workers(head: subprocess.Popen) -> list[psutil.Process]:
    """The Ray workers (in the tree of the head this test started) running a point."""
    out = []
    for child in psutil.Process(head.pid).children(recursive=True):
        try:
            if "orchestration.campaign.point" in " ".join(child.cmdline()):
                out.append(child.parent())
        except psutil.NoSuchProcess:
            continue
    return [p for p in out if p is not None and p.pid != head.pid]


def no_lab_left(root: Path, seconds: float = 90) -> list[str]:
    """Run ids (from every run directory ever named in the state) with namespaces left,
    after waiting up to ``seconds`` for killed points to finish tearing down."""
    ids = {p.name.rsplit("-", 1)[-1] for p in root.glob("p*/*/rep*")}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [i for i in ids if run_namespaces(i)]
        if not left:
            return []
        time.sleep(1)
    return left


def test_ray_aggregate_matches_local(tmp_path, env, cluster):
    address, _, token = cluster
    spec = tmp_path / "c.yaml"
    spec.write_text(CAMPAIGN.format(name="exec-eq", reps=1))
    tables = {}
    for executor in ("local", "ray"):
        results = tmp_path / executor
        extra = (("--executor", "ray", "--address", address, "--ray-token-file", str(token))
                 if executor == "ray" else ())
        out = subprocess.run(argv(spec, results, *extra), env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        root = results / "exec-eq"
        assert done(root) == [f"p{p:03d}/rep0" for p in range(4)]
        tables[executor] = (pd.read_parquet(root / "aggregate.parquet"),
                            pd.read_csv(root / "runs.csv"))
        for d in root.glob("p*/*/rep*"):
            assert json.loads((d / "manifest.json").read_text())["status"] == "ok"
            assert run_namespaces(d.name.rsplit("-", 1)[-1]) == []
    (agg_l, runs_l), (agg_r, runs_r) = tables["local"], tables["ray"]
    assert list(agg_l.columns) == list(agg_r.columns)
    # (the _n counts follow each run's fidelity verdict, which two executions need not share)
    counts = ["point", "workloads.0.size", "workloads.0.repeats", "runs", "flows_mean"]
    pd.testing.assert_frame_equal(agg_l[counts], agg_r[counts])
    assert list(agg_r["flows_mean"]) == [2.0, 4.0, 2.0, 4.0]  # 2 senders x repeats
    key = ["point", "rep", "seed", "source", "flows"]
    pd.testing.assert_frame_equal(runs_l[key], runs_r[key])


def test_ray_worker_and_driver_crash_resume(tmp_path, env, cluster):
    address, head, token = cluster
    env = {**env, "RAY_AUTH_TOKEN_PATH": str(token)}  # the token as Ray's own variable gives it
    spec, results = tmp_path / "c.yaml", tmp_path / "results"
    spec.write_text(CAMPAIGN.format(name="exec-crash", reps=2))
    root = results / "exec-crash"
    cmd = argv(spec, results, "--executor", "ray", "--address", address)
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # a worker dies under a running point: that point is redone in this invocation
    wait_for(lambda: running_with_manifest(root) and point_workers(head), proc, 600)
    point_workers(head)[0].kill()  # SIGKILL, a pid in the tree of the head we started
    wait_for(lambda: len(done(root)) >= 4 and running_with_manifest(root), proc, 900)
    # then the driver dies (SIGKILL: no clean-up of its own)
    proc.kill()
    proc.communicate()
    first = state(root)
    kept = done(root)
    before = {k: files(root / first["runs"][k]["run_dir"]) for k in kept}
    cut = [root / e["run_dir"] for e in first["runs"].values() if e["status"] != "ok"]
    assert cut
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    final = state(root)
    assert done(root) == sorted(f"p{p:03d}/rep{r}" for p in range(4) for r in (0, 1))
    for k in kept:  # completed runs: same directory, same bytes, same mtimes
        assert final["runs"][k]["run_dir"] == first["runs"][k]["run_dir"]
        assert files(root / final["runs"][k]["run_dir"]) == before[k]
    # a killed point still tearing down held its writer lock: the resume waited for it before
    # deleting its run directory, so nothing recreated it; the run directories on disk are
    # exactly the final state's
    on_disk = set(root.glob("p*/*/rep*"))
    assert on_disk == {root / e["run_dir"] for e in final["runs"].values()}, on_disk
    assert not list(root.glob("p*/.*.writer"))  # each writer removed its lock when done
    seeds = {k: e["seed"] for k, e in final["runs"].items()}
    assert seeds == {f"p{p:03d}/rep{r}": 3 + r for p in range(4) for r in (0, 1)}
    table = pd.read_parquet(root / "aggregate.parquet")
    assert list(table["runs"]) == [2, 2, 2, 2]
    assert list(table["flows_mean"]) == [2.0, 4.0, 2.0, 4.0]
    assert no_lab_left(root) == []


def test_ray_token_missing_or_refused(tmp_path, env, cluster):
    address, _, _ = cluster
    spec = tmp_path / "c.yaml"
    spec.write_text(CAMPAIGN.format(name="exec-auth", reps=1))
    # Ray retries a refused connection for 20 s by default; 2 tries say the same here
    env = {**env, "RAY_gcs_server_port_wait_time_s": "2"}
    stale = Path(env["HOME"]) / ".ray" / "auth_token"
    cases = [((), "wants a token (Ray token authentication) and none was given"),
             (("--ray-token-file", str(stale)),
              f"refused the token from --ray-token-file {stale}")]
    for extra, expected in cases:
        results = tmp_path / f"r{len(extra)}"
        out = subprocess.run(argv(spec, results, "--executor", "ray", "--address", address,
                                  *extra), env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 2, out.stderr[-3000:]
        lines = out.stderr.strip().splitlines()  # one line: no traceback, no Ray log
        assert len(lines) == 1, out.stderr[-3000:]
        assert lines[0].startswith(f"error: the Ray cluster at {address} {expected}"), lines
        assert not list(results.glob("exec-auth/p*")), "a run started"


def test_ray_own_instance_leaves_home_alone(tmp_path, env):
    home = tmp_path / "empty-home"
    home.mkdir()
    spec = tmp_path / "c.yaml"
    spec.write_text(CAMPAIGN.format(name="exec-own", reps=1).replace(
        "  workloads.0.size: [16KiB, 64KiB]\n  workloads.0.repeats: [1, 2]\n",
        "  workloads.0.size: [16KiB]\n"))
    temp = tempfile.mkdtemp(prefix="aitb-ray-", dir="/tmp")  # Ray's session files, not /tmp/ray
    try:
        out = subprocess.run(argv(spec, tmp_path / "results", "--executor", "ray"),
                             env={**env, "HOME": str(home), "RAY_TMPDIR": temp}, cwd=ROOT,
                             capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert done(tmp_path / "results" / "exec-own") == ["p000/rep0"]
    assert not (home / ".ray").exists(), list((home / ".ray").rglob("*"))
