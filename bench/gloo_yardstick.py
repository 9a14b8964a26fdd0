"""Yardstick: one all-reduce through torch.distributed's gloo backend against aitb's ring.

Usage (root): .venv/bin/python bench/gloo_yardstick.py [--hosts 4] [--rate-mbit 200]
    [--size-mib 8] [--iterations 5] [--rounds 2] [--port 29500] [--wire-packets]
Needs torch (``pip install -e '.[yardstick]'``); without it prints "torch not installed:
skipped" and exits 0.

Lab: ``topologies.generate("single_switch", hosts=n)`` with both directions of every host link
shaped by HTB at B (default 200 Mbit/s), brought up by ``testbed.lab.lab.Lab``. On it:
1. gloo: one process per host, started inside the host's namespace by ``lab.popen`` (so the
   lab owns and ends it), rendezvous ``tcp://<h1's lab address>:<port>``, GLOO_SOCKET_IFNAME =
   the host's lab interface, LOCAL_WORLD_SIZE unset (newer gloo releases take a shared-memory
   shortcut when it equals the world size, as under torchrun; the gloo in torch 2.13 has none,
   and the counters below would show it: the traffic must cross the links); one warm-up
   all-reduce, then per round ``iterations`` timed all-reduces of S bytes (float32), each
   rank stamping ``time.time()`` before and after, after a barrier.
   CCT = max end - min start over ranks (the CollectiveRecord definition).
2. aitb: ``traffic_gen.replay`` of a Schedule of the same ring all-reduce, ``iterations`` times
   per round, CCT from collectives.jsonl. Rounds alternate gloo, aitb, gloo, aitb ... so that
   load from other processes on the shared cores falls on both alike.
For both, each host link's interface counters (tx/rx bytes, read through netlink by
``testbed.counters.snapshot.snapshot``) before and after the timed part, divided by the number of
all-reduces, against the closed form 2(n-1)/n x S per rank and direction (Patarasuk and Yuan,
"Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 2009). Interface
counters add headers and the ACKs a host returns for what it receives. With a rate-only plan
the lab keeps GSO/GRO on (testbed.lab.layout.needs_wire_packets), so a veth counts one header set
per super-packet of up to 64 KB and both tools read well under 1 % above the payload closed
form; ``--wire-packets`` makes every packet MTU-sized, and then headers alone add 66 of every
1514 bytes (4.4 %).

Which algorithm gloo runs: ProcessGroupGloo's AsyncAllreduceWork (torch/csrc/distributed/c10d/
ProcessGroupGlooDetail.hpp) calls ``gloo::allreduce(opts)`` without setting an algorithm, and
gloo/allreduce.cc maps UNSPECIFIED to ``ring`` (reduce-scatter then all-gather around the ring,
rank r sending to r-1, each chunk split into >= 2 pipelined segments); bcube is used only when
asked for. The old halving-doubling/ring-chunked algorithm classes are not used by c10d any
more, whatever the size.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import topologies
from models.plan import LabPlan
from models.records import CollectiveRecord
from models.schedule import Collective, Group, Schedule
from models.shaping import Shaping
from testbed.counters.readers import TCP_FIELDS, NamespaceReader
from testbed.counters.snapshot import snapshot
from testbed.lab.lab import Lab
from traffic_gen import ReplayOptions, replay
from traffic_gen.jsonl import read_records
from traffic_gen.launch import LabLauncher

PAYLOAD_FRACTION = 1448 / 1514  # TCP payload per Ethernet frame with timestamps, MTU 1500
WORKER_TIMEOUT_S = 300.0


# ---- gloo worker (runs inside a host's namespace) -------------------------------------------
def worker(a: argparse.Namespace) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank,
                            world_size=a.world, timeout=datetime.timedelta(seconds=120))
    x = torch.ones(a.size_bytes // 4, dtype=torch.float32)
    dist.all_reduce(x)  # warm-up (first use of the pairs, buffers allocated)
    dist.barrier()
    print("ready", flush=True)
    while sys.stdin.readline().strip() == "go":  # the parent reads the counters, then says go
        times = []
        for _ in range(a.iterations):
            x.fill_(1.0)
            dist.barrier()
            t0 = time.time()
            dist.all_reduce(x)
            times.append((t0, time.time()))
        dist.barrier()
        ok = float(x[0]) == float(x[-1]) == a.world  # a sum of ones: exact in float32
        print(json.dumps({"rank": a.rank, "times": times, "ok": ok}), flush=True)
    dist.destroy_process_group()


# ---- lab and counters ---------------------------------------------------------------------
def shaped_plan(hosts: int, rate_bps: int) -> LabPlan:
    plan = topologies.generate("single_switch", hosts=hosts)
    shaped = Shaping(rate_bps=rate_bps)
    links = tuple(dataclasses.replace(lk, a_to_b=shaped, b_to_a=shaped) for lk in plan.links)
    return dataclasses.replace(plan, links=links)


def link_bytes(lab: Lab, hosts: list[str]) -> dict[str, tuple[int, int]]:
    """host -> (tx_bytes, rx_bytes) of its lab interface, read now."""
    ifname = {h: lab.plan.links_of(h)[0].endpoint(h).ifname for h in hosts}
    return {r["node"]: (r["tx_bytes"], r["rx_bytes"]) for r in snapshot(lab)[1]
            if r["node"] in ifname and r["ifname"] == ifname[r["node"]]}


def per_op(before: dict, after: dict, ops: int) -> dict[str, tuple[float, float]]:
    return {h: ((after[h][0] - before[h][0]) / ops, (after[h][1] - before[h][1]) / ops)
            for h in before}


def tcp_acked(lab: Lab, hosts: list[str]) -> dict[tuple, int]:
    """(src, sport, dst, dport) -> bytes_acked (TCP_INFO via sock_diag) of every TCP socket
    on ``hosts``, read now."""
    acked, out = TCP_FIELDS.index("bytes_acked"), {}
    for h in hosts:
        reader = NamespaceReader(h, lab.netns_name(h), tcp=True)
        reader.open()
        try:
            out.update({row[:4]: row[acked] for row in reader.read_tcp()})
        finally:
            reader.close()
    return out


def peer_shares(lab: Lab, before: dict, after: dict) -> dict[str, dict[str, float]]:
    """host -> {peer: share of the payload bytes it sent that went to that peer}."""
    name = {str(lab.plan.address_of(h.name)): h.name for h in lab.plan.hosts()}
    sent: dict[str, dict[str, int]] = {}
    for key, v in after.items():
        src, dst = name[key[0]], name[key[2]]
        to = sent.setdefault(src, {})
        to[dst] = to.get(dst, 0) + v - before.get(key, 0)
    return {h: {p: b / max(1, sum(to.values())) for p, b in sorted(to.items())}
            for h, to in sorted(sent.items())}


# ---- the two runs -------------------------------------------------------------------------
def _start_workers(lab: Lab, hosts: list[str], a: argparse.Namespace) -> list:
    master = f"{lab.plan.address_of(hosts[0])}:{a.port}"
    procs = []
    for rank, h in enumerate(hosts):
        env = {k: v for k, v in os.environ.items() if k != "LOCAL_WORLD_SIZE"}
        env.update(OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="ERROR",  # no reverse-DNS warning
                   GLOO_SOCKET_IFNAME=lab.plan.links_of(h)[0].endpoint(h).ifname)
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--rank", str(rank),
                "--world", str(len(hosts)), "--master", master,
                "--size-bytes", str(a.size_bytes), "--iterations", str(a.iterations)]
        procs.append(lab.popen(h, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env=env))
    return procs


def _line(proc: subprocess.Popen, what: str) -> str:
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"gloo worker pid {proc.pid} ended before {what} "
                         f"(exit status {proc.wait(timeout=WORKER_TIMEOUT_S)})")
    return line


def start_gloo(lab: Lab, hosts: list[str], a: argparse.Namespace) -> list:
    """Start the ranks and wait until each has done its warm-up all-reduce."""
    procs = _start_workers(lab, hosts, a)
    for p in procs:
        _line(p, "ready")
    return procs


def stop_gloo(procs: list) -> None:
    for p in procs:
        p.stdin.write("stop\n")
        p.stdin.close()
    for p in procs:
        if p.wait(timeout=WORKER_TIMEOUT_S) != 0:
            raise SystemExit(f"gloo worker pid {p.pid} exited with status {p.returncode}")


def gloo_round(lab: Lab, hosts: list[str], procs: list,
               a: argparse.Namespace) -> tuple[list[float], dict, dict]:
    """One round of ``a.iterations`` timed all-reduces: (CCTs in s, bytes per all-reduce,
    per host the share of its TCP payload sent to each peer)."""
    before, tcp_before = link_bytes(lab, hosts), tcp_acked(lab, hosts)
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [json.loads(_line(p, "its times")) for p in procs]
    after, tcp_after = link_bytes(lab, hosts), tcp_acked(lab, hosts)
    if not all(r["ok"] for r in results):
        raise SystemExit("gloo all-reduce returned a wrong sum")
    ccts = [max(r["times"][i][1] for r in results) - min(r["times"][i][0] for r in results)
            for i in range(a.iterations)]
    return ccts, per_op(before, after, a.iterations), peer_shares(lab, tcp_before, tcp_after)


def run_aitb(lab: Lab, hosts: list[str], a: argparse.Namespace,
             run_dir: Path) -> tuple[list[float], dict]:
    n = len(hosts)
    sched = Schedule("yardstick", n, {"g": Group("g", "dp", tuple(range(n)))},
                     (Collective("all_reduce", "g", a.size_bytes, "ring", label="ring"),),
                     iterations=a.iterations)
    addresses = {h: str(lab.plan.address_of(h)) for h in hosts}
    before = link_bytes(lab, hosts)
    res = replay(sched, dict(enumerate(hosts)), LabLauncher(lab), run_dir, addresses,
                 ReplayOptions(transfer_timeout_s=WORKER_TIMEOUT_S))
    after = link_bytes(lab, hosts)
    if not res.ok:
        raise SystemExit(f"aitb ring run failed: {res.failures}")
    ccts = [c.cct_s for c in read_records(res.paths["collectives"], CollectiveRecord)]
    return ccts, per_op(before, after, a.iterations)


# ---- report -------------------------------------------------------------------------------
def merge(rounds: list[tuple]) -> tuple[list[float], dict]:
    """All rounds' CCTs; per host the mean over rounds of (tx, rx) bytes per all-reduce."""
    ccts = [c for r in rounds for c in r[0]]
    hosts = rounds[0][1]
    return ccts, {h: tuple(statistics.mean(r[1][h][i] for r in rounds) for i in (0, 1))
                  for h in hosts}


