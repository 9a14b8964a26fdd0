"""Collective completion time (CCT), algbw, busbw, and iteration time.

The records carry CCT, algbw and busbw per collective instance (CollectiveRecord.build:
``cct_s`` = max over ranks of the end - min over ranks of the start; ``algbw_Bps`` =
size_bytes / cct_s; ``busbw_Bps`` = algbw_Bps x busbw_factor, nccl-tests
doc/PERFORMANCE.md). Here they are aggregated, not recomputed, so the numbers in metrics.json
are the records' numbers.

Iteration time: for each workload and iteration, the time during which at least one rank had
an op running (the length of the union of every rank's op intervals in that iteration,
timeline.jsonl, compute and communication), i.e. the wall-clock span of the iteration as in
nccl-tests' and AICB's per-iteration timing minus ``idle_s``, the stretches in which no rank
had anything to do: the testbed's controller handing out the next phase (its start margin,
traffic_gen/replay.py phases.json), which a real job does not have; from the collectives'
per-rank times when the run has no timeline. Per iteration also: ``compute_s``,
the busiest rank's compute time in it (the sum of its compute ops; timeline.jsonl);
``comm_exposed_s`` = iteration_time_s - compute_s, the part of the iteration in which that
rank was not computing (communication and waiting that compute did not hide); and
``compute_share`` = compute_s / iteration_time_s, the share of time computing (an MFU proxy:
the MFU of the run is at most the compute-only MFU times this share; AICB reports the same
split of an iteration into compute and exposed communication). The MFU from the model's
FLOPs and the measured iteration time, the accelerator-seconds waiting and the joules are in
analysis.metrics.energy.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.dci import union_length
from analysis.metrics.stats import distribution, mean

__all__ = ["cct_metrics", "iteration_times"]


def _workload(frame: pd.DataFrame) -> pd.Series:
    if "workload_index" in frame:
        return frame["workload_index"].fillna(0).astype(int)
    return pd.Series(0, index=frame.index)


def iteration_times(timeline: pd.DataFrame, collectives: pd.DataFrame) -> pd.DataFrame:
    """One row per (workload_index, iteration): ``t_start``, ``t_end`` (host clock, s),
    ``iteration_time_s`` (s, the busy time: module docstring), ``idle_s`` = t_end - t_start -
    iteration_time_s. Empty frame when neither input has rows."""
    if not timeline.empty:
        frame = timeline.assign(workload_index=_workload(timeline))
    elif not collectives.empty:
        frame = collectives.assign(workload_index=_workload(collectives),
                                   t_start=collectives["rank_t_start"].map(min),
                                   t_end=collectives["rank_t_end"].map(max))
    else:
        return pd.DataFrame(columns=["workload_index", "iteration", "t_start", "t_end",
                                     "iteration_time_s", "idle_s", "compute_s",
                                     "comm_exposed_s", "compute_share"])
    keys = ["workload_index", "iteration"]
    grouped = frame.groupby(keys, as_index=False).agg(t_start=("t_start", "min"),
                                                      t_end=("t_end", "max"))
    busy = frame.groupby(keys).apply(_busy_s, include_groups=False).rename("iteration_time_s")
    grouped = grouped.merge(busy.reset_index(), on=keys, how="left")
    grouped = grouped.assign(idle_s=grouped["t_end"] - grouped["t_start"]
                             - grouped["iteration_time_s"])
    return _compute_split(grouped, frame if not timeline.empty else None)


def _busy_s(ops: pd.DataFrame) -> float:
    """Length (s) of the union of the intervals [t_start, t_end] of ``ops``' rows."""
    return union_length(list(zip(ops["t_start"], ops["t_end"], strict=True)))


def _compute_split(iters: pd.DataFrame, timeline: pd.DataFrame | None) -> pd.DataFrame:
    """Add compute_s, comm_exposed_s and compute_share (module docstring) to ``iters``;
    None (unknown) without a timeline."""
    if timeline is None or "kind" not in timeline or "rank" not in timeline:
        return iters.assign(compute_s=None, comm_exposed_s=None, compute_share=None)
    comp = timeline[timeline["kind"] == "compute"]
    per_rank = (comp.assign(d=comp["t_end"] - comp["t_start"])
                .groupby(["workload_index", "iteration", "rank"])["d"].sum()
                .groupby(["workload_index", "iteration"]).max().rename("compute_s"))
    out = iters.merge(per_rank.reset_index(), on=["workload_index", "iteration"], how="left")
    out["compute_s"] = out["compute_s"].fillna(0.0)
    out["comm_exposed_s"] = out["iteration_time_s"] - out["compute_s"]
    span = out["iteration_time_s"].where(out["iteration_time_s"] > 0)
    out["compute_share"] = out["compute_s"] / span
    return out


def cct_metrics(collectives: pd.DataFrame, timeline: pd.DataFrame,
                iters: pd.DataFrame | None = None) -> dict[str, Any]:
    """The ``cct`` section of metrics.json: ``collectives`` (count), distributions of
    ``cct_s`` (s), ``algbw_Bps`` and ``busbw_Bps`` (bytes/s), ``by_op`` (per op name: count,
    CCT mean, busbw mean), ``per_collective`` (id, workload, iteration, op, size, cct_s,
    busbw_Bps; for the report's CCT-per-iteration plot), ``iterations`` (per workload and
    iteration: iteration_time_s, compute_s, comm_exposed_s, compute_share; module docstring)
    and the distributions ``iteration_time_s`` (every iteration of every workload),
    ``comm_exposed_s`` and ``compute_share``; ``iteration_time_s_by_workload`` (workload index
    -> distribution: iterations of different workloads are different things, a training step
    and an incast repeat) and ``main_workload_index``, the workload with the most iteration
    time in all (the job a summary's ``iteration_time_s_mean`` is about; None without
    iterations). ``iters``: :func:`iteration_times` of the same inputs when the caller has it
    already."""
    iters = iteration_times(timeline, collectives) if iters is None else iters
    by_workload = {int(w): g["iteration_time_s"] for w, g in iters.groupby("workload_index")}
    main = max(by_workload, key=lambda w: float(by_workload[w].sum())) if by_workload else None
    out: dict[str, Any] = {
        "collectives": int(len(collectives)),
        "iterations": iters[["workload_index", "iteration", "iteration_time_s", "idle_s",
                             "compute_s", "comm_exposed_s", "compute_share"]
                            ].to_dict("records"),
        "iteration_time_s": distribution(iters["iteration_time_s"]),
        "iteration_time_s_by_workload": {str(w): distribution(x) for w, x in by_workload.items()},
        "main_workload_index": main,
        "comm_exposed_s": distribution(iters["comm_exposed_s"].dropna()),
        "compute_share": distribution(iters["compute_share"].dropna())}
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
