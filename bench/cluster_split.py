"""Bench: a small 2-DC experiment (two routed DCs of 2 hosts, a 50 Mbit/s 2 ms DCI, a ring
all-reduce over the 4 hosts; tests/netns/sshd_machines.py:two_dc_experiment) on this machine
alone (``aitb run``, local lab) against the same split by DC over two local "machines"
(namespaces running sshd, reached only over SSH, the DCI a VXLAN tunnel), interleaved.

Prints per side the fastest and median CCT, the bytes through every shaped interface of the
lab (root qdisc counters at the end of the workload, counters_end.json) and the bring-up
time; then the ratios split / one machine (CCT fastest; bytes per interface, worst of all
interfaces; target: within 10 %), and the clock-offset uncertainty of each machine (the
largest over the split runs; its offsets before and after the run). The split also runs with
``cluster.deploy: serial`` (one machine's part after the other): the ratio parallel / serial
of the bring-up time (median) and of the parts' deploy step alone; and the underlay's RTT
between the machines with the DCI's emulated delay after it was taken off.

Usage (root): sudo PYTHONPATH=. .venv/bin/python bench/cluster_split.py [--pairs 3]

The one-machine runs start timed transfers with the starters (kick), the split runs by each
sender's own sleep (the starters' sockets cannot cross machines); a ring all-reduce
synchronises through its data, so its CCT does not depend on that. Bring-up: the local lab's
own steps (namespaces, links, shaping, verify) against the split's wall time from the driver
(SSH, the underlay RTT, each machine's aitb deploying its part, tunnels, clock offsets).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "netns"))

from sshd_machines import sshd_machines, two_dc_experiment  # noqa: E402


def collect(run_dir: Path) -> dict:
    """CCTs (s), bytes per (node, interface) of the lab's nodes, bring-up (s), clock."""
    lines = (run_dir / "collectives.jsonl").read_text().splitlines()
    ccts = [json.loads(x)["cct_s"] for x in lines if x]
    ends = json.loads((run_dir / "workloads" / "0-ring" / "counters_end.json").read_text())
    by_if = {}
    for node, info in ends["nodes"].items():
        for i in info["interfaces"]:
            roots = [q for q in i.get("qdiscs", []) if q.get("parent") in (None, "root")
                     and isinstance(q.get("bytes"), int)] or \
                [q for q in i.get("qdiscs", []) if isinstance(q.get("bytes"), int)]
            if roots and i["ifname"] != "lo":
                by_if[f"{node}:{i['ifname']}"] = max(q["bytes"] for q in roots)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    timings = manifest.get("lab_timings_s", {})
    up = timings.get("up_s", sum(v for k, v in timings.items() if k != "down"))
    cluster = manifest.get("cluster", {})
    clock = {k: v["clock"] for k, v in cluster.get("machines", {}).items()}
    return {"ccts": ccts, "bytes": by_if, "up_s": up, "clock": clock,
            "parts_s": timings.get("parts_s"), "underlay": cluster.get("underlay", {}),
            "cut_links": cluster.get("cut_links", [])}


