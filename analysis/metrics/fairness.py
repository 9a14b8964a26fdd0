"""Jain's fairness index over concurrent flows.

J(x_1..x_n) = (sum x_i)^2 / (n * sum x_i^2), from R. Jain, D. Chiu and W. Hawe, "A Quantitative
Measure of Fairness and Discrimination for Resource Allocation in Shared Computer Systems",
DEC-TR-301, 1984, section 4. J is 1 when every flow gets the same throughput and 1/n when one
flow gets everything. Here x_i is a flow's throughput size_bytes * 8 / fct_s (bit/s), and
the concurrent flows are those of one burst (``burst_id``: incast senders sharing the
receiver's port) or of one step of one collective (``collective_id`` and ``step``: the
flows a collective runs at the same time). Groups of fewer than two completed flows are
skipped; the run's index is the mean over groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from analysis.metrics.stats import distribution, mean

__all__ = ["jain_index", "fairness_metrics"]


def jain_index(x: Sequence[float]) -> float | None:
    """Jain's index of the non-negative allocations ``x`` (any unit); None for no values or
    all zeros. Formula and source: module docstring."""
    xs = [float(v) for v in x]
    sq = sum(v * v for v in xs)
    if not xs or sq == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sq)


def _groups(flows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    out = []
    wi = flows["workload_index"] if "workload_index" in flows else pd.Series(0, flows.index)
    f = flows.assign(workload_index=wi)
    for col, keys in (("burst_id", ["workload_index", "burst_id"]),
                      ("collective_id", ["workload_index", "collective_id", "step"])):
        if col in f and f[col].notna().any():
            for key, g in f[f[col].notna()].groupby(keys):
                out.append(("/".join(str(k) for k in key), g))
    return out


def fairness_metrics(flows: pd.DataFrame) -> dict[str, Any]:
    """The ``fairness`` section: ``jain_mean`` (mean over groups), ``jain`` distribution,
    ``groups`` (per group: key, flows, jain). Formula: module docstring."""
    rows = []
    if not flows.empty and "fct_s" in flows:
        for key, g in _groups(flows):
            done = g[g["fct_s"].notna() & (g["fct_s"] > 0)]
            if len(done) >= 2:
                rows.append({"group": key, "flows": int(len(done)),
                             "jain": jain_index(done["size_bytes"] * 8 / done["fct_s"])})
    return {"jain_mean": mean(r["jain"] for r in rows),
            "jain": distribution(r["jain"] for r in rows), "groups": rows}
