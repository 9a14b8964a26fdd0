"""Bench: a DP ring all-reduce between two DCs attached to the GEANT map (Internet Topology
Zoo, ../shared/data/topologies/zoo/Geant2012.graphml) against the alpha-beta prediction from
the map's derived delays (target: within 10 %).

Usage (root): sudo PYTHONPATH=. .venv/bin/python bench/geant_dci_cct.py [--dc1 NL] [--dc2 GR]
              [--size 4MiB] [--iterations 5] [--stretch 1.5] [--map PATH]

Lab: every GEANT PoP a router (no hosts of their own), link delays = great circle x stretch x
5 us/km (topologies/wan), link rates from the map's LinkSpeedRaw; a single-switch DC of 2 hosts
attached at each of two PoPs, every DC link at --rate (100 Mbit/s; the bottleneck B), so
that the ring (rank order: dc1-h1, dc1-h2, dc2-h1, dc2-h2) crosses the WAN twice per step.

Prediction (ring all-reduce, Patarasuk & Yuan 2009; Thakur et al. 2005): 2(N-1) steps, each as
long as its slowest hop, one DCI crossing: T = 2(N-1) x (d + S / (N x B')), d the configured
one-way delay of the routed path between the two DCs (workloads.paths, the plan's routes), B' =
B x 1448/1514 the TCP payload rate of an MTU-1500 Ethernet link. The first iteration includes
TCP's slow start on fresh connections; the figure compared is the median CCT of the others.
Prints d, the prediction, each iteration's CCT and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aitb as api  # noqa: E402
from models.units import parse_rate_bps, parse_size_bytes  # noqa: E402
from topologies.wan import Attachment, WanOptions, import_wan  # noqa: E402
from workloads.paths import path_delay_s  # noqa: E402

MAP = ROOT.parent / "shared" / "data" / "topologies" / "zoo" / "Geant2012.graphml"
PAYLOAD_FRACTION = 1448 / 1514


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--map", type=Path, default=MAP)
    ap.add_argument("--dc1", default="NL")
    ap.add_argument("--dc2", default="GR")
    ap.add_argument("--size", default="4MiB")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--stretch", type=float, default=1.5)
    ap.add_argument("--rate", default="100Mbit", help="every DC link's rate (B)")
    ap.add_argument("--cc", default=None, help="transport.tcp_congestion_control (default: "
                    "the host's)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("geant_dci_cct: needs root (network namespaces)", file=sys.stderr)
        return 2
    dc = {"generator": "single_switch", "params": {"hosts": 2}}
    wan = import_wan(args.map, WanOptions(
        stretch=args.stretch, hosts_per_pop=0, name="geant-2dc",
        attach=(Attachment(args.dc1, dc["generator"], dc["params"]),
                Attachment(args.dc2, dc["generator"], dc["params"]))))
    topo = wan.topology
    for link in topo["links"]:
        if any(end.startswith("dc") for end in link["endpoints"]):
            link.pop("profile", None)
            link.update(rate=args.rate, buffer="2000p")
    hosts = ["dc1-h1", "dc1-h2", "dc2-h1", "dc2-h2"]
    plan = api.topology({"inline": topo})
    d_s = max(path_delay_s(plan, "dc1-h2", "dc2-h1"), path_delay_s(plan, "dc2-h2", "dc1-h1"))
    n, size, rate_bps = len(hosts), parse_size_bytes(args.size), parse_rate_bps(args.rate)
    predicted_s = 2 * (n - 1) * (d_s + size * 8 / (n * rate_bps * PAYLOAD_FRACTION))
    exp = {"name": "geant-2dc-allreduce", "seed": 1, "topology": {"inline": topo},
           "capture": {"enabled": False},
           "workloads": [{"kind": "collective", "op": "all_reduce", "algorithm": "ring",
                          "size": args.size, "iterations": args.iterations,
                          "compute": "0s"}]}
    if args.cc:
        exp["transport"] = {"tcp_congestion_control": args.cc}
    with tempfile.TemporaryDirectory(prefix="aitb-bench-geant-") as tmp:
        run = api.run(exp, tmp, analyze=False)
        if not run.ok:
            print(f"geant_dci_cct: the run failed: {run.error}", file=sys.stderr)
            return 1
        ccts = _ccts(run.run_dir)
        fct = _fct_by_hop(run.run_dir)
    later = statistics.median(ccts[1:]) if len(ccts) > 1 else ccts[0]
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{len(plan.nodes)} nodes, {len(plan.links)} links; DCs at {args.dc1} and {args.dc2}; "
          f"one-way DCI path delay d = {d_s * 1e3:.2f} ms (stretch {args.stretch}); "
          f"congestion control {args.cc or 'host default'}")
    print(f"alpha-beta prediction T = 2(N-1)(d + S/(N B')) = {predicted_s * 1e3:.1f} ms "
          f"(N {n}, S {size} B, B' {rate_bps * PAYLOAD_FRACTION / 1e6:.1f} Mbit/s)")
    print("CCT per iteration (ms): " + ", ".join(f"{c * 1e3:.1f}" for c in ccts))
    step_s = d_s + size * 8 / (n * rate_bps * PAYLOAD_FRACTION)
    for hop, v in sorted(fct.items()):
        print(f"  {hop}: transfer FCT median {statistics.median(v) * 1e3:.1f} ms over {len(v)} "
              f"(a DCI step alone: {step_s * 1e3:.1f} ms)")
    print(f"median CCT after the first iteration {later * 1e3:.1f} ms; measured / predicted "
          f"{later / predicted_s:.3f} (target within 10 %: 0.90-1.10)")
    return 0


def _fct_by_hop(run_dir: Path) -> dict[str, list[float]]:
    """FCT (s, first byte sent to last byte received) of every ring transfer by its hop."""
    import json
    out: dict[str, list[float]] = {}
    for x in (run_dir / "flows.jsonl").read_text().splitlines():
        if x:
            f = json.loads(x)
            out.setdefault(f"{f['src_node']} -> {f['dst_node']}", []).append(f["fct_s"])
    return out


def _ccts(run_dir: Path) -> list[float]:
    import json
    lines = (run_dir / "collectives.jsonl").read_text().splitlines()
    return [json.loads(x)["cct_s"] for x in lines if x]


if __name__ == "__main__":
    sys.exit(main())
