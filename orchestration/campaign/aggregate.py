"""Aggregating a campaign: per run, the numeric ``summary`` of its ``metrics.json`` (or, where
that is absent, FCT/CCT figures computed from its records) and its fidelity verdict; per
point, the mean, the geometric mean and a 95% confidence interval of each over the
repetitions that can be trusted. No root.

Trust: each run's ``trustworthy`` is its fidelity.json's (orchestration/fidelity/run.py: its
links did what the plan said, its CPU was not saturated; None when the run has no verdict). A
point's figures come from its trustworthy runs and those without a verdict; its untrustworthy
runs are left out, counted (``runs_untrustworthy``) and named (``untrustworthy_reps``). A
point none of whose runs can be used that way is aggregated from its untrustworthy runs and
marked: its ``trustworthy`` says ``no`` (``yes``: every aggregated run was trustworthy; ``not
assessed``: some had no verdict).

Confidence interval (``m_ci95_low``, ``m_ci95_high``), 95%, n >= 2 (n = 1 gives none: NaN):

* values all positive (times, rates, sizes): Student's t interval on their logarithms, taken
  back: geometric mean ×/ exp(t(0.975, n-1) x s_log / sqrt(n)), s_log the sample standard
  deviation of the log values -- an interval for the geometric mean (the median of a
  log-normal) that stays positive however few and spread the repetitions are (Limpert,
  Stahel and Abbt, "Log-normal distributions across the sciences", BioScience 51(5), 2001,
  the multiplicative standard deviation; NIST/SEMATECH e-Handbook of Statistical Methods,
  section 7.2.2.1, for the t interval). Student's t interval of the mean of two CCTs of
  0.05 s and 1.1 s reaches -6.1 s.
* otherwise (a zero, e.g. no drops): Student's t interval for the mean, mean +/-
  t(0.975, n-1) x s / sqrt(n), s the sample standard deviation (ddof 1) -- NIST/SEMATECH
  e-Handbook, section 7.2.2.1 "Confidence limits for the mean"; R. Jain, The Art of Computer
  Systems Performance Analysis (Wiley 1991), section 13.2 -- cut at 0 when no value is
  negative (a count or a share cannot be below 0).
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

__all__ = ["mean_ci95", "positive_ci95", "run_summary", "run_trust", "records_summary",
           "aggregate", "write_tables", "TRUST_WORDS"]

# a point's ``trustworthy`` cell: every aggregated run trustworthy / the aggregated runs
# untrustworthy (none of the point's could be trusted) / some aggregated run had no verdict
TRUST_WORDS = ("yes", "no", "not assessed")


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


def positive_ci95(values: Sequence[float]) -> tuple[float, float]:
    """(low, high) of the 95% interval of the finite ``values`` (module docstring): on log
    values when all are positive, else Student's t interval of the mean, cut at 0 when none
    is negative; (NaN, NaN) for fewer than 2 values."""
    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = len(xs)
    if n < 2:
        return math.nan, math.nan
    if (xs > 0).all():
        logs = np.log(xs)
        factor = math.exp(float(stats.t.ppf(0.975, n - 1) * logs.std(ddof=1) / math.sqrt(n)))
        gm = math.exp(float(logs.mean()))
        return gm / factor, gm * factor
    mean, half, _ = mean_ci95(xs.tolist())
    low = mean - half
    return (max(0.0, low) if (xs >= 0).all() else low), mean + half


def _gmean(values: Sequence[float]) -> float:
    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(xs) == 0 or not (xs > 0).all():
        return math.nan
    return math.exp(float(np.log(xs).mean()))


def run_trust(run_dir: Path) -> tuple[bool | None, str]:
    """(trustworthy, first reason) of a run from its ``fidelity.json`` (True, False, or None
    with ``"not assessed"``/``"no fidelity.json"`` when it has no verdict)."""
    try:
        doc = json.loads((run_dir / "fidelity.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, "no fidelity.json"
    verdict = doc.get("trustworthy") if isinstance(doc, dict) else None
    reasons = (doc.get("reasons") if isinstance(doc, dict) else None) or []
    if verdict is None:
        return None, str(reasons[0]) if reasons else "not assessed"
    return bool(verdict), "" if verdict else (str(reasons[0]) if reasons else "")


def _pcts(prefix: str, xs: list[float], qs: Iterable[int]) -> dict[str, float | None]:
    return {f"{prefix}_p{q}": (percentile(xs, q) if xs else None) for q in qs}


def _iteration_times(timeline: list[dict[str, Any]]) -> list[float]:
    """Per iteration of the main workload (the one with the most iteration time, as
    analysis.metrics.collectives.cct_metrics picks it): last rank op end - first rank op
    start (s)."""
    spans: dict[tuple[int, int], list[float]] = {}
    for r in timeline:
        key = (r.get("workload_index", 0), r["iteration"])
        lo, hi = spans.get(key, [math.inf, -math.inf])
        spans[key] = [min(lo, r["t_start"]), max(hi, r["t_end"])]
    per: dict[int, list[float]] = {}
    for (w, _it), (lo, hi) in spans.items():
        per.setdefault(w, []).append(hi - lo)
    return max(per.values(), key=sum) if per else []


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


def _trusted(mine: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The runs of a point to aggregate and the point's ``trustworthy`` word (module
    docstring)."""
    usable = [r for r in mine if r.get("trustworthy") is not False]
    if not usable:
        return mine, TRUST_WORDS[1]
    if all(r.get("trustworthy") is True for r in usable):
        return usable, TRUST_WORDS[0]
    return usable, TRUST_WORDS[2]


