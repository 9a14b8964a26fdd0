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
port into the receiver; models.paths). The burst runs from its planned start (or its
earliest actual start) to the last byte of its last flow at the receiver (its ``finish_s``).

Counts are exact or absent, never interpolated: they are the difference of two counter
samples read at the burst's boundaries, each in an idle time of its port: the last sample
after the previous burst there ended and before this one began, and the first sample after
this one ended and before the next began. Between those two reads only this burst's packets
crossed the port (its first had not left its sender, its last byte had reached the
receiver). Where the sampler took no sample
in such an idle time (it stalled, or bursts follow each other closer than its interval) the
bursts on either side are counted as one: their ``drops``, ``offered`` and ``loss`` are None
and ``counts`` says why and gives their sum. Other traffic through the same port in the
window is counted too. The run's ratio is packet-weighted: sum of drops over sum of packets
offered, over every group of bursts between two reads (exact totals even where single
bursts are not; traffic in the idle times between bursts is left out).

Goodput of a burst: bytes of its flows x 8 / ``finish_s`` (bit/s), the application
throughput at the receiver that collapses in incast (Chen et al. 2009, figure 1); the curve
is its mean per number of senders. The worst burst is the one that took longest (the
collapsed one, Vasudevan et al., SIGCOMM 2009): ``worst_burst``, beside the means.

Without counter samples the ratio falls back to the whole workload's totals at that port from
the runner's ``counters_end.json`` (``source``: ``counters_end``): exact only when the
workload is nothing but the bursts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.metrics.counters import root_qdiscs, snapshot_delta
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
            qdisc: pd.DataFrame, groups: list[dict[str, float]]) -> list[dict[str, Any]]:
    """The per-burst rows; ``groups`` receives the counts of each run of bursts between two
    boundary reads (one burst where the sampler read every idle time; several as a whole
    where it missed one between them), whose sums are the run's exact totals."""
    roots = root_qdiscs(qdisc)
    # a run without burst flows (e.g. 0-byte bursts record none) still gets its bursts listed
    fl = flows[flows["burst_id"].notna()] if "burst_id" in flows else pd.DataFrame(
        columns=["burst_id", "workload_index", "t_end", "size_bytes"])
    rows = list(bursts.itertuples(index=False))
    out: list[dict[str, Any]] = []
    for b in rows:
        wi = getattr(b, "workload_index", 0)
        mine = fl[(fl["burst_id"] == b.burst_id) & (fl.get("workload_index", 0) == wi)]
        out.append(_one_burst(b, wi, mine, plan))
    by_port: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(out, key=lambda r: r["t_start"]):
        if r["bottleneck"] is not None and r["t_end"] is not None:
            by_port.setdefault(r["bottleneck"], []).append(r)
    for port, seq in by_port.items():
        node, ifname = port.split(":", 1)
        series = roots[(roots["node"] == node) & (roots["ifname"] == ifname)] \
            .sort_values("t_s") if not roots.empty else roots
        if not series.empty:
            groups += _count_port(seq, series)
    return out


def _one_burst(b: Any, wi: int, mine: pd.DataFrame, plan: LabPlan | None) -> dict[str, Any]:
    t0 = min([b.planned_start, *b.actual_start])
    t1 = float(mine["t_end"].max()) if len(mine) and mine["t_end"].notna().any() else None
    if len(mine) and mine["t_end"].isna().any():
        t1 = None  # a flow never finished: the burst has no end
    row: dict[str, Any] = {
        "workload_index": int(wi), "burst_id": b.burst_id, "senders": len(b.sender_ranks),
        "t_start": t0, "t_end": t1, "finish_s": None, "bytes": int(mine["size_bytes"].sum()),
        "goodput_bps": None, "bottleneck": None, "drops": None, "offered": None, "loss": None,
        "counts": "unknown: no counter samples"}
    if t1 is not None and t1 > t0:
        row["finish_s"] = t1 - t0
        row["goodput_bps"] = row["bytes"] * 8 / (t1 - t0)
    elif t1 is None:
        row["counts"] = "unknown: a flow of the burst did not finish"
    port = bottleneck_of(plan, list(zip(mine["src_node"], mine["dst_ip"], strict=True))) \
        if plan is not None and len(mine) else None
    row["bottleneck"] = f"{port[0]}:{port[1]}" if port else None
    if port is None and t1 is not None:
        row["counts"] = "unknown: the burst's flows share no shaped port"
    return row


