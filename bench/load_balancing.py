"""Load balancing over 4 equal-cost paths: per-flow hashing vs packet spraying vs flowlets.

Usage (root): .venv/bin/python bench/load_balancing.py [--host-mbit 100] [--size-mb 8]
              [--repeats 3] [--flowlet-gap 1s]
Lab: the leaf_spine generator, 4 spines, 2 leaves x 8 hosts, oversubscription 2:1 (host links
at --host-mbit, each of the 8 fabric links at 8 x host / (4 x 2)); every router with the one
``load_balancing`` policy under test (testbed/routing/load_balance.py). Workload: 8 concurrent TCP
flows l1-hk -> l2-hk (k = 1..8) of --size-mb each, all started at one instant; so 8 flows
share 4 uplinks of l1: at best 2 per spine. Per policy and repeat: CCT (the last flow's end
minus the common start), each flow's FCT, the senders' retransmissions, TCP_INFO
reordering (the kernel's reordering degree estimate, 3 = none seen, max over flows) and
reord_seen (reordering events, summed over flows; the agents' records carry it), and the
spread of l1's uplink bytes (max / mean over the 4 spines: 1.0 is perfect balance).
Per-flow hashing puts a random number of flows on each spine (collisions), spraying spreads
every flow's packets, flowlets with a gap longer than any pause of these continuous flows
pick one path per flow at its start, round robin. The table prints medians over repeats
and CCT / CCT(flow) from the same run; a second table has spine s1 fail --fail-after
seconds into each round (its links down, restored after the round).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.counters import snapshot as countersnap
from testbed.lab.lab import Lab
from topologies import load_topology

PORT = 7200
SPINES, HOSTS = 4, 8
SINK = ("import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
        f"socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', {PORT})); s.listen(8)\n"
        "while True:\n    c, _ = s.accept()\n    while c.recv(1 << 20):\n        pass\n"
        "    c.close()\n")
# connect, say ready, read the common start time, wait for it, send, wait until all is
# acked; print FCT and TCP_INFO
SEND = ("import socket, sys, time, json\nfrom traffic_gen.tcpinfo import read_tcp_info\n"
        f"c = socket.create_connection((sys.argv[1], {PORT}))\n"
        "print('ready', flush=True)\n"
        "start = float(sys.stdin.readline())\ntime.sleep(max(0.0, start - time.time()))\n"
        "c.sendall(b'x' * int(sys.argv[2]))\n"
        "while read_tcp_info(c)['unacked']: time.sleep(0.001)\n"
        "end = time.time()\ni = read_tcp_info(c)\n"
        "print(json.dumps({'fct_s': end - start, 'end': end, 'retrans': i['total_retrans'], "
        "'reordering': i['reordering'], 'reord_seen': i['reord_seen']}))\n")


def topology(policy: str, host_mbit: int, gap: str, path: Path) -> Path:
    extra = f"flowlet_gap: {gap}\n" if policy == "flowlet" else ""
    path.write_text(f"name: lb-{policy}\nload_balancing: {policy}\n{extra}generator:\n"
                    "  name: leaf_spine\n"
                    f"  params: {{spines: {SPINES}, leaves: 2, hosts_per_leaf: {HOSTS}, "
                    f"host_rate: {host_mbit}Mbit, oversubscription: 2}}\n")
    return path


def _uplinks(lab: Lab) -> dict[str, int]:
    """l1's tx bytes per interface towards a spine."""
    spine_ifs = {lk.endpoint("l1").ifname for lk in lab.plan.links_of("l1")
                 if {lk.a.node, lk.b.node} & {f"s{i}" for i in range(1, SPINES + 1)}}
    _, links = countersnap.snapshot(lab)
    return {r["ifname"]: r["tx_bytes"] for r in links
            if r["node"] == "l1" and r["ifname"] in spine_ifs}


