"""Incast: loss at the bottleneck queue during synchronized bursts, and goodput versus the
number of senders.

Incast loss ratio of a burst (the measure of Chen et al., "Understanding TCP Incast Throughput
Collapse in Datacenter Networks", WREN 2009, and Alizadeh et al., DCTCP, SIGCOMM 2010,
section 2.3.1, taken at the switch queue):

    loss = queue drops at the bottleneck during the burst window / packets offered to it
    offered = packets dequeued + packets dropped + change in the backlog (packets)

from the cumulative counters of the bottleneck interface's root qdisc
(counters/qdisc.parquet; analysis.metrics.counters). The bottleneck is the link direction
shared by every flow of the burst with the lowest configured rate, the last such on ties (the
port into the receiver; models.paths). The window runs from the burst's planned start (or
its earliest actual start) to the last byte of its last flow at the receiver, widened to the
enclosing counter samples but never back into the previous burst's window at the same
bottleneck (a sampling interval is counted once). The run's ratio is packet-weighted: sum of
drops over sum of packets offered.

Goodput of a burst: bytes of its flows x 8 / window length (bit/s), the application
throughput at the receiver that collapses in incast (Chen et al. 2009, figure 1); the curve
is its mean per number of senders.

Without counter samples the ratio falls back to the whole workload's totals at that port from
the runner's ``counters_end.json`` (``source``: ``counters_end``): exact only when the
workload is nothing but the bursts.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.metrics.counters import root_qdiscs, snapshot_delta, window_delta
from analysis.metrics.stats import mean
from models.paths import PathError, paths
from models.plan import LabPlan

__all__ = ["bottleneck_of", "incast_loss", "incast_metrics"]


def bottleneck_of(plan: LabPlan, pairs: list[tuple[str, str]]) -> tuple[str, str] | None:
    """(node, ifname) of the bottleneck shared by the flows ``pairs`` = [(src_node, dst_ip)]:
    of the link directions on every flow's first path, the one with the lowest rate, the last
    on ties. None if the flows share none or a path is unknown."""
    try:
        routes = [paths(plan, s, d)[0] for s, d in set(pairs)]
    except (PathError, IndexError):
        return None
    if not routes:
        return None
    shared = [h for h in routes[0] if all(h in r for r in routes[1:])]
    if not shared:
        return None
    inf = float("inf")
    low = min(h.shaping.rate_bps or inf for h in shared)
    last = [h for h in shared if (h.shaping.rate_bps or inf) == low][-1]
    return last.node, last.ifname


def incast_loss(drops: float, dequeued: float, backlog_change: float) -> float | None:
    """drops / (dequeued + drops + backlog_change); None when nothing was offered."""
    offered = dequeued + drops + backlog_change
    return drops / offered if offered > 0 else None


def _bursts(bursts: pd.DataFrame, flows: pd.DataFrame, plan: LabPlan | None,
            qdisc: pd.DataFrame) -> list[dict[str, Any]]:
    roots = root_qdiscs(qdisc)
    # a run without burst flows (e.g. 0-byte bursts record none) still gets its bursts listed
    fl = flows[flows["burst_id"].notna()] if "burst_id" in flows else pd.DataFrame(
        columns=["burst_id", "workload_index", "t_end", "size_bytes"])
    ends: dict[str, float] = {}  # bottleneck -> end sample of its previous burst's window
    rows = list(bursts.itertuples(index=False))
    out: list[dict[str, Any]] = [{} for _ in rows]
    for i in sorted(range(len(rows)),  # in time order, so that windows never overlap
                    key=lambda i: min([rows[i].planned_start, *rows[i].actual_start])):
        b = rows[i]
        wi = getattr(b, "workload_index", 0)
        mine = fl[(fl["burst_id"] == b.burst_id) & (fl.get("workload_index", 0) == wi)]
        out[i] = _one_burst(b, wi, mine, plan, roots, ends)
    return out


def _one_burst(b: Any, wi: int, mine: pd.DataFrame, plan: LabPlan | None,
               roots: pd.DataFrame, ends: dict[str, float]) -> dict[str, Any]:
    t0 = min([b.planned_start, *b.actual_start])
    t1 = float(mine["t_end"].max()) if len(mine) and mine["t_end"].notna().any() else None
    row: dict[str, Any] = {
        "workload_index": int(wi), "burst_id": b.burst_id, "senders": len(b.sender_ranks),
        "t_start": t0, "t_end": t1, "bytes": int(mine["size_bytes"].sum()),
        "goodput_bps": None, "bottleneck": None, "drops": None, "offered": None, "loss": None}
    if t1 is not None and t1 > t0:
        row["goodput_bps"] = row["bytes"] * 8 / (t1 - t0)
    port = bottleneck_of(plan, list(zip(mine["src_node"], mine["dst_ip"], strict=True))) \
        if plan is not None and len(mine) else None
    row["bottleneck"] = f"{port[0]}:{port[1]}" if port else None
    if port is None or t1 is None or roots.empty:
        return row
    series = roots[(roots["node"] == port[0]) & (roots["ifname"] == port[1])].sort_values("t_s")
    d = window_delta(series, t0, t1, ("packets", "drops", "backlog_packets"),
                     not_before_s=ends.get(row["bottleneck"]))
    if d is not None:
        ends[row["bottleneck"]] = d["t_end_s"]
        row["drops"], row["offered"] = d["drops"], d["packets"] + d["drops"] + d[
            "backlog_packets"]
        row["loss"] = incast_loss(d["drops"], d["packets"], d["backlog_packets"])
    return row


def _fallback(rows: list[dict[str, Any]], snaps: list[dict[str, Any]]) -> tuple[float, float]:
    """Drops and packets offered at each workload's burst bottlenecks from the snapshots."""
    drops = offered = 0.0
    for wi, port in {(r["workload_index"], r["bottleneck"]) for r in rows if r["bottleneck"]}:
        if wi >= len(snaps):
            continue
        q = snapshot_delta(snaps, wi).get(tuple(port.split(":", 1)))
        if q:
            drops += q["drops"]
            offered += q["packets"] + q["drops"]
    return drops, offered


