"""Bench: the same ring all-reduce (examples/ring_allreduce.yaml) on aitb's native backend and
on the Mininet backend, interleaved, in one run; prints each backend's fastest and median CCT,
the alpha-beta bound 2(N-1)/N * S / B (Patarasuk & Yuan 2009; N 4 ranks, S 419 430 B, B the
scaled 100 Mbit/s), and the ratio mininet / native of the fastest CCTs.

Usage (root): sudo PYTHONPATH=. .venv/bin/python bench/backend_cct.py [--pairs 3]

The fastest of several iterations is the estimate closest to the network-determined time: CPU
contention on a shared machine only ever lengthens a CCT. Every run's lab is torn down by the
runner; results go to a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestration.run.runner import execute, prepare  # noqa: E402

RING = ROOT / "examples/ring_allreduce.yaml"
BOUND_S = 2 * 3 / 4 * 419430 * 8 / 100e6


def ccts(run_dir: Path) -> list[float]:
    """CCT (s) of every collective the run recorded."""
    lines = (run_dir / "collectives.jsonl").read_text().splitlines()
    return [json.loads(x)["cct_s"] for x in lines if x]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="runs per backend, interleaved")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("backend_cct: needs root (network namespaces)", file=sys.stderr)
        return 2
    out: dict[str, list[float]] = {"native": [], "mininet": []}
    with tempfile.TemporaryDirectory(prefix="aitb-bench-cct-") as tmp:
        for i in range(args.pairs):
            for backend in out:
                outcome = execute(prepare(RING), Path(tmp) / f"{backend}{i}", backend=backend)
                if not outcome.ok:
                    print(f"backend_cct: {backend} run failed: {outcome.error}", file=sys.stderr)
                    return 1
                out[backend] += ccts(outcome.run_dir)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; alpha-beta bound "
          f"{BOUND_S * 1e3:.1f} ms")
    for backend, v in out.items():
        print(f"{backend:8s} CCT fastest {min(v) * 1e3:7.1f} ms  median "
              f"{statistics.median(v) * 1e3:7.1f} ms  ({len(v)} collectives)")
    print(f"ratio mininet/native (fastest): {min(out['mininet']) / min(out['native']):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