def aggregate(rows: list[dict[str, Any]], swept: list[str]) -> pd.DataFrame:
    """One row per point from per-run ``rows`` (each: ``point``, the swept keys, ``rep``,
    ``trustworthy`` (absent: None), ``summary``): the swept values, ``runs`` (the point's
    completed repetitions), ``runs_aggregated`` (those its figures come from), ``trustworthy``
    (a word of :data:`TRUST_WORDS`), ``runs_untrustworthy`` and
    ``untrustworthy_reps`` (the point's runs the fidelity check called untrustworthy, their
    repetition numbers space-separated, left out unless nothing else was left) and, for
    every numeric summary key m, ``m_mean``, ``m_gmean`` (NaN unless every value is
    positive), ``m_ci95_low`` and ``m_ci95_high`` (the 95% interval, module docstring; NaN
    for fewer than 2 values) and ``m_n`` (runs that had a value)."""
    metrics = sorted({k for r in rows for k in _numeric(r["summary"])})
    out = []
    for point in sorted({r["point"] for r in rows}):
        mine = [r for r in rows if r["point"] == point]
        used, word = _trusted(mine)
        bad = [str(r.get("rep", "?")) for r in mine if r.get("trustworthy") is False]
        row: dict[str, Any] = {"point": point, **{k: _cell(mine[0][k]) for k in swept},
                               "runs": len(mine), "runs_aggregated": len(used),
                               "trustworthy": word,
                               "runs_untrustworthy": len(bad),
                               "untrustworthy_reps": " ".join(bad)}
        for m in metrics:
            values = [_numeric(r["summary"]).get(m, math.nan) for r in used]
            mean, _, n = mean_ci95(values)
            low, high = positive_ci95(values)
            row.update({f"{m}_mean": mean, f"{m}_gmean": _gmean(values),
                        f"{m}_ci95_low": low, f"{m}_ci95_high": high, f"{m}_n": n})
        out.append(row)
    return pd.DataFrame(out)


def write_tables(root: Path, rows: list[dict[str, Any]], swept: list[str]) -> pd.DataFrame:
    """Write ``root/aggregate.parquet`` and ``root/aggregate.csv`` (per point,
    :func:`aggregate`) and ``root/runs.csv`` (per run: point, swept values, rep, seed,
    run_dir, source, trustworthy, the first untrustworthy reason, summary keys). Returns the
    aggregate table."""
    table = aggregate(rows, swept)
    table.to_parquet(root / "aggregate.parquet", index=False)
    table.to_csv(root / "aggregate.csv", index=False)
    flat = [{**{k: _cell(v) for k, v in r.items() if k != "summary"}, **r["summary"]}
            for r in rows]
    pd.DataFrame(flat).to_csv(root / "runs.csv", index=False)
    return table
