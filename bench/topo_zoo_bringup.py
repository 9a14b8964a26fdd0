"""Bring-up plus teardown of every generator of the zoo at about 256 hosts; the torus also on
Mininet (``mn --topo torus``) side by side.

    sudo .venv/bin/python bench/topo_zoo_bringup.py                 # all, one run each
    sudo .venv/bin/python bench/topo_zoo_bringup.py --only torus --repeats 3
    sudo .venv/bin/python bench/topo_zoo_bringup.py --skip-mininet
    sudo .venv/bin/python bench/topo_zoo_bringup.py --direct        # the direct-connect rows
    sudo .venv/bin/python bench/topo_zoo_bringup.py --largest --cap-s 20 --budget-s 600

Rows ending in ``_direct`` are the same fabric as hosts wired to hosts (``direct: true``:
forwarding hosts, no routers); each is printed with its ratio to the routed row of the same
generator (a router per position with a host behind it) when both ran.

aitb: each generator resolved (``resolve_s``), brought up on the native backend (``up_s``:
namespaces, veths, addresses, routes read back) and torn down (``down_s``); unshaped links.
Mininet 2.3.0 (Debian's ``mn``, its own Python): ``mn --topo torus,16,16 --switch lxbr,stp=1
--controller none --test none`` (a torus of Linux bridges has L2 loops, so STP is on; one host
per switch, as aitb's torus has one host per router), timed from start to exit of ``mn``.
Prints a Markdown table and the JSON of every row.

``--largest``: per family, the sizes of :data:`LADDERS` from small up, each brought up and torn
down once, until one fails or takes longer than ``--cap-s`` (bring-up plus teardown), or the
next is predicted to (the last total times the growth in nodes + links: not run, and said
so), or the whole bench's ``--budget-s`` would be passed. One row per family: the largest
size that came up within the cap, and why the ladder stopped. The figures are for THIS
machine at its load at the time (print ``uptime`` beside them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

import topologies
from testbed.lab.backends import make_lab

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


# family -> sizes, small to large, for --largest (the generator of a family: as for ZOO)
LADDERS: dict[str, list[dict]] = {
    "fat_tree": [{"k": k} for k in (4, 6, 8, 10, 12, 14, 16)],
    "leaf_spine": [{"spines": 4, "leaves": n, "hosts_per_leaf": 16} for n in (2, 4, 8, 16, 32)],
    "rail_optimized": [{"servers": s, "rails": 8, "spines": 4} for s in (2, 4, 8, 16, 32, 64)],
    "rail_optimized_servers": [{"servers": s, "rails": 8, "spines": 4, "server_as_host": True}
                               for s in (2, 4, 8, 16, 32, 64, 128)],
    "torus": [{"dims": [n, n]} for n in (4, 6, 8, 12, 16, 24)],
    "torus_direct": [{"dims": [n, n], "direct": True} for n in (4, 6, 8, 12, 16, 24, 32)],
    "torus_3d_mesh": [{"dims": d, "wrap": False}
                      for d in ([4, 4, 2], [4, 4, 4], [8, 4, 4], [8, 8, 4], [8, 8, 8])],
    "hypercube": [{"d": d} for d in range(3, 11)],
    "hypercube_direct": [{"d": d, "direct": True} for d in range(3, 11)],
    "dragonfly": [{"a": 4, "h": 2, "p": p} for p in (1, 2, 4, 7, 14, 28)],
    "full_mesh": [{"n": n, "hosts_per_router": 8} for n in (4, 8, 16, 32, 64)],
    "full_mesh_direct": [{"n": n, "direct": True} for n in (4, 8, 16, 32, 64)],
    "ring": [{"n": n, "hosts_per_router": 4} for n in (8, 16, 32, 64, 128, 256, 512)],
    "random_graph": [{"model": "barabasi_albert", "n": n, "m": 2, "hosts_per_router": 2}
                     for n in (16, 32, 64, 128, 256, 512)],
    "edge_hierarchy": [{"near_edges": e, "far_per_near": 8, "hosts_per_far": 4,
                        "hosts_per_near": 0, "cloud_hosts": 4} for e in (1, 2, 4, 8, 16, 32)],
    "multi_dc_leaf_spine": [{"n_dcs": n, "spines": 2, "leaves": 4, "hosts_per_leaf": 16,
                             "dci_topology": "hub", "dci": None} for n in (1, 2, 4, 8, 16)],
}


def generator_of(row: str) -> str:
    """The generator of a ZOO row or LADDERS family."""
    if row.startswith("torus"):
        return "torus"
    return row.removesuffix("_direct").removesuffix("_servers")


def aitb_once(row: str, params: dict | None = None) -> dict[str, float]:
    """One resolve + bring-up + teardown of ``ZOO[row]`` (or ``params`` for the generator of
    ``row``); seconds for each part."""
    t0 = time.perf_counter()
    plan = topologies.generate(generator_of(row), **(ZOO[row] if params is None else params))
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


def _size(params: dict, row: str) -> int:
    """Nodes + links of the plan of ``params`` (resolved, nothing created)."""
    plan = topologies.generate(generator_of(row), **params)
    return len(plan.nodes) + len(plan.links)


def largest(family: str, cap_s: float, deadline: float) -> dict:
    """Step ``LADDERS[family]`` up (module docstring); the largest run within ``cap_s``, the
    runs made and why the ladder stopped."""
    best, runs, why = None, [], "the ladder's largest size came up"
    last: tuple[int, float] | None = None  # (nodes + links, total s) of the last run
    for params in LADDERS[family]:
        size = _size(params, family)
        if last is not None:
            est = last[1] * size / last[0]
            if est > cap_s:
                why = f"next {params} predicted {est:.0f} s > cap {cap_s:.0f} s (not run)"
                break
            if time.perf_counter() + est > deadline:
                why = f"bench budget: next {params} (predicted {est:.0f} s) not run"
                break
        elif time.perf_counter() + cap_s > deadline:
            why = "bench budget: not run"
            break
        try:
            r = aitb_once(family, params)
        except Exception as exc:  # noqa: BLE001 (the failure IS the row: report it)
            why = f"{params} failed to come up: {type(exc).__name__}: {str(exc)[:200]}"
            break
        runs.append({"params": params, **{k: round(v, 2) for k, v in r.items()}})
        if r["total_s"] > cap_s:
            why = f"{params} took {r['total_s']:.0f} s > cap {cap_s:.0f} s"
            break
        best, last = runs[-1], (size, r["total_s"])
    return {"family": family, "largest": best, "runs": runs, "stopped": why}


def main_largest(cap_s: float, budget_s: float, only: list[str] | None) -> None:
    """The --largest table (module docstring)."""
    deadline = time.perf_counter() + budget_s
    print(f"largest size within a {cap_s:.0f} s bring-up + teardown cap (bench budget "
          f"{budget_s:.0f} s)")
    print("| family | largest within cap | hosts | routers | links | up s | total s | "
          "stopped because |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    rows = []
    for family in only or LADDERS:
        row = largest(family, cap_s, deadline)
        rows.append(row)
        b = row["largest"] or {}
        print(f"| {family} | {b.get('params', '-')} | {b.get('hosts', '-')} | "
              f"{b.get('routers', '-')} | {b.get('links', '-')} | {b.get('up_s', '-')} | "
              f"{b.get('total_s', '-')} | {row['stopped']} |", flush=True)
    print(json.dumps(rows))


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
    ap.add_argument("--only", action="append", choices=sorted(set(ZOO) | set(LADDERS)),
                    help="rows (families with --largest) to run")
    ap.add_argument("--repeats", type=int, default=1, help="runs per row (median kept)")
    ap.add_argument("--skip-mininet", action="store_true")
    ap.add_argument("--direct", action="store_true",
                    help="the direct-connect rows with their routed peers and Mininet's torus")
    ap.add_argument("--largest", action="store_true",
                    help="per family, the largest size that comes up within --cap-s")
    ap.add_argument("--cap-s", type=float, default=20.0,
                    help="--largest: bring-up + teardown time cap per size (s)")
    ap.add_argument("--budget-s", type=float, default=600.0,
                    help="--largest: the whole bench's time budget (s)")
    a = ap.parse_args()
    if a.largest:
        main_largest(a.cap_s, a.budget_s, a.only)
        return
    if set(a.only or ()) - set(ZOO):
        ap.error(f"--only {sorted(set(a.only) - set(ZOO))}: families of --largest only")
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
