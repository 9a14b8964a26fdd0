"""Start skew of a synchronized burst across 64 agents, each in its own namespace.

Usage (root): .venv/bin/python bench/start_skew.py [--agents 64] [--bursts 10]
Target: p99 start skew < 1 ms. Every agent is one emulated host (its own network
namespace on the netns tests' bridge star); each burst is a permutation (every agent sends
4 KiB to another) started by the controller at one absolute instant; the skew of a sender is
its first-byte send time minus that instant (host clock, shared by all namespaces).
It runs the same bursts twice on one lab: with aitb's default start (start_mode "kick": one
starter process per core writes the first segment of every flow at the instant, kick.py) and
with every agent waking itself ("sleep"), and prints the ratio. It first measures the
machine's floor: the same number of bare processes that only sleep until
one instant (same sleep, same priority) and read the clock; on 2 cores, every woken process
delays the next ones by its context switch and interpreter resume.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "netns"))

from star import Star  # noqa: E402

from models.records import BurstRecord, percentile  # noqa: E402
from traffic_gen import ReplayOptions, replay  # noqa: E402
from traffic_gen.jsonl import read_records  # noqa: E402
from traffic_gen.launch import NetnsExecLauncher  # noqa: E402
from traffic_gen.transfers import sleep_until  # noqa: E402
from workloads.patterns import incast, pattern_schedule, permutation  # noqa: E402


def _bare_child(t0: float, q, rt_priority: int | None, spin_s: float) -> None:
    if rt_priority:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(rt_priority))
    sleep_until(t0, spin_s)
    t = time.time()
    if rt_priority:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    q.put(t - t0)


def bare_wakeup_skew(n: int, rt_priority: int | None, spin_s: float) -> list[float]:
    """Floor of this machine: n processes that only sleep until one instant and read the
    clock (no agent, no socket, same sleep as the agents), their lateness in seconds."""
    q: mp.Queue = mp.Queue()
    t0 = time.time() + 1.0
    procs = [mp.Process(target=_bare_child, args=(t0, q, rt_priority, spin_s))
             for _ in range(n)]
    for p in procs:
        p.start()
    out = sorted(q.get() for _ in procs)
    for p in procs:
        p.join()
    return out


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--bursts", type=int, default=10)
    ap.add_argument("--spin-us", type=float, default=200,
                    help="busy-wait before the instant (aitb run uses 200 us)")
    ap.add_argument("--offloads", action="store_true", help="keep TSO/GSO/GRO on the veths")
    ap.add_argument("--size", type=int, default=4096, help="bytes per flow")
    ap.add_argument("--pattern", choices=["permutation", "incast"], default="permutation")
    ap.add_argument("--verbose", action="store_true", help="print every skew (us)")
    ap.add_argument("--rt-priority", type=int, default=10,
                    help="SCHED_FIFO priority for the start instant (aitb run uses 10; 0: none)")
    ap.add_argument("--start-mode", choices=["kick", "sleep", "both"], default="both",
                    help="kick: the controller's starters write the first bytes of every "
                         "flow (traffic_gen/burst_starter.py, aitb's default); sleep: each "
                         "agent wakes itself; both (default): one after the other on the same lab")
    return ap.parse_args()


def _replay(star: Star, args: argparse.Namespace, mode: str, run_dir: Path) -> list[float]:
    n = args.agents
    ops = []
    for k in range(args.bursts):
        if args.pattern == "incast":
            ops += incast(range(1, n), 0, args.size, label=f"incast{k}")
        else:
            ops += permutation(range(n), args.size, seed=k, label=f"perm{k}")
    sched = pattern_schedule("skew", n, ops)
    t = time.time()
    res = replay(sched, {r: f"h{r}" for r in range(n)}, NetnsExecLauncher(star.hosts),
                 run_dir / mode, star.addresses,
                 ReplayOptions(agent_start_timeout_s=120, spin_s=args.spin_us * 1e-6,
                               rt_priority=args.rt_priority or None, start_mode=mode))
    print(f"[{mode}] replay of {args.bursts} bursts took {time.time() - t:.1f} s, ok={res.ok}")
    bursts = list(read_records(res.paths["bursts"], BurstRecord))
    skew = [s for b in bursts for s in b.skew_s]
    if args.verbose:
        for b in bursts:
            print(" ".join(f"{x * 1e6:.0f}" for x in sorted(b.skew_s)))
    print(f"[{mode}] senders x bursts: {len(skew)}; start skew p50 "
          f"{percentile(skew, 50) * 1e3:.3f} ms, p99 {percentile(skew, 99) * 1e3:.3f} ms, "
          f"max {max(skew) * 1e3:.3f} ms (target p99 < 1 ms)")
    return skew


def _main(run_dir: Path) -> None:
    args = _args()
    n = args.agents
    floor = bare_wakeup_skew(n, args.rt_priority or None, args.spin_us * 1e-6)
    print(f"floor: {n} bare processes waking at one instant (no traffic): "
          f"p50 {percentile(floor, 50) * 1e3:.3f} ms, p99 {percentile(floor, 99) * 1e3:.3f} ms")
    t = time.time()
    star = Star(n, offloads=args.offloads).up()
    print(f"lab of {n} namespaces up in {time.time() - t:.1f} s")
    modes = ["kick", "sleep"] if args.start_mode == "both" else [args.start_mode]
    try:
        p99 = {m: percentile(_replay(star, args, m, run_dir), 99) for m in modes}
    finally:
        star.down()
    if len(p99) == 2:
        print(f"p99 start skew, sleep / kick: {p99['sleep'] / p99['kick']:.1f}x")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="aitb-bench-") as tmp:  # records: removed after
        _main(Path(tmp))


if __name__ == "__main__":
    main()
