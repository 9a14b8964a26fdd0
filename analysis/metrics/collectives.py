"""Collective completion time (CCT), algbw, busbw, and iteration time.

The records carry CCT, algbw and busbw per collective instance (CollectiveRecord.build:
``cct_s`` = max over ranks of the end - min over ranks of the start; ``algbw_Bps`` =
size_bytes / cct_s; ``busbw_Bps`` = algbw_Bps x busbw_factor, nccl-tests
doc/PERFORMANCE.md). Here they are aggregated, not recomputed, so the numbers in metrics.json
are the records' numbers.

Iteration time: for each workload and iteration, the latest end minus the earliest start of
every rank's ops in that iteration (timeline.jsonl, compute and communication), i.e. the
wall-clock span of the iteration as in nccl-tests' and AICB's per-iteration timing; from the
collectives' per-rank times when the run has no timeline.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.metrics.stats import distribution, mean

__all__ = ["cct_metrics", "iteration_times"]


def _workload(frame: pd.DataFrame) -> pd.Series:
    if "workload_index" in frame:
        return frame["workload_index"].fillna(0).astype(int)
    return pd.Series(0, index=frame.index)


def iteration_times(timeline: pd.DataFrame, collectives: pd.DataFrame) -> pd.DataFrame:
    """One row per (workload_index, iteration): ``t_start``, ``t_end`` (host clock, s),
    ``iteration_time_s`` = t_end - t_start. Empty frame when neither input has rows."""
    if not timeline.empty:
        frame = timeline.assign(workload_index=_workload(timeline))
    elif not collectives.empty:
        frame = collectives.assign(workload_index=_workload(collectives),
                                   t_start=collectives["rank_t_start"].map(min),
                                   t_end=collectives["rank_t_end"].map(max))
    else:
        return pd.DataFrame(columns=["workload_index", "iteration", "t_start", "t_end",
                                     "iteration_time_s"])
    grouped = frame.groupby(["workload_index", "iteration"], as_index=False).agg(
        t_start=("t_start", "min"), t_end=("t_end", "max"))
    return grouped.assign(iteration_time_s=grouped["t_end"] - grouped["t_start"])


def cct_metrics(collectives: pd.DataFrame, timeline: pd.DataFrame) -> dict[str, Any]:
    """The ``cct`` section of metrics.json: ``collectives`` (count), distributions of
    ``cct_s`` (s), ``algbw_Bps`` and ``busbw_Bps`` (bytes/s), ``by_op`` (per op name: count,
    CCT mean, busbw mean), ``per_collective`` (id, workload, iteration, op, size, cct_s,
    busbw_Bps; for the report's CCT-per-iteration plot), ``iterations`` (per workload and
    iteration: iteration_time_s) and ``iteration_time_s`` (distribution)."""
    iters = iteration_times(timeline, collectives)
    out: dict[str, Any] = {
        "collectives": int(len(collectives)),
        "iterations": iters[["workload_index", "iteration", "iteration_time_s"]].to_dict(
            "records"),
        "iteration_time_s": distribution(iters["iteration_time_s"])}
    if collectives.empty:
        return {**out, "cct_s": distribution([]), "algbw_Bps": distribution([]),
                "busbw_Bps": distribution([]), "by_op": {}, "per_collective": []}
    c = collectives.assign(workload_index=_workload(collectives))
    out["cct_s"] = distribution(c["cct_s"])
    out["algbw_Bps"] = distribution(c["algbw_Bps"])
    out["busbw_Bps"] = distribution(c["busbw_Bps"])
    out["by_op"] = {str(op): {"count": int(len(g)), "cct_s_mean": mean(g["cct_s"]),
                              "busbw_Bps_mean": mean(g["busbw_Bps"])}
                    for op, g in c.groupby("op")}
    cols = ["collective_id", "workload_index", "iteration", "op", "size_bytes", "cct_s",
            "busbw_Bps"]
    out["per_collective"] = c[cols].to_dict("records")
    return out