def _mean(per_host: dict, i: int) -> float:
    return statistics.mean(v[i] for v in per_host.values())


def report(a: argparse.Namespace, n: int, gloo: tuple, aitb: tuple) -> None:
    s, rate = a.size_bytes, a.rate_mbit * 10**6
    closed = 2 * (n - 1) / n * s
    g_cct, a_cct = statistics.median(gloo[0]), statistics.median(aitb[0])
    bound = closed * 8 / (rate * PAYLOAD_FRACTION)
    print(f"all-reduce of S = {s} B (float32) over n = {n} hosts, host links HTB "
          f"{a.rate_mbit} Mbit/s both ways{', MTU-sized packets' if a.wire_packets else ''}, "
          f"{a.rounds} x {a.iterations} timed all-reduces each (rounds alternated); "
          "gloo algorithm: ring (gloo::allreduce default, see docstring)")
    print(f"{'':28}{'gloo':>14}{'aitb ring':>14}{'gloo/aitb':>11}{'closed form':>14}")
    print(f"{'CCT median [ms]':28}{g_cct * 1e3:14.1f}{a_cct * 1e3:14.1f}"
          f"{g_cct / a_cct:11.3f}{bound * 1e3:14.1f}  (2(n-1)/n S/B at TCP payload rate)")
    print(f"{'CCT min..max [ms]':28}{_rng(gloo[0]):>14}{_rng(aitb[0]):>14}")
    for i, d in ((0, "tx"), (1, "rx")):
        g, r = _mean(gloo[1], i), _mean(aitb[1], i)
        print(f"{'bytes/link ' + d + ' mean [B]':28}{g:14.0f}{r:14.0f}{g / r:11.3f}"
              f"{closed:14.0f}  (gloo {g / closed:.3f}, aitb {r / closed:.3f} x closed form)")
    for h in sorted(gloo[1]):
        (gt, gr), (at, ar) = gloo[1][h], aitb[1][h]
        print(f"  {h}: tx gloo {gt:.0f} aitb {at:.0f}; rx gloo {gr:.0f} aitb {ar:.0f}")


