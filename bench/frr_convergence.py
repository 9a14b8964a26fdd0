"""Convergence after a DCI failure: FRR (eBGP) with BFD vs without BFD vs static ECMP.

Usage (root): .venv/bin/python bench/frr_convergence.py [--flows 16] [--interval-ms 2]
              [--repeats 2] [--silent-s 12]
Lab: the plan of examples/dci_failover_frr.yaml (2 DCs, border routers joined by two DCIs,
L4 multipath hashing), with routing: frr (BFD 100 ms x 3, BGP keepalive 3 s / hold 9 s), the
same without BFD, OSPF with BFD (hello 1 s, dead 4 s), and routing: static (the plan's ECMP
routes) as the peer. Probe: --flows
UDP flows (distinct source ports, so the border router hashes them over both DCIs) from
dc1-l1-h1 to dc2-l1-h1, one datagram per flow every --interval-ms; the receiver stamps
arrivals on CLOCK_MONOTONIC (one clock for every namespace).
Two failures of DCI 1 (dc1-b1-dc2-b1), one second into the probe:
  down:   the link set down (testbed/live/faults.py: what link_down events do; dc1-b1's end
          down, dc2-b1's without carrier);
  silent: every packet through dc1-b1's DCI-1 interface dropped (iptables in dc1-b1's
          namespace; the interfaces stay up, as with a dead optic behind a live port).
Figures per mode and failure: outage_ms = the longest gap between arrivals of any flow
around the failure (the data plane's recovery; a flow that never recovers within the probe
shows as "none"), lost = datagrams not received, hit = flows with a gap over 50 ms, and for
FRR the control plane's convergence (testbed/routing/frr.py ConvergenceWatch, what events.jsonl
records: until every router's table is stable again), for the down failure only: the watch
knows the links that events set down, not a silent failure. The last column is
outage / outage(static) of the same failure in the same run (static never recovers from a
silent failure: no ratio).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from orchestration.run.runner import prepare
from testbed.lab.lab import Lab

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "dci_failover_frr.yaml"
SRC, DST, PORT = "dc1-l1-h1", "dc2-l1-h1", 7300
LINK, BORDER, DCI_IF = "dc1-b1-dc2-b1", "dc1-b1", "dci-dc2-1"

RECEIVER = """
import socket, sys, time, json
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", {port}))
s.settimeout(0.5); end = time.monotonic() + {dur}; got = []
while time.monotonic() < end:
    try:
        d = s.recv(64)
    except socket.timeout:
        continue
    f, q = d.split(b" ")[:2]; got.append((int(f), int(q), time.monotonic()))
json.dump(got, sys.stdout)
"""
SENDER = """
import socket, time
socks = []
for f in range({flows}):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 20000 + f))
    socks.append(s)
end = time.monotonic() + {dur}; q = 0; nxt = time.monotonic()
while time.monotonic() < end:
    for f, s in enumerate(socks):
        try:
            s.sendto(b"%d %d " % (f, q), ("{dst}", {port}))
        except OSError:
            pass
    q += 1; nxt += {iv}
    time.sleep(max(0.0, nxt - time.monotonic()))
