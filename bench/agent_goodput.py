"""Agent goodput on an unshaped veth path between two namespaces, against iperf3 (same run).

Usage (root): .venv/bin/python bench/agent_goodput.py [--seconds 5] [--size-mib 1024]
Targets: >= 5 Gbit/s per core and >= half of iperf3's single-flow goodput.
The agent moves one flow with one sender thread and one receiver thread (one core each at
most), so its single-flow goodput is also its per-core figure. The lab is the netns tests'
bridge star (tests/netns/star.py) with two hosts: host -> bridge -> host, offloads on
(TSO/GSO/GRO, as veths come up by default).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "netns"))

from star import Star  # noqa: E402

from models.records import FlowRecord  # noqa: E402
from models.schedule import Group, Schedule, SendRecv  # noqa: E402
from traffic_gen import ReplayOptions, replay  # noqa: E402
from traffic_gen.jsonl import read_records  # noqa: E402
from traffic_gen.launch import NetnsExecLauncher  # noqa: E402


def iperf3(star: Star, seconds: float) -> float:
    srv = subprocess.Popen(["ip", "netns", "exec", star.hosts["h1"], "iperf3", "-s", "-1",
                            "-B", star.addresses["h1"]], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = subprocess.run(["ip", "netns", "exec", star.hosts["h0"], "iperf3", "-J", "-c",
                              star.addresses["h1"], "-t", str(seconds)],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)["end"]["sum_received"]["bits_per_second"]
    finally:
        srv.wait(timeout=10)


def agent(star: Star, size_bytes: int, repeats: int, run_dir: Path) -> float:
    sched = Schedule("goodput", 2, {"p": Group("p", "pp", (0, 1))},
                     (SendRecv(0, 1, size_bytes),), iterations=repeats)
    res = replay(sched, {0: "h0", 1: "h1"}, NetnsExecLauncher(star.hosts),
                 run_dir, star.addresses,
                 ReplayOptions(transfer_timeout_s=120))
    if not res.ok:
        raise SystemExit(f"agent run failed: {res.failures}")
    flows = list(read_records(res.paths["flows"], FlowRecord))
    return sum(f.size_bytes for f in flows) * 8 / sum(f.fct_s for f in flows)


def _main(run_dir: Path) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args()
    star = Star(2, offloads=True).up()
    try:
        ip = iperf3(star, args.seconds)
        ag = agent(star, args.size_mib << 20, args.repeats, run_dir)
    finally:
        star.down()
    print(f"iperf3 single flow: {ip / 1e9:.2f} Gbit/s")
    print(f"agent single flow : {ag / 1e9:.2f} Gbit/s (one sender thread: per core)")
    print(f"ratio agent/iperf3: {ag / ip:.2f} (target >= 0.5; agent target >= 5 Gbit/s)")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="aitb-bench-") as tmp:  # records: removed after
        _main(Path(tmp))


if __name__ == "__main__":
    main()
