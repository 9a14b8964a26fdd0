"""Quick timing of Lab bring-up + teardown for a routed leaf-spine (runtime only; the
comparison with Mininet is bench/bringup.py). Needs root.

    .venv/bin/python bench/runtime_bringup.py --leaves 16 --hosts 16 --spines 4
"""

from __future__ import annotations

import argparse
import ipaddress as ip
import time
from pathlib import Path

from models.plan import Endpoint, LabPlan, LinkPlan, NextHop, NodePlan, Route
from models.shaping import Shaping
from models.units import BufferSize
from testbed.lab.lab import Lab

IF = ip.IPv4Interface


def leaf_spine(leaves: int, hosts: int, spines: int, shaped: bool = True) -> LabPlan:
    """Hosts on /30s under routed leaves (198.18.0.0/16 by leaf), leaf-spine /30s in
    198.19.0.0/16, ECMP from each leaf to every other leaf's /22 over all spines."""
    host_s = Shaping(rate_bps=10**9, buffer=BufferSize(packets=100)) if shaped else Shaping()
    fab_s = Shaping(rate_bps=10 * 10**9, buffer=BufferSize(packets=1000)) if shaped else Shaping()
    nodes, links = [], []
    agg = {lf: ip.ip_network(f"198.18.{lf * 4}.0/22") for lf in range(leaves)}
    spine_routes: dict[int, list[Route]] = {s: [] for s in range(spines)}
    for lf in range(leaves):
        for h in range(hosts):
            base = ip.ip_address(f"198.18.{lf * 4}.0") + 4 * h
            links.append(LinkPlan(f"l{lf}h{h}",
                                  Endpoint(f"h{lf}x{h}", "eth0", IF(f"{base + 1}/30")),
                                  Endpoint(f"leaf{lf}", f"h{h}", IF(f"{base + 2}/30")),
                                  a_to_b=host_s, b_to_a=host_s))
            nodes.append(NodePlan(f"h{lf}x{h}", "host", routes=(Route(
                ip.ip_network("0.0.0.0/0"), (NextHop("eth0", base + 2),)),)))
        for s in range(spines):
            base = ip.ip_address(f"198.19.{lf}.0") + 4 * s
            links.append(LinkPlan(f"l{lf}s{s}",
                                  Endpoint(f"leaf{lf}", f"s{s}", IF(f"{base + 1}/30")),
                                  Endpoint(f"spine{s}", f"l{lf}", IF(f"{base + 2}/30")),
                                  a_to_b=fab_s, b_to_a=fab_s))
            spine_routes[s].append(Route(agg[lf], (NextHop(f"l{lf}", base + 1),)))
    for lf in range(leaves):
        hops = tuple(NextHop(f"s{s}", ip.ip_address(f"198.19.{lf}.0") + 4 * s + 2)
                     for s in range(spines))
        nodes.append(NodePlan(f"leaf{lf}", "router", ecmp_hash="l4", routes=tuple(
            Route(agg[o], hops) for o in range(leaves) if o != lf)))
    nodes += [NodePlan(f"spine{s}", "router", routes=tuple(spine_routes[s])) for s in range(spines)]
    return LabPlan(f"ls{leaves}x{hosts}", nodes=tuple(nodes), links=tuple(links))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--leaves", type=int, default=16)
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--spines", type=int, default=4)
    ap.add_argument("--unshaped", action="store_true")
    ap.add_argument("--ping", action="store_true", help="ping across the fabric before down")
    a = ap.parse_args()
    plan = leaf_spine(a.leaves, a.hosts, a.spines, not a.unshaped)
    t0 = time.perf_counter()
    lab = Lab(plan, state_dir=Path("/run/aitb"))
    with lab:
        t_up = time.perf_counter() - t0
        if a.ping:
            far = f"h{a.leaves - 1}x{a.hosts - 1}"
            lab.run("h0x0", ["ping", "-c1", "-W2", str(plan.address_of(far))])
    total = time.perf_counter() - t0
    steps = " ".join(f"{k}={v:.2f}s" for k, v in lab.timings.items())
    print(f"{len(plan.hosts())} hosts, {len(plan.nodes)} nodes, {len(plan.links)} links: "
          f"up {t_up:.2f} s, up+down {total:.2f} s ({steps})")


if __name__ == "__main__":
    main()
