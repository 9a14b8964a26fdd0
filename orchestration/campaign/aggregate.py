"""Aggregating a campaign: per run, the numeric ``summary`` of its ``metrics.json`` (or, where
that is absent, FCT/CCT figures computed from its records); per point, the mean and the 95%
confidence interval of each over the repetitions. No root.

Confidence interval: Student's t interval for the mean of n independent repetitions, mean +/-
t(0.975, n-1) x s / sqrt(n), s the sample standard deviation (ddof 1) -- NIST/SEMATECH
e-Handbook of Statistical Methods, section 7.2.2.1 "Confidence limits for the mean"; R. Jain,
The Art of Computer Systems Performance Analysis (Wiley 1991), section 13.2. It needs n >= 2
(n = 1 gives no interval: NaN).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from models.records import percentile
from models.rundir import read_jsonl

__all__ = ["mean_ci95", "run_summary", "records_summary", "aggregate", "write_tables"]


def mean_ci95(values: Sequence[float]) -> tuple[float, float, int]:
    """(mean, half-width of the 95% Student t interval, n) of the finite ``values``; the
    half-width is NaN for n < 2 and the mean NaN for n = 0 (formula: module docstring)."""
    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, 0
    if n == 1:
        return float(xs[0]), math.nan, 1
    half = float(stats.t.ppf(0.975, n - 1) * xs.std(ddof=1) / math.sqrt(n))
    return float(xs.mean()), half, n



def _pcts(prefix: str, xs: list[float], qs: Iterable[int]) -> dict[str, float | None]:
    return {f"{prefix}_p{q}": (percentile(xs, q) if xs else None) for q in qs}


def _iteration_times(timeline: list[dict[str, Any]]) -> list[float]:
    """Per (workload, iteration): last rank op end - first rank op start (s)."""
    spans: dict[tuple[int, int], list[float]] = {}
    for r in timeline:
        key = (r.get("workload_index", 0), r["iteration"])
        lo, hi = spans.get(key, [math.inf, -math.inf])
        spans[key] = [min(lo, r["t_start"]), max(hi, r["t_end"])]
    return [hi - lo for lo, hi in spans.values()]


def records_summary(run_dir: Path) -> dict[str, float | None]:
    """Summary keys (models.records.SUMMARY_KEYS) computed from the run's records, for runs
    without metrics.json: flows, fct_s_p50/p95/p99/max, collectives, cct_s_mean/p50/p99,
    algbw_Bps_mean, busbw_Bps_mean, iteration_time_s_mean, retransmissions (sum of each flow's
    TCP_INFO total_retrans difference), dci_collective_time_s (analysis.dci). Percentiles:
    models.records.percentile (numpy's linear method)."""
    from analysis.dci import dci_collective_time_s

    flows = read_jsonl(run_dir / "flows.jsonl")
    colls = read_jsonl(run_dir / "collectives.jsonl")
    fct = [f["fct_s"] for f in flows if f.get("fct_s") is not None]
    cct = [c["cct_s"] for c in colls]
    iters = _iteration_times(read_jsonl(run_dir / "timeline.jsonl"))
    out: dict[str, float | None] = {"flows": len(flows), **_pcts("fct_s", fct, (50, 95, 99)),
                                    "fct_s_max": max(fct) if fct else None,
                                    "collectives": len(colls)}
    out.update(_pcts("cct_s", cct, (50, 99)))
    out["cct_s_mean"] = float(np.mean(cct)) if cct else None
    out["algbw_Bps_mean"] = float(np.mean([c["algbw_Bps"] for c in colls])) if colls else None
    out["busbw_Bps_mean"] = float(np.mean([c["busbw_Bps"] for c in colls])) if colls else None
    out["iteration_time_s_mean"] = float(np.mean(iters)) if iters else None
    out["retransmissions"] = sum((f.get("tcp") or {}).get("total_retrans", 0) for f in flows)
    out["dci_collective_time_s"] = dci_collective_time_s(run_dir)
    return out


def run_summary(run_dir: Path) -> tuple[dict[str, float | None], str]:
    """The run's summary and where it came from (``metrics.json`` or ``records``)."""
    metrics = run_dir / "metrics.json"
    if metrics.exists():
        return json.loads(metrics.read_text(encoding="utf-8"))["summary"], "metrics.json"
    return records_summary(run_dir), "records"


def _cell(value: Any) -> Any:
    """A swept value as a table cell: scalars as they are, anything else as JSON text."""
    return value if isinstance(value, int | float | str | bool) or value is None \
        else json.dumps(value, sort_keys=True)


def _numeric(summary: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in summary.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def aggregate(rows: list[dict[str, Any]], swept: list[str]) -> pd.DataFrame:
    """One row per point from per-run ``rows`` (each: ``point``, the swept keys, ``rep``,
    ``summary``): the swept values, ``runs`` (repetitions aggregated) and, for every numeric
    summary key m, ``m_mean``, ``m_ci95`` (half-width of the 95% interval, NaN for fewer than
    2 values) and ``m_n`` (runs that had a value)."""
    metrics = sorted({k for r in rows for k in _numeric(r["summary"])})
    out = []
    for point in sorted({r["point"] for r in rows}):
        mine = [r for r in rows if r["point"] == point]
        row: dict[str, Any] = {"point": point, **{k: _cell(mine[0][k]) for k in swept},
                               "runs": len(mine)}
        for m in metrics:
            mean, half, n = mean_ci95([_numeric(r["summary"]).get(m, math.nan) for r in mine])
            row.update({f"{m}_mean": mean, f"{m}_ci95": half, f"{m}_n": n})
        out.append(row)
    return pd.DataFrame(out)


def write_tables(root: Path, rows: list[dict[str, Any]], swept: list[str]) -> pd.DataFrame:
    """Write ``root/aggregate.parquet`` and ``root/aggregate.csv`` (per point) and
    ``root/runs.csv`` (per run: point, swept values, rep, seed, run_dir, source, summary
    keys). Returns the aggregate table."""
    table = aggregate(rows, swept)
    table.to_parquet(root / "aggregate.parquet", index=False)
    table.to_csv(root / "aggregate.csv", index=False)
    flat = [{**{k: _cell(v) for k, v in r.items() if k != "summary"}, **r["summary"]}
            for r in rows]
    pd.DataFrame(flat).to_csv(root / "runs.csv", index=False)
    return table
