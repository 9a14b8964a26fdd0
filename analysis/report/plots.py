"""The report's figures: matplotlib (Agg backend, no display) rendered to base64 PNG.

Each function returns the PNG as a base64 string, or None when the run has no data for it
(the report then says so). Times on the x axes are seconds since the report's time zero
(the ``t0`` the callers pass; analysis.report.time_zero: the same zero as the events table).
Events of the experiment's ``events:`` timeline (:class:`Fault`) are marked on every time
axis: a shaded span over the event's window, a dashed line where it has no length, each
labelled with its kind; the PNG (a :class:`Png`) lists the marks drawn inside the axes'
range in ``marks`` as ``"<label> at <x> s"`` (x: where the mark's left edge is drawn, in
seconds on the axis), and so does its ``Description`` text chunk.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.metrics.counters import root_qdiscs  # noqa: E402
from analysis.metrics.links import link_rates  # noqa: E402

__all__ = ["fct_cdf", "cct_per_iteration", "queue_over_time", "throughput_over_time",
           "rank_timeline", "event_impact", "MAX_SERIES", "Fault", "Png"]

MAX_SERIES = 8  # lines per plot; the busiest are kept
XLABEL, XLABEL_MS = "time since t0 (s)", "time since t0 (ms)"  # t0: the report names it
KIND_COLOURS = {"compute": "#9ecae1", "collective": "#e6550d", "send_recv": "#31a354",
                "burst": "#756bb1"}


FAULT_COLOURS = ("#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")


@dataclass(frozen=True, slots=True)
class Fault:
    """One event of ``events:`` to mark: ``start_s`` and ``end_s`` (s since the plot's t0;
    ``end_s`` None: until the end of the run), ``label`` (its kind and index, e.g.
    ``events[0] link_down``)."""

    start_s: float
    end_s: float | None
    label: str


class Png(str):
    """A base64 PNG; ``marks``: the labels of the event marks drawn within its axes."""

    marks: tuple[str, ...] = ()


def _marks_drawn(fig: Any) -> tuple[str, ...]:
    """``"LABEL at X s"`` of the event artists (gid ``event:SCALE:LABEL``) lying within their
    axes' x range; X: the artist's left edge on the axis divided by its SCALE (seconds)."""
    out: dict[str, float] = {}
    for ax in fig.axes:
        lo, hi = sorted(ax.get_xlim())
        for art in [*ax.lines, *ax.patches]:
            gid = art.get_gid() or ""
            if not gid.startswith("event:"):
                continue
            if hasattr(art, "get_xydata"):  # a line
                xs = np.asarray(art.get_xydata(), dtype=float)[:, 0]
            elif hasattr(art, "get_bbox"):  # axvspan's Rectangle (matplotlib >= 3.9)
                xs = np.array([art.get_bbox().x0, art.get_bbox().x1])
            else:  # axvspan's Polygon (older matplotlib)
                xs = np.asarray(art.get_xy(), dtype=float)[:, 0]
            if xs.size and xs.max() >= lo and xs.min() <= hi:
                scale, label = gid.removeprefix("event:").split(":", 1)
                out.setdefault(label, float(xs.min()) / float(scale))
    return tuple(f"{label} at {x:.3f} s" for label, x in out.items())


def _png(fig: Any) -> Png:
    buf = io.BytesIO()
    fig.tight_layout()
    marks = _marks_drawn(fig)
    fig.savefig(buf, format="png", dpi=90, metadata={
        "Description": "events marked: " + ("; ".join(marks) if marks else "none")})
    plt.close(fig)
    out = Png(base64.b64encode(buf.getvalue()).decode("ascii"))
    out.marks = marks
    return out


def mark_faults(ax: Any, faults: list[Fault] | None, scale: float = 1.0,
                legend: bool = True) -> None:
    """Mark ``faults`` on ``ax``'s x axis (times x ``scale``, e.g. 1e3 for ms): a span over
    each window (to the axis' right end when open), a dashed line for one without length,
    labelled with the event's kind at the top of the axes."""
    if not faults:
        return
    right = ax.get_xlim()[1]
    for i, f in enumerate(faults):
        colour = FAULT_COLOURS[i % len(FAULT_COLOURS)]
        x0 = f.start_s * scale
        x1 = right if f.end_s is None else f.end_s * scale
        label = f.label if legend else None
        gid = f"event:{scale:g}:{f.label}"
        if x1 - x0 > 0.004 * max(abs(right), 1e-9):
            ax.axvspan(x0, max(x1, x0), color=colour, alpha=0.15, lw=0, label=label,
                       gid=gid)
            ax.axvline(x0, color=colour, lw=0.9, gid=gid)
        else:
            ax.axvline(x0, color=colour, lw=0.9, ls="--", label=label, gid=gid)
        ax.text(x0, 0.98, " " + f.label.split(" ", 1)[-1], transform=ax.get_xaxis_transform(),
                rotation=90, va="top", ha="left", fontsize=7, color=colour)


def fct_cdf(flows: pd.DataFrame) -> str | None:
    """Empirical CDF of FCT (ms) over completed flows, one line per workload."""
    if flows.empty or "fct_s" not in flows or not flows["fct_s"].notna().any():
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    groups = flows.groupby("workload") if "workload" in flows else [("flows", flows)]
    for name, g in groups:
        x = np.sort(g["fct_s"].dropna().to_numpy() * 1e3)
        ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=str(name))
    ax.set(xlabel="flow completion time (ms)", ylabel="fraction of flows", ylim=(0, 1.02),
           title="FCT CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def cct_per_iteration(per_collective: list[dict[str, Any]]) -> str | None:
    """CCT (ms) of each collective against its iteration, one series per workload and op."""
    if not per_collective:
        return None
    frame = pd.DataFrame(per_collective)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for (wi, op), g in frame.groupby(["workload_index", "op"]):
        ax.plot(g["iteration"], g["cct_s"] * 1e3, "o-", label=f"workload {wi}: {op}")
    ax.set(xlabel="iteration", ylabel="CCT (ms)", title="CCT per iteration")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def _mark(ax: Any, events: list[tuple[float, str]] | None) -> None:
    """Dashed vertical lines at ``events`` ((s since start, label)); labels once each."""
    seen: set[str] = set()
    for x, label in events or []:
        ax.axvline(x, color="#777", lw=0.7, ls="--", label=None if label in seen else label)
        seen.add(label)


def _busiest(frame: pd.DataFrame, value: str) -> list[tuple[str, str]]:
    totals = frame.groupby(["node", "ifname"])[value].max().sort_values(ascending=False)
    return [k for k, v in totals.items() if v > 0][:MAX_SERIES]


def queue_over_time(qdisc: pd.DataFrame, t0: float,
                    events: list[tuple[float, str]] | None = None,
                    faults: list[Fault] | None = None) -> str | None:
    """Backlog (KB) of the busiest root queues over time, and their cumulative drops;
    ``events`` (s since start, label) marked as dashed lines, ``faults`` as
    :func:`mark_faults` does."""
    roots = root_qdiscs(qdisc)
    if roots.empty:
        return None
    roots = roots.assign(score=roots["backlog_bytes"] + roots["drops"])
    keys = _busiest(roots, "score") or _busiest(roots.assign(score=1), "score")
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for node, ifname in keys:
        g = roots[(roots["node"] == node) & (roots["ifname"] == ifname)].sort_values("t_s")
        t = g["t_s"] - t0
        ax.plot(t, g["backlog_bytes"] / 1e3, label=f"{node}:{ifname}")
        ax2.plot(t, g["drops"] - g["drops"].iloc[0], label=f"{node}:{ifname}")
    ax.set(ylabel="backlog (KB)", title="queue occupancy and drops")
    ax2.set(xlabel=XLABEL, ylabel="drops (cumulative)")
    for a in (ax, ax2):
        a.grid(alpha=0.3)
        _mark(a, events)
        mark_faults(a, faults, legend=a is ax)
    ax.legend(fontsize=7)
    return _png(fig)


def throughput_over_time(links: pd.DataFrame, t0: float,
                         events: list[tuple[float, str]] | None = None,
                         faults: list[Fault] | None = None) -> str | None:
    """Transmit rate (Mbit/s) per interface over time, the busiest MAX_SERIES; ``events``
    marked as dashed lines, ``faults`` as :func:`mark_faults` does."""
    rates = link_rates(links)
    if rates.empty or not (rates["rate_bps"] > 0).any():
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for node, ifname in _busiest(rates, "rate_bps"):
        g = rates[(rates["node"] == node) & (rates["ifname"] == ifname)]
        ax.plot(g["t_s"] - t0, g["rate_bps"] / 1e6, label=f"{node}:{ifname}")
    ax.set(xlabel=XLABEL, ylabel="tx rate (Mbit/s)",
           title="throughput per link")
    ax.grid(alpha=0.3)
    _mark(ax, events)
    mark_faults(ax, faults)
    ax.legend(fontsize=7)
    return _png(fig)


def rank_timeline(timeline: pd.DataFrame, stragglers: set[tuple[int, int]], t0: float,
                  faults: list[Fault] | None = None) -> str | None:
    """One row per (workload, rank): its ops as bars (compute, collective, ...) over time;
    the rows of ``stragglers`` ((workload_index, rank) pairs) are labelled as such;
    ``faults`` marked as :func:`mark_faults` does (the axis is in ms)."""
    if timeline.empty:
        return None
    tl = timeline.assign(workload_index=timeline.get("workload_index", 0))
    rows = sorted({(int(w), int(r)) for w, r in zip(tl["workload_index"], tl["rank"],
                                                     strict=True)})
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.4))
    for y, (w, r) in enumerate(rows):
        g = tl[(tl["workload_index"] == w) & (tl["rank"] == r)]
        for kind, k in g.groupby("kind"):
            spans = list(zip((k["t_start"] - t0) * 1e3, (k["t_end"] - k["t_start"]) * 1e3,
                             strict=True))
            ax.broken_barh(spans, (y - 0.4, 0.8), color=KIND_COLOURS.get(kind, "#999999"))
    labels = [f"w{w} rank {r}" + (" (straggler)" if (w, r) in stragglers else "")
              for w, r in rows]
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set(xlabel=XLABEL_MS, title="per-rank timeline")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in KIND_COLOURS.values()]
    ax.legend(handles, list(KIND_COLOURS), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.invert_yaxis()
    mark_faults(ax, faults, scale=1e3, legend=False)
    return _png(fig)


def event_impact(series: list[tuple[str, np.ndarray, np.ndarray]],
                 iterations: list[tuple[str, np.ndarray, np.ndarray]],
                 faults: list[Fault],
                 thresholds: list[tuple[float, float, float]]) -> str | None:
    """What the events did: goodput (Mbit/s) over time per workload (``series``: name, times
    in s since start, bit/s), above it the iteration (or round) time (ms) at each
    iteration's start (``iterations``: name, start times, seconds), the ``faults`` marked on
    both, and each event's recovery threshold (``thresholds``: from s, to s, bit/s) as a
    dotted line. None without series and iterations."""
    if not series and not iterations:
        return None
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 5.2), sharex=True)
    for name, t, secs in iterations:
        ax.plot(t, secs * 1e3, "o-", ms=3, lw=0.8, label=name)
    ax.set(ylabel="iteration time (ms)", title="events: iteration time and goodput")
    for name, t, bps in series:
        ax2.plot(t, bps / 1e6, lw=0.9, label=name)
    for x0, x1, bps in thresholds:
        ax2.plot([x0, x1], [bps / 1e6] * 2, ":", color="#333", lw=1.2)
    ax2.set(xlabel=XLABEL, ylabel="goodput (Mbit/s)")
    for a in (ax, ax2):
        a.grid(alpha=0.3)
        mark_faults(a, faults, legend=a is ax)
    ax.legend(fontsize=7, loc="lower left")
    return _png(fig)
