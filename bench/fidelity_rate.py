"""The fidelity rate check against the kernel: one iperf3 TCP flow through an HTB rate
limiter, counters sampled every 10 ms (testbed.counters.snapshot, the contract-2 columns), then
analysis.fidelity.rate_check over the samples. Prints measured/configured per rate.

Usage (root, host kernel): .venv/bin/python bench/fidelity_rate.py [--seconds 3]
A backlogged HTB should dequeue at its rate: the ratio should be within RATE_TOLERANCE (10%).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "netns"))

from plans import two_hosts_router  # noqa: E402

from analysis.fidelity import rate_check  # noqa: E402
from models.shaping import Shaping  # noqa: E402
from orchestration.fidelity.run import direction_refs  # noqa: E402
from testbed.counters.snapshot import QDISC_COLUMNS, snapshot  # noqa: E402
from testbed.lab.lab import Lab  # noqa: E402


def sample(lab: Lab, stop: threading.Event, rows: list, interval_s: float) -> None:
    while not stop.wait(interval_s):
        rows += snapshot(lab)[0]


def measure(rate_bps: int, seconds: float) -> tuple[float | None, str, int]:
    plan = two_hosts_router(h1_out=Shaping(rate_bps=rate_bps))
    with Lab(plan) as lab:
        srv = lab.popen("h2", ["iperf3", "-s", "-1", "-B", "198.18.2.1"],
                        stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        rows: list = []
        stop = threading.Event()
        t = threading.Thread(target=sample, args=(lab, stop, rows, 0.01), daemon=True)
        t.start()
        lab.run("h1", ["iperf3", "-c", "198.18.2.1", "-t", str(seconds)], timeout_s=seconds + 30)
        stop.set()
        t.join()
        srv.wait(timeout=10)
        (ref,) = [r for r in direction_refs(plan, lab.layout) if r.direction == "a->b"]
    df = pd.DataFrame(rows, columns=list(QDISC_COLUMNS))
    measured, _, status = rate_check(df, ref)
    return measured, status, len(df[(df.node == "h1") & (df.kind == "htb")])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()}", flush=True)
    for rate in (10**7, 10**8, 5 * 10**8):
        measured, status, n = measure(rate, args.seconds)
        ratio = "-" if measured is None else f"{measured / rate:.3f}"
        print(f"HTB {rate / 1e6:7.0f} Mbit/s: measured/configured {ratio} ({status}, "
              f"{n} samples)", flush=True)


if __name__ == "__main__":
    main()