print(q)
"""


def _fail(lab: Lab, how: str) -> None:
    if how == "down":
        lab.set_links([LINK], up=False)
        return
    for chain, opt in (("INPUT", "-i"), ("OUTPUT", "-o"), ("FORWARD", "-i"), ("FORWARD", "-o")):
        lab.run(BORDER, ["iptables", "-I", chain, opt, DCI_IF, "-j", "DROP"])


def _probe(lab: Lab, args: argparse.Namespace, how: str, dur_s: float) -> dict:
    iv = args.interval_ms / 1000
    recv = lab.popen(DST, [sys.executable, "-c", RECEIVER.format(port=PORT, dur=dur_s + 1.5)],
                     stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    dst = str(lab.plan.address_of(DST))
    send = lab.popen(SRC, [sys.executable, "-c", SENDER.format(flows=args.flows, dur=dur_s,
                                                                   dst=dst, port=PORT, iv=iv)],
                     stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    conv: dict = {}
    done = threading.Event()

    def on_done(r: dict) -> None:
        conv.update(r)
        done.set()

    t_fail = time.monotonic()
    # the watch knows the links events set down; a silent failure is not one of them (it
    # would wait for the plan's paths over the "up" DCI until the probe ends)
    watch = lab.watch_convergence(t_fail, on_done) if how == "down" else None
    _fail(lab, how)
    sent = int(send.communicate(timeout=dur_s + 30)[0].strip() or 0)
    got = json.loads(recv.communicate(timeout=dur_s + 30)[0] or "[]")
    if watch is not None:
        watch.stop(30)
    per: dict[int, list[float]] = {}
    for f, _q, t in got:
        per.setdefault(f, []).append(t)
    gaps = []
    for f in range(args.flows):
        ts = [t_fail - 0.5, *sorted(t for t in per.get(f, []) if t >= t_fail - 0.5)]
        after = [t for t in ts if t > t_fail]
        if not after or after[-1] < t_fail + dur_s - 1.5 - 0.5:
            gaps.append(float("inf"))  # this flow's packets stopped for good
            continue
        gaps.append(max(b - a for a, b in zip(ts, ts[1:], strict=False)))
    return {"outage_ms": max(gaps) * 1000, "lost": sent * args.flows - len(got),
            "hit_flows": sum(g > 0.05 for g in gaps),
            "convergence_s": conv.get("convergence_s")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flows", type=int, default=16)
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--silent-s", type=float, default=12.0,
                    help="probe length for the silent failure (BGP's hold time is 9 s)")
    args = ap.parse_args()
    base = prepare(EXAMPLE).plan
    bfd = dataclasses.replace(base.routing, bfd=True, settle_s=0.5)
    modes = {"static": None, "frr+bfd": bfd,
             "frr": dataclasses.replace(bfd, bfd=False),
             "ospf+bfd": dataclasses.replace(bfd, protocol="ospf")}
    rows: dict[tuple[str, str], list[dict]] = {}
    state = Path(tempfile.mkdtemp(prefix="aitb-bench-frr-", dir="/run"))
    state.chmod(0o755)  # the FRR daemons (user frr) reach their directories through it
    try:
        for _ in range(args.repeats):
            for how, dur in (("down", 4.0), ("silent", args.silent_s)):
                for mode, routing in modes.items():
                    plan = dataclasses.replace(base, routing=routing)
                    with Lab(plan, state_dir=state) as lab:
                        rows.setdefault((how, mode), []).append(_probe(lab, args, how, dur))
                    print(f"  {how:6} {mode:8} {rows[(how, mode)][-1]}", file=sys.stderr)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    print(f"\nDCI failure, {args.flows} UDP flows every {args.interval_ms:g} ms, medians of "
          f"{args.repeats}; FRR: BFD {bfd.bfd_interval_s * 1000:g} ms x {bfd.bfd_multiplier},"
          f" BGP hold {bfd.bgp_hold_s} s")
    print(f"{'failure':8} {'routing':9} {'outage_ms':>10} {'lost':>6} {'hit':>4} "
          f"{'converge_ms':>12} {'vs static':>10}")
    for how in ("down", "silent"):
        ref = statistics.median(r["outage_ms"] for r in rows[(how, "static")])
        for mode in modes:
            rs = rows[(how, mode)]
            out = statistics.median(r["outage_ms"] for r in rs)
            conv = [r["convergence_s"] for r in rs if r["convergence_s"] is not None]
            c = f"{statistics.median(conv) * 1000:.0f}" if conv else "-"
            ratio = "-" if ref in (0, float("inf")) or out == float("inf") else f"{out / ref:.2f}"
            shown = "none" if out == float("inf") else f"{out:.0f}"
            print(f"{how:8} {mode:9} {shown:>10} {statistics.median(r['lost'] for r in rs):>6.0f} "
                  f"{statistics.median(r['hit_flows'] for r in rs):>4.0f} {c:>12} {ratio:>10}")


if __name__ == "__main__":
    main()