def run(argv: list[str], env: dict[str, str]) -> Path:
    out = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                         capture_output=True, text=True, timeout=900)
    doc = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}
    if not doc.get("ok"):
        raise SystemExit(f"cluster_split: run failed: {doc.get('error') or out.stderr[-2000:]}")
    return Path(doc["run_dir"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="runs per side, interleaved")
    ap.add_argument("--size", default="8MiB", help="all-reduce size")
    ap.add_argument("--iterations", type=int, default=2)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("cluster_split: needs root (network namespaces)", file=sys.stderr)
        return 2
    got: dict[str, list[dict]] = {"one": [], "split": [], "serial": []}
    with tempfile.TemporaryDirectory(prefix="aitb-bench-split-") as tmp_s:
        tmp = Path(tmp_s)
        with sshd_machines(tmp) as m:
            one = two_dc_experiment(None, tmp / "one.yaml", size=args.size,
                                    iterations=args.iterations)
            split = two_dc_experiment(m, tmp / "split.yaml", size=args.size,
                                      iterations=args.iterations)
            serial = two_dc_experiment(m, tmp / "serial.yaml", size=args.size,
                                       iterations=args.iterations, deploy="serial")
            base = [sys.executable, "-m", "orchestration.cli", "run", "--json",
                    "--no-analysis", "--results", str(tmp / "results")]
            for _ in range(args.pairs):
                got["one"].append(collect(run([*base, str(one)], {
                    "AITB_STATE_DIR": str(tmp / "one-state")})))
                for side, exp in (("split", split), ("serial", serial)):
                    got[side].append(collect(run(["ip", "netns", "exec", m.under, *base,
                                                  str(exp)], {
                        "AITB_STATE_DIR": str(tmp / "driver-state")})))
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.pairs} runs per "
          f"side, {args.iterations} x {args.size} ring all-reduce over 4 hosts in 2 DCs")
    summary = {}
    for side, runs in got.items():
        ccts = [c for r in runs for c in r["ccts"]]
        ups = [r["up_s"] for r in runs]
        summary[side] = {"cct": min(ccts), "up": statistics.median(ups),
                         "bytes": {k: statistics.median(r["bytes"][k] for r in runs)
                                   for k in runs[0]["bytes"]}}
        print(f"{side:6s} CCT fastest {min(ccts) * 1e3:8.1f} ms  median "
              f"{statistics.median(ccts) * 1e3:8.1f} ms; bring-up median "
              f"{statistics.median(ups):6.2f} s; {len(summary[side]['bytes'])} interfaces, "
              f"{sum(summary[side]['bytes'].values()) / 1e6:.2f} MB")
    common = sorted(set(summary["one"]["bytes"]) & set(summary["split"]["bytes"]))
    ratios = {k: summary["split"]["bytes"][k] / summary["one"]["bytes"][k] for k in common
              if summary["one"]["bytes"][k] > 100_000}  # the interfaces the collective used
    worst = max(ratios, key=lambda k: abs(ratios[k] - 1))
    for k in sorted(ratios):
        print(f"  bytes {k:28s} one {summary['one']['bytes'][k]:>11,.0f}  split "
              f"{summary['split']['bytes'][k]:>11,.0f}  ratio {ratios[k]:.3f}")
    only = sorted(set(summary["one"]["bytes"]) ^ set(summary["split"]["bytes"]))
    if only:
        print(f"  interfaces on one side only: {', '.join(only)}")
    for name in ("m1", "m2"):
        uncs = [r["clock"][name]["uncertainty_s"] for r in got["split"]]
        last = got["split"][-1]["clock"][name]
        before, after = last["before"], last["after"]
        print(f"clock {name}: uncertainty max {max(uncs) * 1e6:.0f} us; last run offset before "
              f"{before['offset_s'] * 1e6:+.0f} us (delay {before['delay_s'] * 1e6:.0f} us), "
              f"after {after['offset_s'] * 1e6:+.0f} us")
    cct_ratio = summary["split"]["cct"] / summary["one"]["cct"]
    print(f"ratio split/one CCT (fastest): {cct_ratio:.3f}  "
          f"[{'within' if abs(cct_ratio - 1) <= 0.10 else 'OUTSIDE'} 10 %]")
    print(f"ratio split/one bytes per interface: worst {ratios[worst]:.3f} ({worst}) over "
          f"{len(ratios)} interfaces  "
          f"[{'within' if abs(ratios[worst] - 1) <= 0.10 else 'OUTSIDE'} 10 %]")
    print(f"ratio split/one bring-up (median): {summary['split']['up'] / summary['one']['up']:.2f}")
    par = statistics.median(r["parts_s"] for r in got["split"])
    ser = statistics.median(r["parts_s"] for r in got["serial"])
    print(f"ratio parallel/serial bring-up (median): "
          f"{summary['split']['up'] / summary['serial']['up']:.2f} "
          f"({summary['split']['up']:.2f} s / {summary['serial']['up']:.2f} s); parts' deploy "
          f"alone {par / ser:.2f} ({par:.2f} s / {ser:.2f} s)")
    rtts = [v["min_rtt_s"] for r in got["split"] + got["serial"] for v in r["underlay"].values()]
    print(f"underlay RTT m1~m2: min {min(rtts) * 1e6:.0f} us, max {max(rtts) * 1e6:.0f} us")
    for rec in got["split"][-1]["cut_links"]:
        d = rec["a_to_b"]
        print(f"  cut link {rec['link']}: configured {d['configured_delay_s'] * 1e3:.3f} ms, "
              f"emulated {d['emulated_delay_s'] * 1e3:.3f} ms + underlay one way "
              f"{rec['underlay_one_way_s'] * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
