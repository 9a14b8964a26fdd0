"""DCI crossing report (pure, no root): which collective instances had flows over a DCI link,
and how much of the iteration time they cost. Writes ``dci.json`` into the run directory.

Inputs: ``plan.json`` (routes, sites; models.paths), ``flows.jsonl`` (each flow's source
node, destination address and ``collective_id``), ``collectives.jsonl`` (each instance's per-
rank start and end), ``timeline.jsonl`` (per-rank ops: the iteration's span).

Definitions (seconds on the host clock, as the records):
- a collective instance *crosses the DCI* when at least one of its flows may cross a DCI link
  (any of its equal-cost paths does; models.paths; a flow the plan has no path for, e.g.
  to an address outside the plan, crosses nothing);
- its interval is [min rank start, max rank end], its CCT the interval's length (records.py);
- iteration time: the busy time of that (workload, iteration): the length of the union of its
  rank ops' intervals in the timeline (the collectives' where the timeline is empty), so the
  controller's idle start margins between phases are not counted (analysis/metrics/
  collectives.py says the same);
- DCI collective time of an iteration: the length of the union of the intervals of its
  crossing instances (concurrent instances, e.g. the DP all-reduces of eight DP groups, count
  once); ``dci_collective_time_s`` of a run: the sum over its iterations;
- share: DCI collective time / iteration time. This is the time during which the job was
  inside a DCI-crossing collective, an upper bound on what the DCI cost (the collective would
  take some time even inside one DC). Per workload (``per_workload``): its crossing time over
  its own iterations (what the report's result for that workload says); of the run
  (``totals``): summed over the workloads that ran collectives only, so an incast's bursts
  or a federated round (timeline iterations without a collective) do not dilute it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from models.paths import PathError, PathWalker, dci_links
from models.plan import LabPlan, plan_from_dict
from models.rundir import read_jsonl

__all__ = ["dci_report", "write_dci", "dci_collective_time_s", "union_length"]

Key = tuple[int, str]  # (workload_index, collective_id): ids restart in every workload



def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length (s) of the union of closed intervals ``[(start, end), ...]``."""
    total, end = 0.0, -math.inf
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def _crossing_flows(plan: LabPlan, flows: list[dict[str, Any]], dci: frozenset[str],
                    unrouted: list[str]) -> dict[Key, dict[str, Any]]:
    """Per collective instance: flows, flows that may cross a DCI link, their bytes, links.
    A flow the plan has no path for crosses nothing and is named in ``unrouted``."""
    walker = PathWalker(plan)
    out: dict[Key, dict[str, Any]] = defaultdict(lambda: {"flows": 0, "flows_crossing": 0,
                                                          "bytes_crossing": 0,
                                                          "links": set()})
    for f in flows:
        if f.get("collective_id") is None:
            continue
        entry = out[(f.get("workload_index", 0), f["collective_id"])]
        entry["flows"] += 1
        crossed = _crossed(walker, f["src_node"], f["dst_ip"], dci, unrouted)
        if crossed:
            entry["flows_crossing"] += 1
            entry["bytes_crossing"] += f["size_bytes"]
            entry["links"] |= crossed
    return out


def _crossed(walker: PathWalker, src_node: str, dst_ip: str, dci: frozenset[str],
             unrouted: list[str]) -> set[str]:
    """The DCI links on any path of the flow; none when the plan has no path for it (then
    the reason goes into ``unrouted``)."""
    try:
        found = walker.paths(src_node, dst_ip)
    except PathError as exc:
        unrouted.append(f"{src_node} -> {dst_ip}: {exc}")
        return set()
    return {h.link for path in found for h in path if h.link in dci}


def _iteration_spans(timeline: list[dict[str, Any]], colls: list[dict[str, Any]]
                     ) -> dict[tuple[int, int], float]:
    spans: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    rows = [(r.get("workload_index", 0), r["iteration"], r["t_start"], r["t_end"])
            for r in timeline] or [(c.get("workload_index", 0), c["iteration"],
                                    min(c["rank_t_start"]), max(c["rank_t_end"])) for c in colls]
    for w, it, lo, hi in rows:
        spans[(w, it)].append((lo, hi))
    return {k: union_length(v) for k, v in spans.items()}


def _instance(c: dict[str, Any], cross: dict[str, Any], iter_s: float | None
              ) -> dict[str, Any]:
    return {"workload": c.get("workload"), "workload_index": c.get("workload_index", 0),
            "collective_id": c["collective_id"], "op": c["op"], "group": c["group"],
            "group_kind": c["group_kind"], "size_bytes": c["size_bytes"],
            "iteration": c["iteration"], "hosts": c["hosts"], "cct_s": c["cct_s"],
            "t_start": min(c["rank_t_start"]), "t_end": max(c["rank_t_end"]),
            "flows": cross["flows"], "flows_crossing": cross["flows_crossing"],
            "bytes_crossing": cross["bytes_crossing"], "dci_links": sorted(cross["links"]),
            "iteration_time_s": iter_s,
            "share_of_iteration": c["cct_s"] / iter_s if iter_s else None}


