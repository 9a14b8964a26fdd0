"""Bench: ring all-reduce at scale, the shared traffic engine against the per-host agents in
one run (``traffic_engine: shared`` against ``per_host``, everything else equal).

Usage (root): PYTHONPATH=. .venv/bin/python bench/scale.py [--ranks 32,64,128]
    [--engines shared,per_host] [--size 64MiB] [--iterations 2] [--rate 1Gbit] [--scale 100]
    [--no-capture] [--analyze]

Lab and workload: ``single_switch`` with one host per rank, every host link at ``--rate``
(emulated at rate / scale: 1 Gbit/s at scale 100 is 10 Mbit/s), a ring all-reduce of
``--size`` (scaled the same way) over all hosts, ``placement: packed``, ``--iterations``
times, through ``aitb run``'s runner (bring-up, capture and counters as the experiment's
defaults, fidelity check, teardown; analysis only with ``--analyze``); agents and engines
get 120 s to start and connect (``timeouts: {agent_start: 120s}``).

Printed per case: wall time of the whole run; mean CCT against the alpha-beta bound
T = 2(N-1)/N x S/B + 2(N-1) x alpha (Patarasuk and Yuan 2009; Thakur et al. 2005), with B the
emulated link rate and alpha the link delay (0 here: the links have none), so the ratio is
CCT / T; the fidelity verdict (fidelity.json) and its first reason; the peak resident set
(RSS, summed; shared pages counted in every process, so an upper bound) of every process
the run starts (descendants of this process: engines or agents, starters, captures, delay
lines, helpers) and every process in the run's namespaces, this process (the controller)
aside, sampled every ``--sample-s``, with the traffic processes' (agents or engines) share
beside; the traffic processes' CPU-seconds per ring step per rank (their user + system time
from the last sample before the first phase to the last sample, over N x 2(N-1) x
iterations rank-steps; a process's CPU after its last sample is missed); and the start skew
of the ring: per collective, each rank's first send's start (flows.jsonl) minus the
earliest, p99 over all ranks and collectives. The load average is printed beside (the
machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from models.rundir import new_run_id  # noqa: E402
from models.units import parse_rate_bps, parse_size_bytes  # noqa: E402
from orchestration.run.runner import execute, prepare  # noqa: E402

TRAFFIC = ("traffic_gen.agent", "traffic_gen.engine")


def _experiment(n: int, engine: str, args: argparse.Namespace) -> str:
    capture = "" if args.capture else "capture: {enabled: false}\n"
    return (f"name: scale-{n}-{engine.replace('_', '-')}\nseed: 1\nscale: {args.scale:g}\n"
            f"traffic_engine: {engine}\n{capture}"
            # 128 agents starting at once on 2 busy cores miss the default 20 s
            "timeouts: {agent_start: 120s}\n"
            "topology:\n  inline:\n    name: scale\n"
            f"    generator: {{name: single_switch, params: {{hosts: {n}, link: host}}}}\n"
            f"    profiles:\n      host: {{rate: {args.rate}}}\n"
            "workloads:\n  - kind: collective\n    op: all_reduce\n    algorithm: ring\n"
            f"    size: {args.size}\n    iterations: {args.iterations}\n"
            "    placement: {policy: packed}\n")


class Sampler(threading.Thread):
    """Peak summed RSS of this process's descendants and of the processes in the run's
    namespaces (``aitb-<lab id>-*``), and the last CPU times of the traffic processes."""

    def __init__(self, lab_id: str, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.lab_id, self.interval_s = lab_id, interval_s
        self.stop = threading.Event()
        self.peak_rss, self.peak_traffic_rss, self.peak_procs = 0, 0, 0
        self.peak_by_role: dict[str, int] = {}
        # traffic pid -> [(host clock, user + system CPU s)] at every sample
        self.cpu: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self.me = psutil.Process()
        self.roles: dict[int, str] = {}

    def _in_lab(self) -> set[int]:
        inodes = set()
        for p in Path("/run/netns").glob(f"aitb-{self.lab_id}-*"):
            try:
                inodes.add(p.stat().st_ino)
            except OSError:
                pass
        pids = set()
        if not inodes:
            return pids
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if (d / "ns" / "net").stat().st_ino in inodes:
                        pids.add(int(d.name))
                except OSError:
                    pass
        return pids

    def _role(self, p: psutil.Process) -> str:
        if p.pid not in self.roles:
            try:
                cmd = " ".join(p.cmdline())
            except psutil.Error:
                return "?"
            role = next((t.split(".")[1] for t in TRAFFIC if t in cmd), None)
            if role is None:
                role = "tcpdump" if "tcpdump" in cmd else \
                    "delayline" if "delayline" in cmd else \
                    "starter" if "burst_starter" in cmd else (p.name() or "?")
            self.roles[p.pid] = role
        return self.roles[p.pid]

    def run(self) -> None:
        while not self.stop.is_set():
            pids = {c.pid for c in self.me.children(recursive=True)} | self._in_lab()
            pids.discard(self.me.pid)
            total, traffic, by_role = 0, 0, defaultdict(int)
            for pid in pids:
                try:
                    p = psutil.Process(pid)
                    rss = p.memory_info().rss
                    role = self._role(p)
                    if role in ("agent", "engine"):
                        t = p.cpu_times()
                        self.cpu[pid].append((time.time(), t.user + t.system))
                        traffic += rss
                except psutil.Error:
                    continue
                total += rss
                by_role[role] += rss
            if total > self.peak_rss:
                self.peak_rss, self.peak_by_role = total, dict(by_role)
            self.peak_traffic_rss = max(self.peak_traffic_rss, traffic)
            self.peak_procs = max(self.peak_procs, len(pids))
            self.stop.wait(self.interval_s)


def _records(run_dir: Path, name: str) -> list[dict]:
    path = run_dir / name
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else float("nan")


def _case(n: int, engine: str, args: argparse.Namespace, tmp: Path) -> dict:
    exp = tmp / f"scale-{n}-{engine}.yaml"
    exp.write_text(_experiment(n, engine, args))
    prep = prepare(exp)
    run_id = new_run_id()
    sampler = Sampler(run_id.rsplit("-", 1)[-1], args.sample_s)
    sampler.start()
    t = time.monotonic()
    outcome = execute(prep, tmp / "results", run_id=run_id, analyze=args.analyze)
    wall = time.monotonic() - t
    sampler.stop.set()
    sampler.join()
    run_dir = outcome.run_dir
    colls = _records(run_dir, "collectives.jsonl")
    flows = _records(run_dir, "flows.jsonl")
    size_b, rate = parse_size_bytes(args.size) / args.scale, parse_rate_bps(args.rate) / args.scale
    bound = 2 * (n - 1) / n * size_b * 8 / rate  # alpha = 0: links without delay
    firsts: dict[str, dict[int, float]] = defaultdict(dict)
    for f in flows:
        if f.get("collective_id"):
            d = firsts[f["collective_id"]]
            d[f["src_rank"]] = min(d.get(f["src_rank"], float("inf")), f["t_start"])
    skews = [t - min(d.values()) for d in firsts.values() for t in d.values()]
    fid = json.loads((run_dir / "fidelity.json").read_text()) if (
        run_dir / "fidelity.json").exists() else {}
    retrans = sum((f.get("tcp") or {}).get("total_retrans", 0) for f in flows)
    rank_steps = n * 2 * (n - 1) * args.iterations
    t_first = min((p["t0"] for ph in run_dir.glob("workloads/*/phases.json")
                   for p in json.loads(ph.read_text())["phases"]), default=0.0)
    # the traffic processes' CPU from their last sample before the first phase (start-up,
    # imports and connection set-up left out) to their last sample
    cpu = sum(series[-1][1] - max((c for t, c in series if t <= t_first), default=0.0)
              for series in sampler.cpu.values())
    cct = statistics.mean(c["cct_s"] for c in colls) if colls else float("nan")
    return {"ranks": n, "engine": engine, "ok": outcome.ok, "error": outcome.error,
            "wall_s": wall, "cct_s": cct, "bound_s": bound, "ratio": cct / bound,
            "trustworthy": fid.get("trustworthy"), "reasons": fid.get("reasons", []),
            "peak_rss": sampler.peak_rss, "traffic_rss": sampler.peak_traffic_rss,
            "by_role": sampler.peak_by_role, "procs": sampler.peak_procs,
            "cpu_per_step_s": cpu / rank_steps,
            "skew_p99_s": _percentile(skews, 99), "retrans": retrans,
            "load": os.getloadavg()}


def _print(r: dict) -> None:
    mib = 1 << 20
    roles = ", ".join(f"{k} {v / mib:.0f}" for k, v in sorted(r["by_role"].items(),
                                                             key=lambda kv: -kv[1])[:4])
    print(f"{r['ranks']:4d} {r['engine']:8s} ok={r['ok']!s:5s} wall {r['wall_s']:6.1f} s  "
          f"CCT {r['cct_s']:.3f} s / alpha-beta {r['bound_s']:.3f} s = {r['ratio']:.2f}  "
          f"trustworthy={r['trustworthy']}  peak RSS {r['peak_rss'] / mib:.0f} MiB "
          f"({r['procs']} processes; traffic {r['traffic_rss'] / mib:.0f} MiB; {roles})  "
          f"CPU/rank-step {r['cpu_per_step_s'] * 1e6:.0f} us  skew p99 "
          f"{r['skew_p99_s'] * 1e6:.0f} us  retrans {r['retrans']}  "
          f"load {r['load'][0]:.2f}")
    if r["reasons"]:
        print(f"       fidelity: {r['reasons'][0][:160]}")
    if not r["ok"]:
        print(f"       error: {str(r['error'])[:300]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="32,64,128")
    ap.add_argument("--engines", default="shared,per_host")
    ap.add_argument("--size", default="64MiB")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--rate", default="1Gbit")
    ap.add_argument("--scale", type=float, default=100)
    ap.add_argument("--no-capture", dest="capture", action="store_false")
    ap.add_argument("--analyze", action="store_true")
    ap.add_argument("--sample-s", type=float, default=0.25)
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep the run directories here (default: a temporary directory)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("scale: needs root (network namespaces)", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="aitb-bench-scale-") as tmp_dir:
        tmp = str(args.keep or tmp_dir)
        for n in (int(x) for x in args.ranks.split(",")):
            for engine in args.engines.split(","):
                print(f"# {n} ranks, {engine}: load average {os.getloadavg()[0]:.2f}",
                      flush=True)
                r = _case(n, engine, args, Path(tmp))
                _print(r)
                results.append(r)
    print("\nside by side (shared / per_host):")
    for n in sorted({r["ranks"] for r in results}):
        got = {r["engine"]: r for r in results if r["ranks"] == n}
        if {"shared", "per_host"} <= set(got):
            s, p = got["shared"], got["per_host"]
            print(f"{n:4d} ranks: wall {s['wall_s'] / p['wall_s']:.2f}x, CCT "
                  f"{s['cct_s'] / p['cct_s']:.2f}x, peak RSS {s['peak_rss'] / p['peak_rss']:.2f}x, "
                  f"traffic RSS {s['traffic_rss'] / max(p['traffic_rss'], 1):.2f}x, CPU per "
                  f"rank-step {s['cpu_per_step_s'] / max(p['cpu_per_step_s'], 1e-12):.2f}x")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