def _boundaries(seq: list[dict[str, Any]], t: np.ndarray
                ) -> list[tuple[int, int] | None]:
    """Per idle time around the bursts ``seq`` (time order, one port): before the first,
    between each two, after the last, the indexes of the first and the last sample in it
    (the read that ends the burst before it and the one that begins the burst after it),
    None where the sampler took none."""
    ends = np.maximum.accumulate([r["t_end"] for r in seq])
    out: list[tuple[int, int] | None] = []
    for k in range(len(seq) + 1):
        lo = ends[k - 1] if k else -np.inf
        hi = seq[k]["t_start"] if k < len(seq) else np.inf
        idx = np.flatnonzero((t >= lo) & (t <= hi))
        out.append((int(idx[0]), int(idx[-1])) if len(idx) else None)
    return out


def _count_port(seq: list[dict[str, Any]], series: pd.DataFrame) -> list[dict[str, float]]:
    """Fill the rows ``seq`` (one port, time order) from its samples ``series`` read at
    the boundaries (module docstring); returns the counts of each group of bursts between
    two boundary reads."""
    reads = _boundaries(seq, series["t_s"].to_numpy(dtype=float))
    groups, first = [], 0
    for k in range(1, len(seq) + 1):
        if reads[k] is None and k < len(seq):
            continue  # no read between burst k-1 and k: they are counted as one
        members, before, after = seq[first:k], reads[first], reads[k]
        first = k
        if before is None or after is None:
            for r in members:
                r["counts"] = ("unknown: no counter sample in the idle time "
                               f"{'before' if before is None else 'after'} the burst")
            continue
        x, y = series.iloc[before[1]], series.iloc[after[0]]
        d = {c: float(y[c] - x[c]) for c in ("packets", "drops", "backlog_packets")}
        offered = d["packets"] + d["drops"] + d["backlog_packets"]
        groups.append({"drops": d["drops"], "offered": offered})
        if len(members) == 1:
            members[0].update(drops=d["drops"], offered=offered, counts="exact",
                              loss=incast_loss(d["drops"], d["packets"], d["backlog_packets"]),
                              counts_window_s=[float(x["t_s"]), float(y["t_s"])])
            continue
        ids = f"{members[0]['burst_id']}..{members[-1]['burst_id']}"
        for r in members:
            r["counts"] = (f"unknown: the sampler read no idle time between bursts {ids} "
                           f"(together: {d['drops']:g} drops of {offered:g} offered)")
    return groups


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
    ``bursts_counted`` (bursts with exact counts), ``goodput_bps_mean``, ``finish_s_mean``,
    ``worst_burst`` (the row of the burst that took longest, None without finished ones),
    ``per_burst`` rows (workload_index, burst_id, senders, t_start, t_end, finish_s, bytes,
    goodput_bps, bottleneck, drops, offered, loss, ``counts``: ``"exact"`` or why
    unknown) and ``goodput_vs_senders`` ([{senders, bursts, goodput_bps_mean}]). Formulas:
    module docstring."""
    if bursts.empty:
        return {"bursts": 0, "loss_ratio": None, "drops": None, "offered": None,
                "source": None, "bursts_counted": 0, "goodput_bps_mean": None,
                "finish_s_mean": None, "worst_burst": None, "per_burst": [],
                "goodput_vs_senders": []}
    groups: list[dict[str, float]] = []
    rows = _bursts(bursts, flows, plan, qdisc, groups)
    measured = [r for r in rows if r["offered"] is not None]
    if groups:
        drops, offered, source = (sum(g["drops"] for g in groups),
                                  sum(g["offered"] for g in groups), "counters")
    else:
        (drops, offered), source = _fallback(rows, snaps), "counters_end"
    curve = [{"senders": int(n), "bursts": len(g), "goodput_bps_mean": mean(
        r["goodput_bps"] for r in g)} for n, g in _by_senders(rows).items()]
    finished = [r for r in rows if r["finish_s"] is not None]
    worst = max(finished, key=lambda r: r["finish_s"], default=None)
    return {"bursts": len(rows), "loss_ratio": drops / offered if offered else None,
            "drops": drops if offered else None, "offered": offered or None,
            "source": source if offered else None, "bursts_counted": len(measured),
            "goodput_bps_mean": mean(r["goodput_bps"] for r in rows),
            "finish_s_mean": mean(r["finish_s"] for r in finished),
            "worst_burst": None if worst is None else dict(worst),
            "per_burst": rows, "goodput_vs_senders": curve}


def _by_senders(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: r["senders"]):
        out.setdefault(r["senders"], []).append(r)
    return out
