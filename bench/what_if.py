"""What-if estimates against the run with the change made: for each case of
analysis.metrics.what_if, one small experiment is run, metrics.json's estimate read
(``attribution.what_if.per_workload``), the experiment rerun with the change actually made,
and estimate / measured printed for the median iteration time and the median CCT.

Usage (root): PYTHONPATH=. .venv/bin/python bench/what_if.py [--iterations 8] [--case NAME]
    [--keep DIR]
Target: every ratio within 15 % of 1 (0.85-1.15).

Cases (each a ring all-reduce of four hosts on one switch, 100 Mbit/s or 1 Gbit/s ports):

* ``link_x2``: one host's uplink at 25 Mbit/s, the others' 100 Mbit/s, 1 MiB per all-reduce
  (link-bound); rerun with that uplink at 50 Mbit/s;
* ``straggler_at_median``: 1 Gbit/s, 40 ms of compute per iteration and rank 2 at a
  straggler factor of 3 (compute-bound); rerun without the factor;
* ``rtt_half``: 1 Gbit/s with 5 ms each way on every host link (20 ms between hosts),
  256 KiB per all-reduce (latency-bound); rerun with 2.5 ms.

The machine is shared: the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lab(uplinks: dict[str, str], port: str) -> str:
    hosts = ["h1", "h2", "h3", "h4"]
    rows = "\n".join(f"      - {{endpoints: [{h}, s1]{', ' + uplinks[h] if h in uplinks else ''}}}"
                     for h in hosts)
    return ("topology:\n  inline:\n    name: whatif\n    profiles:\n"
            f"      port: {port}\n    defaults: {{link: {{profile: port}}}}\n"
            "    nodes: {s1: {kind: switch}, " + ", ".join(f"{h}: {{kind: host}}" for h in hosts)
            + "}\n    links:\n" + rows + "\n")


def _ring(size: str, iterations: int, extra: str = "") -> str:
    return (f"  - {{kind: collective, op: all_reduce, algorithm: ring, size: {size}, "
            f"hosts: [h1, h2, h3, h4], iterations: {iterations}{extra}}}\n")


def _delay(ms: float) -> dict[str, str]:
    d = f"a_to_b: {{delay: {ms}ms}}, b_to_a: {{delay: {ms}ms}}"
    return {h: d for h in ("h1", "h2", "h3", "h4")}


def cases(n: int) -> dict[str, tuple[str, str]]:
    """Per case: (the experiment as run, the experiment with the change made)."""
    slow = _ring("1MiB", n)
    comp = ", compute: 40ms"
    return {
        "link_x2": (_lab({"h2": "a_to_b: {rate: 25Mbit}"}, "{rate: 100Mbit}") + "workloads:\n"
                    + slow,
                    _lab({"h2": "a_to_b: {rate: 50Mbit}"}, "{rate: 100Mbit}") + "workloads:\n"
                    + slow),
        "straggler_at_median": (
            _lab({}, "{rate: 1Gbit}") + "workloads:\n"
            + _ring("64KiB", n, comp + ", stragglers: {fixed: {2: 3.0}}"),
            _lab({}, "{rate: 1Gbit}") + "workloads:\n" + _ring("64KiB", n, comp)),
        "rtt_half": (_lab(_delay(5), "{rate: 1Gbit}") + "workloads:\n" + _ring("256KiB", n),
                     _lab(_delay(2.5), "{rate: 1Gbit}") + "workloads:\n"
                     + _ring("256KiB", n)),
    }


def _run(tmp: Path, name: str, body: str) -> dict:
    path = tmp / f"{name}.yaml"
    path.write_text(f"name: {name}\nseed: 1\n{body}")
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(path),
                          "--results", str(tmp / "results"), "--no-vm"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "AITB_STATE_DIR": str(tmp / "state")})
    if out.returncode != 0:
        raise SystemExit(f"{name}: aitb run failed: {out.stderr[-2000:]}")
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    return json.loads((run_dir / "metrics.json").read_text())


def _measured(m: dict) -> tuple[float, float]:
    (w,) = m["attribution"]["what_if"]["per_workload"]
    return w["iteration_time_s"], w["cct_s_median"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--case", choices=("link_x2", "straggler_at_median", "rtt_half"))
    ap.add_argument("--keep", type=Path, help="keep the run directories under this one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="aitb-whatif-") as scratch:
        tmp = str(args.keep) if args.keep else scratch
        for case, (before, after) in cases(args.iterations).items():
            if args.case and case != args.case:
                continue
            m = _run(Path(tmp), f"{case}-as-run", before)
            (w,) = m["attribution"]["what_if"]["per_workload"]
            est = w[case]
            fid = m.get("fidelity") or {}
            t_run, c_run = _measured(m)
            t_new, c_new = _measured(_run(Path(tmp), f"{case}-changed", after))
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"{case}: bound {m['attribution']['per_workload'][0]['bound']}, inputs "
                  f"{est['inputs']}; trustworthy {fid.get('trustworthy')}")
            print(f"  iteration: as run {t_run * 1e3:.1f} ms, estimate "
                  f"{est['iteration_time_s'] * 1e3:.1f} ms, measured {t_new * 1e3:.1f} ms, "
                  f"estimate/measured {est['iteration_time_s'] / t_new:.3f}")
            print(f"  CCT median: as run {c_run * 1e3:.1f} ms, estimate "
                  f"{est['cct_s_median'] * 1e3:.1f} ms, measured {c_new * 1e3:.1f} ms, "
                  f"estimate/measured {est['cct_s_median'] / c_new:.3f}   (load {load})")


if __name__ == "__main__":
    main()
