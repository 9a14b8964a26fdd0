"""The self-contained HTML report of a run: ``report.html`` (jinja2 template shipped as
package data, matplotlib figures inlined as base64 PNG, no external files or scripts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pandas as pd

from analysis.fidelity.report import check_coverage, coverage_words
from analysis.metrics.bound import KernelView
from analysis.metrics.collectives import iteration_times
from analysis.metrics.events import DEFAULT_WINDOW_S, RECOVERY_FRACTION, goodput
from analysis.report import picture, plots, units
from analysis.report.narrative import dci_time, workload_sections
from analysis.tables import RunTables
from models.atomic import write_text_atomic

__all__ = ["render_report", "PLOTS"]

# figure id -> (title, what the report says when the run lacks its data)
PLOTS: dict[str, tuple[str, str]] = {
    "lab": ("The lab: busy share of each link direction, critical link, stragglers",
            "No lab plan (plan.json) in this run."),
    "fct-cdf": ("FCT CDF", "No completed flow records in this run."),
    "cct-per-iteration": ("CCT per iteration", "No op ran in two iterations or more: no plot "
                          "(the iteration table and the CCT distribution say it all)."),
    "queue-occupancy": ("Queue occupancy and drops over time",
                        "No qdisc counter samples (counters/qdisc.parquet) in this run."),
    "link-throughput": ("Throughput per link over time",
                        "No interface counter samples (counters/links.parquet) in this run."),
    "rank-timeline": ("Per-rank timeline of collectives",
                      "No per-rank timeline (timeline.jsonl) in this run."),
    "event-impact": ("Events: iteration time and goodput",
                     "No events: timeline in this run (events.jsonl), or no traffic."),
}


def time_zero(t: RunTables) -> tuple[float, str]:
    """The report's one time zero (host clock, s since the epoch) and what it is, in words:
    the ``events:`` timeline's t0 (``manifest["events"]["t0_unix_s"]``, what the events'
    ``at:`` times and the events table count from) when the run has one, else its first
    record or counter sample (:func:`_t0`). Every time axis and the events table and text
    use it (counter samples taken before it sit at negative times)."""
    if t.events_t0_unix_s is not None:
        return float(t.events_t0_unix_s), ("the start of the events: timeline (manifest "
                                           "events.t0_unix_s, what the events' times count "
                                           "from)")
    return _t0(t), "the run's first record or counter sample"


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


def faults(t: RunTables, m: dict[str, Any], t0: float) -> list[plots.Fault]:
    """The applied events of the ``events:`` timeline as marks (s since ``t0``), one per
    event, from metrics.json's ``events`` section (analysis.metrics.events)."""
    out: dict[int, plots.Fault] = {}
    base = t.events_t0_unix_s
    for r in (m.get("events") or {}).get("impact") or []:
        if base is None or r["start_s"] is None or r["event"] in out:
            continue
        end = None if r["end_s"] is None else base + r["end_s"] - t0
        out[r["event"]] = plots.Fault(base + r["start_s"] - t0, end,
                                      f"events[{r['event']}] {r['kind']}")
    return [out[k] for k in sorted(out)]


def _of(frame: pd.DataFrame, wi: int) -> pd.DataFrame:
    """The rows of workload index ``wi`` (a frame without the column: all are workload 0)."""
    if frame.empty:
        return frame
    if "workload_index" not in frame:
        return frame if wi == 0 else frame.iloc[0:0]
    return frame[frame["workload_index"].fillna(0).astype(int) == wi]