def incast_metrics(bursts: pd.DataFrame, flows: pd.DataFrame, plan: LabPlan | None,
                   qdisc: pd.DataFrame, snaps: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``incast`` section of metrics.json: ``bursts`` (count), ``loss_ratio``,
    ``drops``, ``offered`` (packets), ``source`` (``counters`` or ``counters_end`` or None),
    ``goodput_bps_mean``, ``per_burst`` rows and ``goodput_vs_senders``
    ([{senders, bursts, goodput_bps_mean}]). Formulas: module docstring."""
    if bursts.empty:
        return {"bursts": 0, "loss_ratio": None, "drops": None, "offered": None,
                "source": None, "goodput_bps_mean": None, "per_burst": [],
                "goodput_vs_senders": []}
    rows = _bursts(bursts, flows, plan, qdisc)
    measured = [r for r in rows if r["offered"] is not None]
    if measured:
        drops, offered, source = (sum(r["drops"] for r in measured),
                                  sum(r["offered"] for r in measured), "counters")
    else:
        (drops, offered), source = _fallback(rows, snaps), "counters_end"
    curve = [{"senders": int(n), "bursts": len(g), "goodput_bps_mean": mean(
        r["goodput_bps"] for r in g)} for n, g in _by_senders(rows).items()]
    return {"bursts": len(rows), "loss_ratio": drops / offered if offered else None,
            "drops": drops if offered else None, "offered": offered or None,
            "source": source if offered else None,
            "goodput_bps_mean": mean(r["goodput_bps"] for r in rows),
            "per_burst": rows, "goodput_vs_senders": curve}


def _by_senders(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: r["senders"]):
        out.setdefault(r["senders"], []).append(r)
    return out
