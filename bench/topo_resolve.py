"""Time to resolve generated topologies (parse -> check -> address -> route), no root.

Run: .venv/bin/python bench/topo_resolve.py [--repeat N]
Prints the best of N wall-clock and CPU times per topology (best-of: the machine is shared,
the minimum is the least disturbed run; CPU time is less sensitive to other processes).
Target: 1024 hosts well under 2 s.
"""

from __future__ import annotations

import argparse
import time

from topologies import generate

CASES = [
    ("leaf_spine 256 hosts (16 leaves x 16, 4 spines)", "leaf_spine", {}),
    ("leaf_spine 1024 hosts (64 leaves x 16, 4 spines)", "leaf_spine", {"leaves": 64}),
    ("leaf_spine 1024 hosts (32 leaves x 32, 4 spines)", "leaf_spine",
     {"leaves": 32, "hosts_per_leaf": 32}),
    ("multi_dc_leaf_spine 4 DCs x 256 hosts", "multi_dc_leaf_spine",
     {"n_dcs": 4, "spines": 4, "leaves": 16, "hosts_per_leaf": 16}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for label, name, params in CASES:
        times, cpu = [], []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            plan = generate(name, **params)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        routes = sum(len(n.routes) for n in plan.nodes)
        print(f"{label}: {min(times):.3f} s wall, {min(cpu):.3f} s CPU (best of {args.repeat}),"
              f" {len(plan.nodes)} nodes, {len(plan.links)} links, {routes} routes")


if __name__ == "__main__":
    main()