def one_run(lab: Lab, size: int, fail_after_s: float | None = None) -> dict:
    """One round of the 8 flows; with ``fail_after_s``, spine s1's links go down that long
    after the common start (testbed/live/faults.py, as an ``events:`` link_down does) and come
    back once every flow ended."""
    before = _uplinks(lab)
    procs = [lab.popen(f"l1-h{k}", [sys.executable, "-c", SEND,
                                    str(lab.plan.address_of(f"l2-h{k}")), str(size)],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for k in range(1, HOSTS + 1)]
    for p in procs:  # every sender connected (its interpreter started)
        if p.stdout is None or p.stdout.readline().strip() != "ready":
            raise SystemExit(f"a sender failed to connect (exit {p.wait()})")
    start = time.time() + 0.2
    for p in procs:
        p.stdin.write(f"{start}\n")  # type: ignore[union-attr]
        p.stdin.flush()  # type: ignore[union-attr]
    s1_links = [lk.name for lk in lab.plan.links_of("s1")]
    if fail_after_s is not None:
        time.sleep(max(0.0, start + fail_after_s - time.time()))
        lab.set_links(s1_links, False)
    flows = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"a sender failed (exit {p.returncode})")
        flows.append(json.loads(out))
    after = _uplinks(lab)
    if fail_after_s is not None:
        lab.set_links(s1_links, True)
    sent = [after[i] - before[i] for i in sorted(after)]
    return {"cct_s": max(f["end"] for f in flows) - start,
            "fct_s": [f["fct_s"] for f in flows],
            "retrans": sum(f["retrans"] for f in flows),
            "reordering": max(f["reordering"] for f in flows),
            "reord_seen": sum(f["reord_seen"] for f in flows),
            "spread": max(sent) / statistics.mean(sent)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host-mbit", type=int, default=100)
    ap.add_argument("--size-mb", type=float, default=8.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--flowlet-gap", default="1s")
    ap.add_argument("--fail-after", type=float, default=0.5,
                    help="seconds after the start at which spine s1 fails (second table)")
    args = ap.parse_args()
    size = int(args.size_mb * 1e6)
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="aitb-bench-lb-") as tmp:
        for policy in ("flow", "packet", "flowlet"):
            plan = load_topology(topology(policy, args.host_mbit, args.flowlet_gap,
                                          Path(tmp) / f"{policy}.yaml"))
            with Lab(plan, state_dir=Path(tmp) / "state") as lab:
                for k in range(1, HOSTS + 1):
                    lab.popen(f"l2-h{k}", [sys.executable, "-c", SINK],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.5)
                rows[policy] = [one_run(lab, size) for _ in range(args.repeats)]
                rows[f"{policy}/s1"] = [one_run(lab, size, args.fail_after)
                                        for _ in range(args.repeats)]
    ideal_s = size * 8 / (args.host_mbit * 1e6 * SPINES * 2 / (2 * HOSTS))  # 2 flows/spine
    print(f"8 flows x {args.size_mb:g} MB over {SPINES} spines, fabric links "
          f"{args.host_mbit * HOSTS // (SPINES * 2)} Mbit/s, {args.repeats} repeats "
          f"(medians); ideal FCT (2 flows per spine, link rate) {ideal_s:.2f} s")
    for tag, title in (("", "all spines up"),
                       ("/s1", f"spine s1 down {args.fail_after:g} s after the start")):
        print(f"-- {title}")
        print(f"{'policy':8} {'CCT s':>7} {'/flow':>6} {'FCT p50':>8} {'FCT max':>8} "
              f"{'retrans':>8} {'reorder':>8} {'reord_seen':>10} {'uplink max/mean':>16}")
        base = statistics.median(r["cct_s"] for r in rows["flow" + tag])
        for policy in ("flow", "packet", "flowlet"):
            rs = rows[policy + tag]
            cct = statistics.median(r["cct_s"] for r in rs)
            fcts = [f for r in rs for f in r["fct_s"]]
            print(f"{policy:8} {cct:7.2f} {cct / base:6.2f} {statistics.median(fcts):8.2f} "
                  f"{max(fcts):8.2f} {statistics.median(r['retrans'] for r in rs):8.0f} "
                  f"{max(r['reordering'] for r in rs):8d} "
                  f"{statistics.median(r['reord_seen'] for r in rs):10.0f} "
                  f"{statistics.median(r['spread'] for r in rs):16.2f}")


if __name__ == "__main__":
    main()
