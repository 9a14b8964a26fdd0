"""Flow completion time (FCT) and FCT slowdown.

FCT is the record's ``fct_s`` (sender began to last byte at the receiver, host clock;
models.records.FlowRecord). Slowdown (also "normalized FCT") is FCT divided by the ideal
FCT of the same flow alone on an idle network, as in pFabric (Alizadeh et al., SIGCOMM 2013,
section 5) and HPCC (Li et al., SIGCOMM 2019, section 5.1):

    ideal_fct_s = size_bytes * 8 / bottleneck_rate_bps + base_rtt_s

with the bottleneck rate the lowest configured ``rate_bps`` on the flow's path (plan.json,
analysis.paths.ideal_params) and the base RTT the larger of the configured one-way delays
there and back (plan.json) and the connection's measured minimum RTT (TCP_INFO ``min_rtt``,
``tcp_min_rtt_s``): the idle network's RTT also holds the hosts' stack time, which alone is
tens of microseconds, so without the measurement a small transfer on an undelayed lab got an
ideal of a few microseconds (column ``base_rtt_source``: ``plan`` or ``tcp_min_rtt``). The
ideal counts payload only (no header overhead, no slow start, no handshake), so a slowdown
below 1 means a measurement problem, except for short transfers on a warm connection, whose
FCT (one way) can beat "one RTT".
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.metrics.stats import distribution
from analysis.paths import ideal_params
from models.paths import PathError
from models.plan import LabPlan

__all__ = ["ideal_fct_s", "flow_ideals", "fct_metrics"]


def ideal_fct_s(size_bytes: float, rate_bps: float | None, base_rtt_s: float) -> float | None:
    """``size_bytes * 8 / rate_bps + base_rtt_s`` in seconds; None without a rate (an
    unshaped path has no line rate to compare with). Source: module docstring."""
    if rate_bps is None or rate_bps <= 0:
        return None
    return size_bytes * 8 / rate_bps + base_rtt_s


def flow_ideals(flows: pd.DataFrame, plan: LabPlan | None) -> pd.DataFrame:
    """``flows`` with ``bottleneck_bps``, ``base_rtt_s``, ``ideal_fct_s`` and ``slowdown``
    added (None where the plan or a path is missing; unreachable pairs are not an error
    here: the run's own records already show whether the flow completed)."""
    out = flows.copy()
    cache: dict[tuple, tuple[int | None, float | None]] = {}
    cols = ("src_node", "src_ip", "dst_node", "dst_ip")
    rates, rtts = [], []
    for key in out[list(cols)].itertuples(index=False, name=None):
        if key not in cache:
            cache[key] = _params(plan, key)
        rates.append(cache[key][0])
        rtts.append(cache[key][1])
    out["bottleneck_bps"] = rates
    out["base_rtt_s"], out["base_rtt_source"] = _base_rtts(rtts, out)
    rtts = list(out["base_rtt_s"])
    out["ideal_fct_s"] = [ideal_fct_s(s, r, d) if d is not None else None
                          for s, r, d in zip(out["size_bytes"], rates, rtts, strict=True)]
    out["slowdown"] = [f / i if i and f is not None and pd.notna(f) else None
                       for f, i in zip(out["fct_s"], out["ideal_fct_s"], strict=True)]
    return out


def _base_rtts(plan_rtts: list[float | None], flows: pd.DataFrame
               ) -> tuple[list[float | None], list[str | None]]:
    """Per flow the base RTT and where it came from: the connection's measured minimum RTT
    (``tcp_min_rtt_s``, TCP_INFO) where it exceeds the plan's configured delays there and
    back (it holds them plus both hosts' stack and the wire time: without configured delays
    the plan's 0 s made a small transfer's ideal a few microseconds and its slowdown
    meaningless), else the plan's; None without either."""
    measured = flows["tcp_min_rtt_s"] if "tcp_min_rtt_s" in flows else [None] * len(flows)
    rtts: list[float | None] = []
    sources: list[str | None] = []
    for planned, seen in zip(plan_rtts, measured, strict=True):
        seen = None if seen is None or pd.isna(seen) else float(seen)
        if planned is None or (seen is not None and seen > planned):
            rtts.append(seen)
            sources.append(None if seen is None else "tcp_min_rtt")
        else:
            rtts.append(planned)
            sources.append("plan")
    return rtts, sources


def _params(plan: LabPlan | None, key: tuple) -> tuple[int | None, float | None]:
    if plan is None:
        return None, None
    try:
        return ideal_params(plan, *key)
    except PathError:
        return None, None


def fct_metrics(flows: pd.DataFrame, plan: LabPlan | None) -> tuple[dict[str, Any], pd.DataFrame]:
    """The ``fct`` section of metrics.json and the flows with their ideals (see
    :func:`flow_ideals`). Section: ``flows`` (count), ``fct_s`` and ``slowdown``
    distributions (count/mean/p50/p95/p99/max, seconds and ratio), ``ideal`` (how the ideal
    was formed). Empty distributions when the run has no flow records."""
    if flows.empty or "fct_s" not in flows:
        empty = distribution([])
        return {"flows": 0, "fct_s": empty, "slowdown": empty}, flows
    table = flow_ideals(flows, plan)
    done = table[table["fct_s"].notna()]
    return {"flows": int(len(table)), "completed": int(len(done)),
            "fct_s": distribution(done["fct_s"]),
            "slowdown": distribution(done["slowdown"]),
            "ideal": "size_bytes*8/bottleneck_rate_bps + base_rtt_s (rate: plan.json; base RTT: "
                     "the larger of the plan's delays there and back and TCP_INFO min_rtt)"}, table
