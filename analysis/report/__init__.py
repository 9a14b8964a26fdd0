"""The self-contained HTML report of a run: ``report.html`` (jinja2 template shipped as
package data, matplotlib figures inlined as base64 PNG, no external files or scripts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from aitb.atomic import write_text_atomic
from analysis.report import plots
from analysis.tables import RunTables

__all__ = ["render_report", "PLOTS"]

# figure id -> (title, what the report says when the run lacks its data)
PLOTS: dict[str, tuple[str, str]] = {
    "fct-cdf": ("FCT CDF", "No completed flow records in this run."),
    "cct-per-iteration": ("CCT per iteration", "No collective records in this run."),
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


def figures(t: RunTables, m: dict[str, Any], flow_table: pd.DataFrame) -> dict[str, str | None]:
    """Figure id (keys of PLOTS) -> base64 PNG or None (no data)."""
    t0 = _t0(t)
    return {"fct-cdf": plots.fct_cdf(flow_table),
            "cct-per-iteration": plots.cct_per_iteration(m["cct"]["per_collective"]),
            "queue-occupancy": plots.queue_over_time(t.counters["qdisc"], t0),
            "link-throughput": plots.throughput_over_time(t.counters["links"], t0),
            "rank-timeline": plots.rank_timeline(t.table("timeline"), _stragglers(t, m), t0)}


def _fmt(value: Any) -> str:
    if value is None or isinstance(value, jinja2.Undefined):
        return "—"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def render_report(t: RunTables, m: dict[str, Any], flow_table: pd.DataFrame) -> Path:
    """Write ``report.html`` into the run directory (atomically) and return its path.
    Sections whose data the run lacks say so; nothing is fetched from outside the file."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("analysis.report", "templates"),
                             autoescape=True)  # lenient: a key missing from an input is "—"
    env.filters["fmt"] = _fmt
    figs = figures(t, m, flow_table)
    html = env.get_template("report.html.j2").render(
        m=m, plots=[(k, title, figs[k], absent) for k, (title, absent) in PLOTS.items()],
        manifest=t.manifest, warnings=t.warnings)
    path = t.run_dir / "report.html"
    write_text_atomic(path, html)
    return path