def _rng(v: list[float]) -> str:
    return f"{min(v) * 1e3:.0f}..{max(v) * 1e3:.0f}"


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--rate-mbit", type=int, default=200)
    ap.add_argument("--size-mib", type=float, default=8)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2, help="gloo and aitb rounds, alternated")
    ap.add_argument("--port", type=int, default=29500)
    ap.add_argument("--wire-packets", action="store_true", help="MTU-sized packets (no GSO)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--size-bytes", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.size_bytes is None:
        a.size_bytes = int(a.size_mib * 2**20) // 4 * 4  # whole float32 elements
    return a


def main() -> None:
    a = _args()
    if a.worker:
        worker(a)
        return
    if importlib.util.find_spec("torch") is None:
        print("torch not installed: skipped")
        return
    plan = shaped_plan(a.hosts, a.rate_mbit * 10**6)
    hosts = [h.name for h in plan.hosts()]
    # the Lab is torn down (gloo workers and agents ended by pid) also on error
    with tempfile.TemporaryDirectory(prefix="aitb-bench-") as tmp, \
            Lab(plan, wire_packets=a.wire_packets or None) as lab:
        print(f"lab up: run id {lab.run_id} (namespaces aitb-{lab.run_id}-*)", flush=True)
        procs = start_gloo(lab, hosts, a)
        gloo, aitb = [], []
        for i in range(a.rounds):  # alternate, so that load from elsewhere hits both alike
            gloo.append(gloo_round(lab, hosts, procs, a))
            aitb.append(run_aitb(lab, hosts, a, Path(tmp) / f"round{i}"))
        stop_gloo(procs)
    report(a, len(hosts), merge(gloo), merge(aitb))
    print("gloo's TCP payload per sender by peer (round 1, sock_diag bytes_acked; a ring sends "
          "to one neighbour only):")
    for h, to in gloo[0][2].items():
        print(f"  {h} -> " + ", ".join(f"{p} {100 * v:.1f} %" for p, v in to.items()))
    print(f"host load average (1 min) at the end: {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores (both tools share them with whatever else runs)")


if __name__ == "__main__":
    main()