def run_busy_shares(t: RunTables) -> dict[tuple[str, str], float | None] | None:
    """Busy share of every shaped link direction of the plan, keyed by its sending (node,
    ifname), over the run's traffic time: the union of its transfers' [t_start, t_end]
    (flows.jsonl). Computed as the attribution computes a hop's busy share
    (analysis.metrics.bound.KernelView.hop: 8 x the interface's ``tx_bytes`` increase over the
    intervals / (their length x configured rate)), from counters/links.parquet only; None
    for a direction the counters do not cover. None when the run has no interface counter
    samples, no plan or no transfer."""
    links, flows = t.counters["links"], t.table("flows")
    if t.plan is None or links.empty or flows.empty or "t_end" not in flows:
        return None
    done = flows.dropna(subset=["t_start", "t_end"])
    if done.empty:
        return None
    view = KernelView({"links": links}, None, [], lambda f: [])
    spans = list(zip(done["t_start"].astype(float), done["t_end"].astype(float), strict=True))
    out: dict[tuple[str, str], float | None] = {}
    for lk in t.plan.links:
        for e in (lk.a, lk.b):
            rate = lk.egress(e.node).rate_bps
            if not rate:
                continue
            hop = view.hop((lk.name, e.node, e.ifname, rate), spans)
            out[(e.node, e.ifname)] = hop["busy_share"] if hop["bytes_source"] == "counters" \
                else None
    return out


def _lab_figure(t: RunTables, m: dict[str, Any]) -> str | None:
    """The lab picture's data (analysis.report.picture): busy share per direction over the
    run's traffic time (:func:`run_busy_shares`), the critical links of link-bound
    collectives (their highest busy share) and the hosts of the straggler ranks
    (:func:`_stragglers`, hosts from timeline.jsonl)."""
    if t.plan is None:
        return None
    busy = run_busy_shares(t)
    critical: dict[tuple[str, str], float | None] = {}
    for c in (m.get("attribution") or {}).get("per_collective") or []:
        lk = c.get("critical_link")
        if c.get("bound") != "link" or not lk:
            continue
        key, share = (lk["node"], lk["ifname"]), lk.get("busy_share")
        old = critical.get(key)
        critical[key] = share if old is None else max(old, share or 0.0)
    tl = t.table("timeline")
    hosts: set[str] = set()
    slow = _stragglers(t, m)
    if slow and not tl.empty and "node" in tl:
        wi = tl.get("workload_index", pd.Series(0, tl.index)).fillna(0).astype(int)
        for w, r, node in zip(wi, tl["rank"], tl["node"], strict=True):
            if (int(w), int(r)) in slow:
                hosts.add(str(node))
    return picture.lab_picture(t.plan, busy, critical, hosts)


def _impact_figure(t: RunTables, m: dict[str, Any], t0: float, marks: list[plots.Fault]
                   ) -> str | None:
    """The event-impact figure's data (plots.event_impact): per hit workload its windowed
    goodput and its iteration (or round) times, the events and their recovery thresholds."""
    rows = (m.get("events") or {}).get("impact") or []
    hit = sorted({r["workload_index"] for r in rows if r["workload_index"] is not None})
    if not marks or not hit:
        return None
    flows = t.table("flows")
    iters = iteration_times(t.table("timeline"), t.table("collectives"))
    rounds = t.table("rounds")
    names = {r["workload_index"]: r["workload"] or f"workload {r['workload_index']}"
             for r in rows if r["workload_index"] is not None}
    series, its, thresholds = [], [], []
    for wi in hit:
        mine, ii = _of(flows, wi), _of(iters, wi)
        if not ii.empty:
            its.append((names[wi], (ii["t_start"] - t0).to_numpy(),
                        ii["iteration_time_s"].to_numpy()))
        elif not rounds.empty and "round_time_s" in rounds:
            rr = _of(rounds, wi).groupby("round").agg(
                t_start=("t_start", "min"), t_end=("t_end", "max"))
            its.append((names[wi], (rr["t_start"] - t0).to_numpy(),
                        (rr["t_end"] - rr["t_start"]).to_numpy()))
        if mine.empty or "t_end" not in mine or not mine["t_end"].notna().any():
            continue
        w = next((r["window_s"] for r in rows if r["workload_index"] == wi and r["window_s"]),
                 DEFAULT_WINDOW_S)
        lo, hi = float(mine["t_start"].min()), float(mine["t_end"].max())
        grid = np.arange(lo, max(hi - w, lo) + 1e-12, w / 4)
        series.append((f"{names[wi]} (window {units.duration(w)})", grid - t0,
                       goodput(mine, grid, w)))
        for r in rows:
            if r["workload_index"] == wi and r["baseline_goodput_bps"]:
                x0 = t.events_t0_unix_s + r["start_s"] - t0
                # from the event to its recovery (at least one window), else to the end
                x1 = x0 + max(r["recovery_s"], w) if r["recovery_s"] is not None \
                    else hi - w - t0
                thresholds.append((x0, max(x1, x0 + w / 4),
                                   RECOVERY_FRACTION * r["baseline_goodput_bps"]))
    return plots.event_impact(series, its, marks, thresholds)