def _by_op_group(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["op"], r["group_kind"], r["size_bytes"])].append(r)
    return [{"op": op, "group_kind": kind, "size_bytes": size, "instances": len(rs),
             "groups": sorted({r["group"] for r in rs}),
             "cct_s_total": sum(r["cct_s"] for r in rs),
             "cct_s_mean": sum(r["cct_s"] for r in rs) / len(rs),
             "bytes_crossing": sum(r["bytes_crossing"] for r in rs)}
            for (op, kind, size), rs in sorted(groups.items(), key=lambda kv: kv[0][:2])]


def _iterations(rows: list[dict[str, Any]], spans: dict[tuple[int, int], float]
                ) -> list[dict[str, Any]]:
    out = []
    for (w, it), iter_s in sorted(spans.items()):
        mine = [(r["t_start"], r["t_end"]) for r in rows
                if (r["workload_index"], r["iteration"]) == (w, it)]
        t = union_length(mine)
        out.append({"workload_index": w, "iteration": it, "iteration_time_s": iter_s,
                    "collectives_crossing": len(mine), "dci_collective_time_s": t,
                    "share": t / iter_s if iter_s > 0 else None})
    return out


def _per_workload(colls: list[dict[str, Any]], iters: list[dict[str, Any]]
                  ) -> list[dict[str, Any]]:
    """Per workload that ran collectives: its iteration time, DCI collective time (s, summed
    over its iterations) and their share (module docstring)."""
    names = {c.get("workload_index", 0): c.get("workload") for c in colls}
    out = []
    for w in sorted(names):
        mine = [i for i in iters if i["workload_index"] == w]
        it = sum(i["iteration_time_s"] for i in mine)
        t = sum(i["dci_collective_time_s"] for i in mine)
        out.append({"workload_index": w, "workload": names[w], "iteration_time_s": it,
                    "dci_collective_time_s": t, "share": t / it if it > 0 else None})
    return out


def _links_table(plan: LabPlan, dci: frozenset[str]) -> list[dict[str, Any]]:
    return [{"link": lk.name, "a": lk.a.node, "b": lk.b.node,
             "a_to_b": {"rate_bps": lk.a_to_b.rate_bps, "delay_s": lk.a_to_b.delay_s},
             "b_to_a": {"rate_bps": lk.b_to_a.rate_bps, "delay_s": lk.b_to_a.delay_s}}
            for lk in plan.links if lk.name in dci]


def dci_report(run_dir: Path) -> dict[str, Any]:
    """The DCI crossing report of ``run_dir`` (see the module docstring) as a JSON-ready
    dict: ``dci_links``, ``collectives`` (crossing instances), ``by_op_group`` (op, group
    kind, size), ``iterations``, ``per_workload`` (workloads that ran collectives), ``totals``
    (``iteration_time_s``: of those workloads) and ``unrouted_flows`` (the first 20 flows the
    plan has no path for, with the reason: the report shows them as a warning). Reads only;
    raises FileNotFoundError without plan.json."""
    plan = plan_from_dict(json.loads((run_dir / "plan.json").read_text(encoding="utf-8")))
    dci = dci_links(plan)
    colls = read_jsonl(run_dir / "collectives.jsonl")
    unrouted: list[str] = []
    cross = _crossing_flows(plan, read_jsonl(run_dir / "flows.jsonl"), dci, unrouted) if dci else {}
    spans = _iteration_spans(read_jsonl(run_dir / "timeline.jsonl"), colls)
    rows = [_instance(c, cross[k], spans.get((k[0], c["iteration"])))
            for c in colls if (k := (c.get("workload_index", 0), c["collective_id"])) in cross
            and cross[k]["flows_crossing"]]
    iters = _iterations(rows, spans)
    per_workload = _per_workload(colls, iters)
    total_iter = sum(w["iteration_time_s"] for w in per_workload)
    total_dci = sum(w["dci_collective_time_s"] for w in per_workload)
    return {"schema_version": 1, "dci_links": _links_table(plan, dci), "collectives": rows,
            "by_op_group": _by_op_group(rows), "iterations": iters,
            "per_workload": per_workload,
            "totals": {"collectives": len(colls), "collectives_crossing": len(rows),
                       "iteration_time_s": total_iter, "dci_collective_time_s": total_dci,
                       "share": total_dci / total_iter if total_iter > 0 else None,
                       "unrouted_flows": len(unrouted)},
            "unrouted_flows": sorted(set(unrouted))[:20]}


def write_dci(run_dir: Path) -> Path:
    """Write ``run_dir/dci.json`` (:func:`dci_report`) atomically; returns its path."""
    report = dci_report(run_dir)
    path = run_dir / "dci.json"
    tmp = run_dir / ".dci.json.tmp"
    tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def dci_collective_time_s(run_dir: Path) -> float | None:
    """The contract summary key ``dci_collective_time_s`` (analysis/metrics/__init__.py): seconds
    during which a DCI-crossing collective was in progress, summed over the run's iterations
    (module docstring); None when the plan has no DCI link or the run no collective."""
    report = dci_report(run_dir)
    if not report["dci_links"] or not report["totals"]["collectives"]:
        return None
    return report["totals"]["dci_collective_time_s"]
