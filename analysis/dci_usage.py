"""DCI use per workload (pure, reads a run directory): bytes per DCI link direction, ring
edges that cross a PID boundary, iteration time. The numbers that compare a ring order by
rank id with one by the ALTO cost map (examples/alto_ring_order.yaml).

Definitions:
- bytes per DCI link direction: the sum of ``size_bytes`` of the workload's flows
  (flows.jsonl) whose first routed path (models.paths; the one through every route's first
  next hop) sends over that DCI link (models.paths.dci_links) in that direction, keyed
  ``"<link> <sender>-><receiver>"``; a flow the plan has no path for counts nowhere;
- ring crossings of a collective: ring edges of its communicator order (collectives.jsonl
  ``hosts``, group order; the last back to the first) joining hosts of different PIDs
  (alto/index.json's ``pids``; without it, sites by models.paths.site_of), counted for
  algorithm ``ring`` only; a workload's crossings are the sum over its distinct groups in
  its first iteration (the order is the same in every iteration);
- iteration time: per (workload, iteration) the last rank op end minus the first start in
  timeline.jsonl, summed over the workload's iterations (seconds).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from models.paths import PathError, PathWalker, dci_links, site_of
from models.plan import LabPlan, plan_from_dict
from models.rundir import read_jsonl

__all__ = ["dci_usage"]



def _pids(run_dir: Path, plan: LabPlan) -> dict[str, str]:
    index = run_dir / "alto" / "index.json"
    if index.exists():
        return dict(json.loads(index.read_text(encoding="utf-8"))["pids"])
    return {h.name: site_of(plan, h.name) or "" for h in plan.hosts()}


def _link_bytes(plan: LabPlan, flows: list[dict[str, Any]]) -> dict[int, dict[str, int]]:
    dci = dci_links(plan)
    walker = PathWalker(plan)
    far = {(lk.name, lk.a.node): lk.b.node for lk in plan.links} | {
        (lk.name, lk.b.node): lk.a.node for lk in plan.links}
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for f in flows:
        try:
            path = walker.paths(f["src_node"], f["dst_ip"])[0]
        except PathError:
            continue
        for h in path:
            if h.link in dci:
                key = f"{h.link} {h.node}->{far[(h.link, h.node)]}"
                out[f.get("workload_index", 0)][key] += int(f["size_bytes"])
    return out


def _crossings(colls: list[dict[str, Any]], pids: dict[str, str]) -> dict[int, int]:
    out: dict[int, int] = defaultdict(int)
    for c in colls:
        if c.get("algorithm") != "ring" or c["iteration"] != 0 or len(c["hosts"]) < 2:
            continue
        p = [pids.get(h, h) for h in c["hosts"]]
        out[c.get("workload_index", 0)] += sum(p[i] != p[(i + 1) % len(p)]
                                               for i in range(len(p)))
    return out


def _iteration_time(timeline: list[dict[str, Any]]) -> dict[int, float]:
    spans: dict[tuple[int, int], tuple[float, float]] = {}
    for r in timeline:
        k = (r.get("workload_index", 0), r["iteration"])
        lo, hi = spans.get(k, (r["t_start"], r["t_end"]))
        spans[k] = (min(lo, r["t_start"]), max(hi, r["t_end"]))
    out: dict[int, float] = defaultdict(float)
    for (w, _it), (lo, hi) in spans.items():
        out[w] += hi - lo
    return out


def dci_usage(run_dir: Path) -> list[dict[str, Any]]:
    """One row per workload of ``run_dir`` (module docstring): ``workload_index``,
    ``workload``, ``ring_crossings``, ``dci_bytes`` (all DCI link directions),
    ``bytes_per_dci_link`` (sorted by key), ``iteration_time_s``. Reads only; raises
    FileNotFoundError without plan.json."""
    plan = plan_from_dict(json.loads((run_dir / "plan.json").read_text(encoding="utf-8")))
    flows = read_jsonl(run_dir / "flows.jsonl")
    colls = read_jsonl(run_dir / "collectives.jsonl")
    timeline = read_jsonl(run_dir / "timeline.jsonl")
    names = {r.get("workload_index", 0): r.get("workload") for r in (*flows, *colls, *timeline)}
    link_bytes = _link_bytes(plan, flows)
    cross = _crossings(colls, _pids(run_dir, plan))
    iters = _iteration_time(timeline)
    return [{"workload_index": w, "workload": names[w], "ring_crossings": cross.get(w, 0),
             "dci_bytes": sum(link_bytes.get(w, {}).values()),
             "bytes_per_dci_link": dict(sorted(link_bytes.get(w, {}).items())),
             "iteration_time_s": iters.get(w)} for w in sorted(names)]