def _multi_point(per_collective: list[dict[str, Any]]) -> bool:
    """Whether some (workload, op) series of the CCT plot has two or more iterations."""
    seen: dict[tuple[Any, Any], set[Any]] = {}
    for c in per_collective:
        seen.setdefault((c["workload_index"], c["op"]), set()).add(c["iteration"])
    return any(len(v) > 1 for v in seen.values())


def figures(t: RunTables, m: dict[str, Any], flow_table: pd.DataFrame) -> dict[str, str | None]:
    """Figure id (keys of PLOTS) -> base64 PNG (plots.Png: with the event marks drawn) or
    None (no data, or too little for a plot: a CCT-per-iteration plot needs two iterations
    of one op; the event-impact plot needs an applied event that hit a workload)."""
    t0, _ = time_zero(t)
    ev = [(x - t0, label) for x, label in events(t)]
    marks = faults(t, m, t0)
    per = m["cct"]["per_collective"]
    return {"lab": _lab_figure(t, m),
            "fct-cdf": plots.fct_cdf(flow_table),
            "cct-per-iteration": plots.cct_per_iteration(per) if _multi_point(per) else None,
            "queue-occupancy": plots.queue_over_time(t.counters["qdisc"], t0, ev, marks),
            "link-throughput": plots.throughput_over_time(t.counters["links"], t0, ev, marks),
            "rank-timeline": plots.rank_timeline(t.table("timeline"), _stragglers(t, m), t0,
                                                 marks),
            "event-impact": _impact_figure(t, m, t0, marks)}


def _fmt(value: Any) -> str:
    """A value without a unit in its name for the report: floats with three significant
    digits (a ratio 1.04971 -> "1.05"; from 1000 on whole numbers, no exponent), None "—",
    containers as JSON."""
    if value is None or isinstance(value, jinja2.Undefined):
        return "—"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1e3 else f"{value:.3g}"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _locality(run_dir: Any) -> dict[str, Any] | None:
    """locality.json of the run (analysis.locality), None when it has none."""
    try:
        return json.loads((run_dir / "locality.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def scaled_note(factor: Any) -> str:
    """What a size column's header carries in a scaled run: ``" (÷10)"`` (sizes are the
    experiment's divided by the factor, topologies/scaling.py); ``""`` unscaled."""
    if not isinstance(factor, int | float) or factor == 1:
        return ""
    return f" (÷{factor:g})"


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
    env.filters["joules"] = units.joules
    env.filters["Bps"] = units.bytes_rate
    env.filters["spans"] = units.spans
    env.globals["by_key"] = units.by_key
    env.globals["dci_time"] = dci_time
    figs = figures(t, m, flow_table)
    absent = {k: why for k, (_, why) in PLOTS.items()}
    if t.plan is not None and len(t.plan.nodes) > picture.MAX_NODES:
        absent["lab"] = (f"No picture of the lab: its {len(t.plan.nodes)} nodes are more than "
                         f"{picture.MAX_NODES}, too many to draw legibly (the utilisation "
                         "table below lists every busy interface).")
    _, zero = time_zero(t)
    fid = m.get("fidelity") if isinstance(m.get("fidelity"), dict) else {}
    # runs recorded before fidelity.json had its coverage: derived from its entries
    coverage = fid.get("coverage") or check_coverage(fid.get("links") or [])
    html = env.get_template("report.html.j2").render(time_zero=zero,
        m=m, plots=[(k, title, figs[k], absent[k]) for k, (title, _) in PLOTS.items()],
        manifest=t.manifest, warnings=t.warnings, fidelity_words=coverage_words(coverage),
        size_note=scaled_note((m.get("scale") or {}).get("factor")),
        sections=workload_sections(t.manifest, m, t), locality=_locality(t.run_dir))
    path = t.run_dir / "report.html"
    write_text_atomic(path, html)
    return path
