"""Campaign wall time: the local executor (one run after the other) against Ray with 2 runs at
once on this machine, for one 16-point campaign of a tiny incast lab (3 hosts on a switch).
Starts its own Ray head (`ray start --head --block`, 2 CPUs, token authentication with a token
file of its own, ended by its pid) and checks that both aggregates agree in content: points,
swept values, seeds and every count.

Usage (root, host kernel, Ray installed): .venv/bin/python bench/campaign_executors.py
Prints both wall times and their ratio. On 2 cores each run keeps one core busy only part
of its time (lab bring-up and teardown are waits on the kernel), so 2 at once gain less than 2x.
"""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
CAMPAIGN = """\
name: bench-executors
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
      - {kind: incast, receiver: h1, size: 32KiB, gap: 5ms}
grid:
  workloads.0.size: [16KiB, 32KiB, 64KiB, 128KiB]
  workloads.0.repeats: [1, 2, 3, 4]
repetitions: 1
"""


def head(env: dict[str, str], token: Path, temp: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", "--port", str(port), "--num-cpus", "2",
         "--object-store-memory", str(100 * 10**6), "--include-dashboard", "false",
         "--disable-usage-stats", "--temp-dir", temp],
        env={**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(240):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"127.0.0.1:{port}"
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    raise SystemExit("ray head did not come up")


def campaign(spec: Path, results: Path, env: dict[str, str], *extra: str) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "orchestration.cli", "campaign", str(spec),
                    "--results", str(results), "--quiet", *extra], env=env, cwd=ROOT,
                   check=True)
    return time.monotonic() - t0


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="aitb-bench-exec-"))
    spec = work / "c.yaml"
    spec.write_text(CAMPAIGN)
    env = {**os.environ, "AITB_STATE_DIR": str(work / "state"),
           "PYTHONPATH": str(ROOT)}
    t_local = campaign(spec, work / "local", env)
    token = work / "ray.token"
    token.write_text(secrets.token_hex(32) + "\n")
    temp = tempfile.mkdtemp(prefix="aitb-ray-", dir="/tmp")  # short: Ray's socket paths
    try:
        proc, address = head(env, token, temp)
        try:
            t_ray = campaign(spec, work / "ray", env, "--executor", "ray", "--address",
                             address, "--ray-token-file", str(token))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    finally:
        shutil.rmtree(temp, ignore_errors=True)  # the head's session files and sockets
    a, b = (pd.read_parquet(work / x / "bench-executors" / "aggregate.parquet")
            for x in ("local", "ray"))
    counts = ["point", "workloads.0.size", "workloads.0.repeats", "runs", "flows_mean",
              *[c for c in a.columns if c.endswith("_n")]]
    same = list(a.columns) == list(b.columns) and a[counts].equals(b[counts])
    print(f"16 points: local (sequential) {t_local:.1f} s, ray (2 at once) {t_ray:.1f} s, "
          f"ratio {t_local / t_ray:.2f}; aggregates agree in content: {same}")
    print(f"results: {work}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
