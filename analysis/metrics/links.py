"""Link utilization, burstiness and queue occupancy from the counter samples.

From ``counters/links.parquet`` (cumulative ``tx_bytes`` per interface, columns in
models/counter_columns.py), per sampling interval i:
rate_i = 8 * (tx_bytes_i - tx_bytes_{i-1}) / (t_i - t_{i-1}) (bit/s), where t_i is the time
the sampler read row i's counters (the midpoint of that link dump, never a nominal interval
or a stamp shared with other dumps) and the interval's timing uncertainty is
``t_err_s`` = t_err_i + t_err_{i-1} (half of each dump's duration; 0 for tables without the
column), i.e. rate_i is exact to within a relative t_err_s / dt_s. Per interface:

* utilization = mean rate over the sampled period / the configured egress ``rate_bps``
  (plan.json; None for an unshaped interface);
* peak rate = the highest rate over windows of at least PEAK_WINDOW_INTERVALS sampling
  intervals (bytes over the sampler's own timestamps at both ends): a single 10 ms interval
  whose timestamps were taken a few ms off the counter read (a loaded host) showed up to 4.8x
  the line rate, which no shaper sends; over 5 intervals that error shrinks 5-fold.
  ``peak_bps_interval`` keeps the single-interval maximum; ``peak_above_rate`` is True when
  the peak still exceeds the configured rate by more than PEAK_TOLERANCE (then the number is
  a measurement artefact or the shaper is off: the fidelity rate check says which), and
  ``peak_interval_above_rate`` likewise for the single-interval maximum. So no peak above
  rate x (1 + PEAK_TOLERANCE) is ever reported unflagged. PEAK_TOLERANCE (10%) covers what
  an HTB class may send above its rate over a window of 5 sampling intervals (50 ms at the
  default 10 ms): its bucket (HTB_BURST_S = 1 ms of the rate, testbed/tc/qdiscs/htb.py) and the
  skb it dequeues into debt (TSO autosizing keeps it near 1 ms of the pacing rate), about
  4% of the window, plus the sampler's timing error ``rate_err_max`` (the largest
  t_err_s / dt_s of the link's intervals, reported per link);
* peak-to-mean ratio = peak rate / mean rate (burstiness; 1 for a constant rate);
* ON/OFF periods: an interval is ON when its rate exceeds ON_FRACTION of the line rate (any
  byte when unshaped); ON and OFF periods are maximal runs of such intervals, as in Benson,
  Akella and Maltz, "Network Traffic Characteristics of Data Centers in the Wild", IMC 2010,
  section 5 (ON/OFF traffic at the edge). Their resolution is the sampling interval.

Queue occupancy: ``backlog_bytes``/``backlog_packets`` of each interface's root qdisc over
time (counters/qdisc.parquet): sample mean, p99 and max (the sampler samples at a fixed
interval, so the sample mean approximates the time average). Queue drops: each root qdisc's
last cumulative ``drops`` minus its first; without samples, the sum over root queues in the
last ``counters_end.json`` snapshot (the lab starts with zero counters).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.metrics.counters import root_qdiscs, snapshot_qdiscs
from analysis.metrics.stats import distribution
from models.plan import LabPlan

__all__ = ["ON_FRACTION", "PEAK_WINDOW_INTERVALS", "PEAK_TOLERANCE", "windowed_peak_bps",
           "link_rates",
           "on_off_periods", "utilization_metrics",
           "queue_metrics", "egress_rate_bps"]

ON_FRACTION = 0.01
PEAK_WINDOW_INTERVALS = 5
PEAK_TOLERANCE = 0.10  # the fidelity rate check's tolerance (analysis/fidelity/checks.py)


def windowed_peak_bps(t_end_s: np.ndarray, dt_s: np.ndarray, rate_bps: np.ndarray,
                      min_window_s: float) -> float:
    """The highest mean rate (bit/s) over windows of consecutive intervals at least
    ``min_window_s`` long (the whole span if shorter); inputs (n,) float64: interval end
    times (s), lengths (s), rates (bit/s)."""
    start = t_end_s - dt_s
    times = np.concatenate([[start[0]], t_end_s])
    bits = np.concatenate([[0.0], np.cumsum(rate_bps * dt_s)])
    if times[-1] - times[0] <= min_window_s:
        span = times[-1] - times[0]
        return float(bits[-1] / span) if span > 0 else 0.0
    j = np.searchsorted(times, times + min_window_s, side="left")
    ok = j < times.size
    i = np.nonzero(ok)[0]
    return float(np.max((bits[j[ok]] - bits[i]) / (times[j[ok]] - times[i])))


def egress_rate_bps(plan: LabPlan | None, node: str, ifname: str) -> int | None:
    """Configured rate (bit/s) of what ``node`` sends on ``ifname``; None if unshaped or
    unknown."""
    if plan is None:
        return None
    for lk in plan.links:
        for ep in (lk.a, lk.b):
            if ep.node == node and ep.ifname == ifname:
                return lk.egress(node).rate_bps
    return None


def link_rates(links: pd.DataFrame) -> pd.DataFrame:
    """Per interface and sampling interval: ``node``, ``ifname``, ``t_s`` (end of the
    interval), ``dt_s``, ``rate_bps`` (tx) = 8 x delta(tx_bytes) / delta(t_s) between
    consecutive rows (the sampler's read times), ``t_err_s`` (the timing uncertainty of the
    interval: the two rows' t_err_s summed; 0 without that column); empty if no samples."""
    cols = ["node", "ifname", "t_s", "dt_s", "rate_bps", "t_err_s"]
    if links.empty:
        return pd.DataFrame(columns=cols)
    parts = []
    for (node, ifname), g in links.sort_values("t_s").groupby(["node", "ifname"]):
        dt = g["t_s"].diff().to_numpy()[1:]
        db = g["tx_bytes"].diff().to_numpy()[1:]
        err = g["t_err_s"].to_numpy(float) if "t_err_s" in g else np.zeros(len(g))
        err = err[1:] + err[:-1]
        ok = dt > 0
        parts.append(pd.DataFrame({"node": node, "ifname": ifname,
                                   "t_s": g["t_s"].to_numpy()[1:][ok], "dt_s": dt[ok],
                                   "rate_bps": 8 * db[ok] / dt[ok], "t_err_s": err[ok]}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


def on_off_periods(on: np.ndarray, dt_s: np.ndarray) -> tuple[list[float], list[float]]:
    """Durations (s) of the maximal runs of ON and of OFF intervals; ``on`` (n,) bool,
    ``dt_s`` (n,) interval lengths in seconds."""
    runs: tuple[list[float], list[float]] = ([], [])
    for i, (flag, dt) in enumerate(zip(on, dt_s, strict=True)):
        bucket = runs[0] if flag else runs[1]
        if i and on[i - 1] == flag:
            bucket[-1] += float(dt)
        else:
            bucket.append(float(dt))
    return runs


def _one_link(g: pd.DataFrame, cap: int | None) -> dict[str, Any]:
    span = float(g["dt_s"].sum())
    mean_bps = float((g["rate_bps"] * g["dt_s"]).sum() / span) if span > 0 else 0.0
    threshold = ON_FRACTION * cap if cap else 0.0
    on, off = on_off_periods((g["rate_bps"] > threshold).to_numpy(), g["dt_s"].to_numpy())
    g = g.sort_values("t_s")
    window = PEAK_WINDOW_INTERVALS * float(g["dt_s"].median())
    peak = windowed_peak_bps(g["t_s"].to_numpy(float), g["dt_s"].to_numpy(float),
                             g["rate_bps"].to_numpy(float), window)
    interval_peak = float(g["rate_bps"].max())
    limit = cap * (1 + PEAK_TOLERANCE) if cap else None
    return {"rate_bps_configured": cap, "mean_bps": mean_bps, "peak_bps": peak,
            "peak_bps_interval": interval_peak, "peak_window_s": window,
            "peak_above_rate": bool(limit and peak > limit),
            "peak_interval_above_rate": bool(limit and interval_peak > limit),
            "peak_tolerance": PEAK_TOLERANCE,
            "rate_err_max": float((g["t_err_s"] / g["dt_s"]).max()),
            "utilization": mean_bps / cap if cap else None,
            "peak_to_mean": peak / mean_bps if mean_bps > 0 else None,
            "on_periods": len(on), "on_s_mean": float(np.mean(on)) if on else None,
            "off_s_mean": float(np.mean(off)) if off else None}


def utilization_metrics(links: pd.DataFrame, plan: LabPlan | None) -> dict[str, Any]:
    """The ``utilization`` section: ``source`` (``counters`` or None), ``links`` (per
    ``node:ifname`` that sent anything: configured rate, mean and peak bit/s, utilization,
    peak-to-mean, ON period count and mean ON/OFF durations), busiest first."""
    rates = link_rates(links)
    per: dict[str, dict[str, Any]] = {}
    for (node, ifname), g in rates.groupby(["node", "ifname"]):
        if g["rate_bps"].sum() > 0:
            per[f"{node}:{ifname}"] = _one_link(g, egress_rate_bps(plan, node, ifname))
    order = sorted(per, key=lambda k: (-(per[k]["utilization"] or -1.0), -per[k]["mean_bps"]))
    return {"source": "counters" if not links.empty else None,
            "on_fraction_of_line_rate": ON_FRACTION, "links": {k: per[k] for k in order}}


def queue_metrics(qdisc: pd.DataFrame, snaps: list[dict[str, Any]]) -> dict[str, Any]:
    """The queue part of ``utilization``: ``queue_drops`` (total, packets), ``drops_source``,
    and ``queues`` per ``node:ifname`` with drops or backlog: drops, backlog_bytes and
    backlog_packets distributions (samples)."""
    roots = root_qdiscs(qdisc)
    if roots.empty:
        drops = [q.get("drops", 0) for _n, _i, q in snapshot_qdiscs(snaps[-1])] if snaps \
            else []
        return {"queue_drops": float(sum(drops)) if snaps else None,
                "drops_source": "counters_end" if snaps else None, "queues": {}}
    queues, total = {}, 0.0
    for (node, ifname, _h), g in roots.sort_values("t_s").groupby(["node", "ifname", "handle"]):
        d = float(g["drops"].iloc[-1] - g["drops"].iloc[0])
        total += d
        if d > 0 or g["backlog_bytes"].max() > 0:
            queues[f"{node}:{ifname}"] = {
                "drops": d, "backlog_bytes": distribution(g["backlog_bytes"]),
                "backlog_packets": distribution(g["backlog_packets"])}
    return {"queue_drops": total, "drops_source": "counters", "queues": queues}
