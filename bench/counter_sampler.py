"""Counter sampler overhead and achieved interval on a lab of realistic size.

Usage (root): .venv/bin/python bench/counter_sampler.py [--seconds 5] [--interval 10ms]
    [--size small|large] [--no-tcp] [--flows 4]

Lab: the two-DC ``multi_dc_leaf_spine`` generator, every link shaped (HTB + fifo buffer, no
netem, so it runs on the host kernel): ``small`` = 2 spines, 2 leaves x 2 hosts per DC (18
nodes, 21 links: the two_dc example's size); ``large`` = 4 spines, 4 leaves x 4 hosts per DC
(50 nodes, 73 links, 32 hosts). ``--flows`` iperf3 TCP flows between DCs run while it samples
(so qdisc counters change and TCP sockets exist). Prints the sampler's own figures
(sampler.json): achieved interval p50/p99/max, CPU seconds and share of one core, CPU per
sample, rows. The achieved interval also depends on what else runs: qdisc and link dumps take
the kernel's global RTNL lock, which other labs' bring-ups and teardowns hold for long
stretches, and a loaded 2-core host leaves the sampler little CPU; the 1-minute load average
is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import topologies
from models.units import parse_duration_s
from testbed.counters import CounterSampler, SamplerConfig
from testbed.lab.lab import Lab

SIZES = {"small": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2},
         "large": {"spines": 4, "leaves": 4, "hosts_per_leaf": 4}}


def plan_of(size: str):
    return topologies.generate("multi_dc_leaf_spine", **SIZES[size], dci="campus-uplink",
                               fabric="campus-uplink", host_link="campus-uplink")


def start_flows(lab: Lab, n: int, seconds: float) -> list[subprocess.Popen]:
    hosts = [h.name for h in lab.plan.hosts()]
    dc1 = [h for h in hosts if h.startswith("dc1-")]
    dc2 = [h for h in hosts if h.startswith("dc2-")]
    procs = []
    for i in range(min(n, len(dc1), len(dc2))):
        srv, cli = dc2[i], dc1[i]
        addr = str(lab.plan.address_of(srv))
        procs.append(lab.popen(srv, ["iperf3", "-s", "-1", "-B", addr],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.2)
        procs.append(lab.popen(cli, ["iperf3", "-c", addr, "-t", f"{seconds:g}", "-b",
                                     "200M"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL))
    return procs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--interval", default="10ms")
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--no-tcp", action="store_true")
    ap.add_argument("--flows", type=int, default=4)
    a = ap.parse_args()
    plan = plan_of(a.size)
    cfg = SamplerConfig(interval_s=parse_duration_s(a.interval), tcp=not a.no_tcp)
    with tempfile.TemporaryDirectory() as tmp, \
            Lab(plan, state_dir=Path(tmp) / "state") as lab:
        sampler = CounterSampler(lab, Path(tmp) / "counters", cfg)
        t0 = time.perf_counter()
        sampler.start()
        t_ready = time.perf_counter() - t0
        flows = start_flows(lab, a.flows, a.seconds)
        time.sleep(a.seconds + 0.5)
        t1 = time.perf_counter()
        s = sampler.stop()
        t_stop = time.perf_counter() - t1
        for p in flows:
            p.wait(timeout=10)
    print(f"lab: {a.size} ({len(plan.nodes)} nodes, {len(plan.links)} links, "
          f"{len(plan.hosts())} hosts), tcp={'off' if a.no_tcp else 'on'}, "
          f"{a.flows} iperf3 flows, {a.seconds:g} s")
    print(f"configured interval {s['interval_s'] * 1e3:.1f} ms; achieved p50 "
          f"{s['interval_p50_s'] * 1e3:.1f} ms, p99 {s['interval_p99_s'] * 1e3:.1f} ms, max "
          f"{s['interval_max_s'] * 1e3:.1f} ms over {s['samples']} samples")
    print(f"sampler CPU {s['cpu_s']:.2f} s = {100 * s['cpu_share_of_one_core']:.0f}% of one "
          f"core; rows {s['rows']}")
    per_sample_ms = 1e3 * s["cpu_s"] / max(1, s["samples"])
    print(f"sampler CPU per sample {per_sample_ms:.1f} ms (the shortest interval one free core "
          f"could hold); TCP discovery dump every {s['tcp_discover_s']:.2f} s")
    print(f"start (to first sample) {t_ready:.2f} s; stop (last sample + Parquet) "
          f"{t_stop:.2f} s")
    print(f"host load average (1 min) at the end: {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores (other processes compete for the same CPUs)")
    print(json.dumps(s))


if __name__ == "__main__":
    main()
