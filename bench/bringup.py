"""Bring-up plus teardown of a leaf-spine: aitb's native backend against Mininet, same run.

    sudo .venv/bin/python bench/bringup.py                 # 256 hosts vs Mininet, then 1024
    sudo .venv/bin/python bench/bringup.py --skip-mininet  # aitb only (both backends)
    sudo .venv/bin/python bench/bringup.py --with-4096     # also 4096 hosts (256 leaves)

Three systems on the same leaf-spine in one run: aitb's native backend (``aitb``), aitb's
Mininet backend (``aitb_mn``: Mininet's nodes and links, aitb's netlink configuration,
shaping and teardown; testbed/mininet/backend.py) and plain Mininet (``mininet``).

The topology: 16 leaves x 16 hosts and 4 spines = 256 hosts, every link shaped to
1 Gbit/s. aitb: routed leaves and spines (ECMP), each node a network namespace, built through
netlink. Mininet 2.3.0 (Debian's package, run by /usr/bin/python3): the same graph with
LinuxBridge switches (STP on: a bridged leaf-spine has L2 loops), no controller, TCLink
bw=1000 (HTB) on every link. Both times span building the topology object to the end of
teardown. Prints one row per system (with the bring-up's steps, ``Lab.timings``, and for
aitb the CPU seconds of this process, user + system, its netlink requests' kernel work
included: less sensitive than wall time to other jobs) and the ratio, and the load average
beside them (other jobs share the machine); targets: >= 5x
faster than Mininet and 1024 hosts up and down in < 5 s on the 2-core machine; 4096 hosts
measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import topologies
from testbed.lab.backends import make_lab

HERE = Path(__file__).resolve().parent


def aitb_once(leaves: int, hosts_per_leaf: int, spines: int, backend: str = "native"
              ) -> dict[str, float]:
    """One bring-up + teardown through aitb on ``backend``; seconds for each part."""
    t0 = time.perf_counter()
    spec = topologies.parse_topology({
        "name": "bench-leaf-spine",
        "generator": {"name": "leaf_spine", "params": {
            "leaves": leaves, "hosts_per_leaf": hosts_per_leaf, "spines": spines,
            "fabric": "bench-1g", "host_link": "bench-1g"}},
        "profiles": {"bench-1g": {"rate": "1Gbit", "buffer": "1000p"}}}, "<bench>")
    plan = topologies.resolve(spec, "<bench>")
    t1, c1 = time.perf_counter(), time.process_time()
    lab = make_lab(plan, backend)
    try:
        lab.up()
        t2, c2 = time.perf_counter(), time.process_time()
    finally:
        lab.down()
    t3, c3 = time.perf_counter(), time.process_time()
    return {"hosts": len(plan.hosts()), "resolve_s": t1 - t0, "up_s": t2 - t1,
            "down_s": t3 - t2, "total_s": t3 - t0, "cpu_up_s": c2 - c1, "cpu_down_s": c3 - c2,
            "steps_s": {k: round(v, 2) for k, v in lab.timings.items()},
            "loadavg_1m": os.getloadavg()[0]}


def mininet_once(leaves: int, hosts_per_leaf: int, spines: int) -> dict[str, float]:
    """One bring-up + teardown through Mininet in a child process (Debian's Python)."""
    argv = ["/usr/bin/python3", str(HERE / "mininet_leafspine.py"), "--leaves", str(leaves),
            "--hosts-per-leaf", str(hosts_per_leaf), "--spines", str(spines),
            "--bw-mbit", "1000"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def aitb_mininet_once(leaves: int, hosts_per_leaf: int, spines: int) -> dict[str, float]:
    """The same lab on aitb's Mininet backend (Mininet nodes and links, aitb's shaping)."""
    return aitb_once(leaves, hosts_per_leaf, spines, "mininet")


def median_run(fn, repeats: int, *args: int) -> dict[str, float]:
    """Run ``fn`` ``repeats`` times; the run with the median total."""
    runs = sorted((fn(*args) for _ in range(repeats)), key=lambda r: r["total_s"])
    return runs[len(runs) // 2] | {"runs_total_s": [r["total_s"] for r in runs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leaves", type=int, default=16)
    ap.add_argument("--hosts-per-leaf", type=int, default=16)
    ap.add_argument("--spines", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3, help="aitb runs (the median is kept)")
    ap.add_argument("--skip-mininet", action="store_true", help="skip plain Mininet")
    ap.add_argument("--skip-aitb-mininet", action="store_true",
                    help="skip aitb's Mininet backend")
    ap.add_argument("--skip-1024", action="store_true")
    ap.add_argument("--with-4096", action="store_true", help="also 4096 hosts (256 leaves)")
    a = ap.parse_args()
    shape = (a.leaves, a.hosts_per_leaf, a.spines)
    rows = {"aitb": median_run(aitb_once, a.repeats, *shape)}
    if not a.skip_aitb_mininet:
        rows["aitb_mn"] = median_run(aitb_mininet_once, a.repeats, *shape)
    if not a.skip_mininet:
        rows["mininet"] = mininet_once(*shape)
    if not a.skip_1024:
        rows["aitb_1024"] = median_run(aitb_once, 1, 64, 16, 4)
    if a.with_4096:
        rows["aitb_4096"] = median_run(aitb_once, 1, 256, 16, 4)
    for name, r in rows.items():
        print(f"{name:10s} hosts={r['hosts']:5d} total={r['total_s']:7.2f} s "
              f"(up {r['up_s']:.2f} s, down {r['down_s']:.2f} s; this process's CPU: up "
              f"{r.get('cpu_up_s', 0):.2f} s, down {r.get('cpu_down_s', 0):.2f} s) "
              f"{r.get('steps_s', '')} "
              f"load {r.get('loadavg_1m', os.getloadavg()[0]):.1f}")
    if "mininet" in rows:
        ratio = rows["mininet"]["total_s"] / rows["aitb"]["total_s"]
        print(f"ratio mininet/aitb = {ratio:.1f}x (target >= 5x)")
        rows["ratio_mininet_over_aitb"] = ratio  # type: ignore[assignment]
    if "aitb_mn" in rows:
        for base in ("aitb", "mininet"):
            if base in rows:
                r = rows["aitb_mn"]["total_s"] / rows[base]["total_s"]
                print(f"ratio aitb_mn/{base} = {r:.2f}x")
                rows[f"ratio_aitb_mn_over_{base}"] = r  # type: ignore[assignment]
    if "aitb_1024" in rows:
        print(f"1024 hosts: {rows['aitb_1024']['total_s']:.2f} s (target < 5 s)")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
