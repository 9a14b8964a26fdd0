"""Bring-up plus teardown of every generator of the zoo at about 256 hosts; the torus also on
Mininet (``mn --topo torus``) side by side.

    sudo .venv/bin/python bench/topo_zoo_bringup.py                 # all, one run each
    sudo .venv/bin/python bench/topo_zoo_bringup.py --only torus --repeats 3
    sudo .venv/bin/python bench/topo_zoo_bringup.py --skip-mininet
    sudo .venv/bin/python bench/topo_zoo_bringup.py --direct        # the direct-connect rows

Rows ending in ``_direct`` are the same fabric as hosts wired to hosts (``direct: true``:
forwarding hosts, no routers); each is printed with its ratio to the routed row of the same
generator (a router per position with a host behind it) when both ran.

aitb: each generator resolved (``resolve_s``), brought up on the native backend (``up_s``:
namespaces, veths, addresses, routes read back) and torn down (``down_s``); unshaped links.
Mininet 2.3.0 (Debian's ``mn``, its own Python): ``mn --topo torus,16,16 --switch lxbr,stp=1
--controller none --test none`` (a torus of Linux bridges has L2 loops, so STP is on; one host
per switch, as aitb's torus has one host per router), timed from start to exit of ``mn``.
Prints a Markdown table and the JSON of every row.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

import topologies
from testbed.backends import make_lab

# generator -> params giving about 256 hosts
ZOO: dict[str, dict] = {
    "fat_tree": {"k": 10},  # 250 hosts, 125 routers
    "leaf_spine": {"spines": 4, "leaves": 16, "hosts_per_leaf": 16, "oversubscription": 4,
                   "host_rate": "1Gbit"},
    "rail_optimized": {"servers": 32, "rails": 8, "spines": 4},
    "torus": {"dims": [16, 16]},
    "torus_3d_mesh": {"dims": [8, 8, 4], "wrap": False},
    "hypercube": {"d": 8},
    "dragonfly": {"a": 4, "h": 2, "p": 7},  # 9 groups: 252 hosts
    "full_mesh": {"n": 32, "hosts_per_router": 8},
    # direct connect: the positions are forwarding hosts (the routed rows' peers)
    "torus_direct": {"dims": [16, 16], "direct": True},
    "torus_3d_mesh_direct": {"dims": [8, 8, 4], "wrap": False, "direct": True},
    "hypercube_direct": {"d": 8, "direct": True},
    "full_mesh_direct": {"n": 32, "direct": True},  # 32 hosts, 496 links: every pair
    "ring": {"n": 64, "hosts_per_router": 4},
    "random_graph": {"model": "barabasi_albert", "n": 128, "m": 2, "hosts_per_router": 2},
    "edge_hierarchy": {"near_edges": 8, "far_per_near": 8, "hosts_per_far": 4,
                       "hosts_per_near": 0, "cloud_hosts": 4},
    "multi_dc_leaf_spine": {"n_dcs": 4, "spines": 2, "leaves": 4, "hosts_per_leaf": 16,
                            "dci_topology": "hub", "dci": None},
}


def aitb_once(row: str) -> dict[str, float]:
    """One resolve + bring-up + teardown of ``ZOO[row]``; seconds for each part."""
    gen = "torus" if row.startswith("torus") else row.removesuffix("_direct")
    t0 = time.perf_counter()
    plan = topologies.generate(gen, **ZOO[row])
    t1 = time.perf_counter()
    lab = make_lab(plan, "native")
    try:
        lab.up()
        t2 = time.perf_counter()
    finally:
        lab.down()
    t3 = time.perf_counter()
    kinds = [n.kind for n in plan.nodes]
    return {"hosts": kinds.count("host"), "routers": kinds.count("router"),
            "links": len(plan.links), "resolve_s": t1 - t0, "up_s": t2 - t1,
            "down_s": t3 - t2, "total_s": t3 - t0}


def mininet_torus(x: int, y: int) -> dict[str, float]:
    """``mn --topo torus,x,y`` start to exit (bring-up, no test, teardown)."""
    argv = ["mn", f"--topo=torus,{x},{y}", "--switch", "lxbr,stp=1", "--controller", "none",
            "--test", "none"]
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
    t1 = time.perf_counter()
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return {"hosts": x * y, "switches": x * y, "total_s": t1 - t0}


def median(fn, repeats: int, *args) -> dict[str, float]:
    """The run with the median total of ``repeats`` runs of ``fn(*args)``."""
    runs = sorted((fn(*args) for _ in range(repeats)), key=lambda r: r["total_s"])
    return runs[len(runs) // 2] | {"runs_total_s": [round(r["total_s"], 2) for r in runs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(ZOO), help="rows to run")
    ap.add_argument("--repeats", type=int, default=1, help="runs per row (median kept)")
    ap.add_argument("--skip-mininet", action="store_true")
    ap.add_argument("--direct", action="store_true",
                    help="the direct-connect rows with their routed peers and Mininet's torus")
    a = ap.parse_args()
    if a.direct:
        a.only = [r for r in ZOO if r.endswith("_direct")
                  or f"{r}_direct" in ZOO] + (a.only or [])
    print("| generator | hosts | routers | links | resolve s | up s | down s | total s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    rows = {}
    for name in a.only or ZOO:  # one line per row as it finishes
        r = rows[name] = median(aitb_once, a.repeats, name)
        print(f"| {name} | {r['hosts']} | {r['routers']} | {r['links']} | {r['resolve_s']:.2f} "
              f"| {r['up_s']:.2f} | {r['down_s']:.2f} | {r['total_s']:.2f} |", flush=True)
    for name, r in list(rows.items()):
        peer = rows.get(name.removesuffix("_direct"))
        if name.endswith("_direct") and peer is not None:
            print(f"ratio direct/routed {name.removesuffix('_direct')}: up "
                  f"{r['up_s'] / peer['up_s']:.2f}, down {r['down_s'] / peer['down_s']:.2f}, "
                  f"total {r['total_s'] / peer['total_s']:.2f}")
    if not a.skip_mininet and (a.only is None or "torus" in a.only
                               or "torus_direct" in a.only):
        mn = mininet_torus(16, 16)
        rows["mininet_torus"] = mn
        print(f"| mininet torus 16x16 (lxbr, STP) | {mn['hosts']} | {mn['switches']} switches "
              f"| | | | | {mn['total_s']:.2f} |")
        for row in ("torus", "torus_direct"):
            if row in rows:
                print(f"ratio mininet/aitb on the 16x16 torus ({row}) = "
                      f"{mn['total_s'] / rows[row]['total_s']:.2f}x")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
