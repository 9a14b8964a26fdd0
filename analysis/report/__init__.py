"""The self-contained HTML report of a run: ``report.html`` (jinja2 template shipped as
package data, matplotlib figures inlined as base64 PNG, no external files or scripts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from aitb.atomic import write_text_atomic
from analysis.report import plots, units
from analysis.report.narrative import workload_sections
from analysis.tables import RunTables

__all__ = ["render_report", "PLOTS"]

# figure id -> (title, what the report says when the run lacks its data)
PLOTS: dict[str, tuple[str, str]] = {
    "fct-cdf": ("FCT CDF", "No completed flow records in this run."),
    "cct-per-iteration": ("CCT per iteration", "No op ran in two iterations or more: no plot "
                          "(the iteration table and the CCT distribution say it all)."),
    "queue-occupancy": ("Queue occupancy and drops over time",
                        "No qdisc counter samples (counters/qdisc.parquet) in this run."),
    "link-throughput": ("Throughput per link over time",
                        "No interface counter samples (counters/links.parquet) in this run."),
    "rank-timeline": ("Per-rank timeline of collectives",
                      "No per-rank timeline (timeline.jsonl) in this run."),
}


def _t0(t: RunTables) -> float:
    starts = [float(f["t_start"].min()) for f in (t.table("timeline"), t.table("flows"))
              if not f.empty and "t_start" in f]
    for name in ("qdisc", "links"):
        if not t.counters[name].empty:
            starts.append(float(t.counters[name]["t_s"].min()))
    return min(starts) if starts else 0.0


def _stragglers(t: RunTables, m: dict[str, Any]) -> set[tuple[int, int]]:
    tl = t.table("timeline")
    if not tl.empty and "slowdown" in tl and (tl["slowdown"] > 1).any():
        slow = tl[tl["slowdown"] > 1]
        return {(int(w), int(r)) for w, r in zip(slow.get("workload_index", 0), slow["rank"],
                                                 strict=True)}
    counts: dict[tuple[int, int], int] = {}
    for row in m["stragglers"]["per_collective"]:
        if row["slowest_rank"] is None:  # nobody arrived late: no compute straggler
            continue
        key = (row["workload_index"], row["slowest_rank"])
        counts[key] = counts.get(key, 0) + 1
    return {max(counts, key=counts.__getitem__)} if counts else set()


def events(t: RunTables) -> list[tuple[float, str]]:
    """Events to mark on time axes (host clock, s): each workload's first op and each
    burst's planned start (the first five of a workload, then one mark per workload)."""
    out: list[tuple[float, str]] = []
    for frame in (t.table("timeline"), t.table("flows")):
        if frame.empty or "t_start" not in frame:
            continue
        key = frame["workload"] if "workload" in frame else pd.Series("run", frame.index)
        for w, g in frame.groupby(key):
            out.append((float(g["t_start"].min()), f"{w} starts"))
        break
    b = t.table("bursts")
    if not b.empty and "planned_start" in b:
        key = b["workload"] if "workload" in b else pd.Series("", b.index)
        for _, g in b.groupby(key):
            out += [(float(x), "burst") for x in sorted(g["planned_start"])[:5]]
    return out


def _multi_point(per_collective: list[dict[str, Any]]) -> bool:
    """Whether some (workload, op) series of the CCT plot has two or more iterations."""
    seen: dict[tuple[Any, Any], set[Any]] = {}
    for c in per_collective:
        seen.setdefault((c["workload_index"], c["op"]), set()).add(c["iteration"])
    return any(len(v) > 1 for v in seen.values())


def figures(t: RunTables, m: dict[str, Any], flow_table: pd.DataFrame) -> dict[str, str | None]:
    """Figure id (keys of PLOTS) -> base64 PNG or None (no data, or too little for a plot:
    a CCT-per-iteration plot needs two iterations of one op)."""
    t0 = _t0(t)
    ev = [(x - t0, label) for x, label in events(t)]
    per = m["cct"]["per_collective"]
    return {"fct-cdf": plots.fct_cdf(flow_table),
            "cct-per-iteration": plots.cct_per_iteration(per) if _multi_point(per) else None,
            "queue-occupancy": plots.queue_over_time(t.counters["qdisc"], t0, ev),
            "link-throughput": plots.throughput_over_time(t.counters["links"], t0, ev),
            "rank-timeline": plots.rank_timeline(t.table("timeline"), _stragglers(t, m), t0)}


def _fmt(value: Any) -> str:
    if value is None or isinstance(value, jinja2.Undefined):
        return "—"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _locality(run_dir: Any) -> dict[str, Any] | None:
    """locality.json of the run (analysis.locality), None when it has none."""
    try:
        return json.loads((run_dir / "locality.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def render_report(t: RunTables, m: dict[str, Any], flow_table: pd.DataFrame) -> Path:
    """Write ``report.html`` into the run directory (atomically) and return its path.
    Sections whose data the run lacks say so; nothing is fetched from outside the file."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("analysis.report", "templates"),
                             autoescape=True)  # lenient: a key missing from an input is "—"
    env.filters["fmt"] = _fmt
    env.filters["dur"] = units.duration
    env.filters["bits"] = units.bits
    env.filters["size"] = units.size
    env.filters["pct"] = units.share
    env.filters["Bps"] = units.bytes_rate
    env.globals["by_key"] = units.by_key
    figs = figures(t, m, flow_table)
    html = env.get_template("report.html.j2").render(
        m=m, plots=[(k, title, figs[k], absent) for k, (title, absent) in PLOTS.items()],
        manifest=t.manifest, warnings=t.warnings,
        sections=workload_sections(t.manifest, m, t), locality=_locality(t.run_dir))
    path = t.run_dir / "report.html"
    write_text_atomic(path, html)
    return path
