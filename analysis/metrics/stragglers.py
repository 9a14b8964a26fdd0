"""Straggler effects: per-rank finish spread, CCT inflation caused by the slowest rank, and
federated-learning rounds and clients that missed their deadline.

Per collective instance (CollectiveRecord, per-rank times on the host clock):

* finish spread (s) = max over ranks of ``rank_t_end`` - min over ranks of ``rank_t_end``;
* arrival lag of the slowest rank (s) = max ``rank_t_start`` - median ``rank_t_start``;
* inflation = T_med / (T_med - lag), with T_med = max ``rank_t_end`` - median
  ``rank_t_start``: the time the median rank spends in the collective, divided by what it
  would spend had the slowest rank arrived with it (its lag removed, everything after the
  last arrival kept). 1 means no straggler effect; a rank that arrives 10 ms late to a
  collective that then needs 10 ms gives 2. This definition is aitb's (no standard one
  exists); it follows the attribution of waiting in synchronous training to the slowest
  worker (Chen et al., "Revisiting Distributed Synchronous SGD", arXiv:1604.00981, 2016),
  measured against the median rank.

The slowest rank of an instance (``slowest_rank``) is the latest arrival, named only when its
lag exceeds both ``ARRIVAL_MIN_S`` and ``ARRIVAL_SHARE`` of T_med: otherwise the ranks arrived
together (the instance's time went to the network, see analysis/metrics/attribution.py for
who set it then) and it is None; ``slowest_rank_counts`` counts named ranks only.

Rounds (RoundRecord, models/records.py): a round missed its deadline when
``round_time_s`` > ``deadline_s``; clients dropped are listed per round by the aggregator.
"""

from __future__ import annotations

import statistics
from typing import Any

import pandas as pd

from analysis.metrics.stats import distribution, mean

__all__ = ["ARRIVAL_MIN_S", "ARRIVAL_SHARE", "collective_straggle", "straggler_metrics",
           "round_metrics"]

ARRIVAL_MIN_S = 0.001  # the datapath's start skew (bench/start_skew.py: p99 under 1 ms)
ARRIVAL_SHARE = 0.05  # a lag of 5% of the collective: inflation 1.05, below: no straggler


def collective_straggle(rank_t_start: list[float], rank_t_end: list[float]
                        ) -> dict[str, float | None]:
    """``spread_s``, ``lag_s``, ``inflation`` and ``slowest_index`` (position in the rank
    lists of the latest arrival; None when nobody arrived late, module docstring) of one
    collective; formulas in the module docstring.
    ``inflation`` is None when the time after the last arrival is not positive."""
    starts, ends = list(rank_t_start), list(rank_t_end)
    med = statistics.median(starts)
    lag = max(0.0, max(starts) - med)
    t_med = max(ends) - med
    rest = t_med - lag
    late = lag > ARRIVAL_MIN_S and lag > ARRIVAL_SHARE * t_med
    return {"spread_s": max(ends) - min(ends), "lag_s": lag,
            "inflation": t_med / rest if rest > 0 else None,
            "slowest_index": starts.index(max(starts)) if late else None}


def straggler_metrics(collectives: pd.DataFrame) -> dict[str, Any]:
    """The ``stragglers`` section: ``per_collective`` rows (collective_id, workload_index,
    iteration, spread_s, lag_s, inflation, slowest_rank), distributions of ``spread_s`` and
    ``inflation``, and ``slowest_rank_counts`` (rank -> how often it arrived last)."""
    rows = []
    for c in collectives.itertuples(index=False):
        s = collective_straggle(c.rank_t_start, c.rank_t_end)
        idx = s.pop("slowest_index")
        rank = int(c.ranks[int(idx)]) if idx is not None else None
        rows.append({"collective_id": c.collective_id,
                     "workload_index": int(getattr(c, "workload_index", 0)),
                     "iteration": int(c.iteration), **s, "slowest_rank": rank})
    counts: dict[str, int] = {}
    for r in rows:
        if r["slowest_rank"] is not None:
            counts[str(r["slowest_rank"])] = counts.get(str(r["slowest_rank"]), 0) + 1
    return {"per_collective": rows, "spread_s": distribution(r["spread_s"] for r in rows),
            "inflation": distribution(r["inflation"] for r in rows),
            "slowest_rank_counts": counts}


def round_metrics(rounds: pd.DataFrame) -> dict[str, Any]:
    """The ``rounds`` part of the stragglers section: ``rounds`` (count), ``missed_deadline``
    (rounds with round_time_s > deadline_s), ``clients_dropped`` (total over rounds),
    ``dropped_clients`` (host -> rounds missed), ``round_time_s`` distribution."""
    if rounds.empty:
        return {"rounds": 0, "missed_deadline": 0, "clients_dropped": 0,
                "dropped_clients": {}, "round_time_s": distribution([])}
    dl = rounds["deadline_s"] if "deadline_s" in rounds else pd.Series(None, index=rounds.index)
    missed = int(((rounds["round_time_s"] > dl) & dl.notna()).sum())
    per_host: dict[str, int] = {}
    for lst in rounds.get("clients_dropped", pd.Series([], dtype=object)):
        for host in lst or []:
            per_host[str(host)] = per_host.get(str(host), 0) + 1
    return {"rounds": int(len(rounds)), "missed_deadline": missed,
            "clients_dropped": sum(per_host.values()), "dropped_clients": per_host,
            "round_time_s": distribution(rounds["round_time_s"]),
            "round_time_s_mean": mean(rounds["round_time_s"])}
