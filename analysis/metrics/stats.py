"""Shared statistics for the metric families: percentiles and JSON-safe numbers."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["PERCENTILES", "distribution", "num", "mean"]

PERCENTILES = (50, 95, 99)


def num(value: Any) -> float | None:
    """``value`` as a float, or None for None, NaN or an infinity (JSON has no NaN)."""
    if value is None:
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def _clean(values: Iterable[Any]) -> np.ndarray:
    arr = np.asarray([v for v in values if v is not None], dtype="float64")
    return arr[np.isfinite(arr)]


def distribution(values: Iterable[Any]) -> dict[str, float | None]:
    """``count``, ``mean``, ``p50``, ``p95``, ``p99``, ``max`` of ``values`` (None and NaN
    ignored; all None but count when empty).

    Percentiles interpolate linearly between closest ranks: numpy's default ``linear``
    method, Hyndman and Fan (1996) definition 7, the same as models.records.percentile,
    so p50 of [1, 2, 3, 4] is 2.5 and p99 of 1..100 is 99.01. With few samples the high
    percentiles approach the maximum (p99 of 10 values lies between the 9th and the 10th).
    """
    arr = _clean(values)
    out: dict[str, float | None] = {"count": float(arr.size)}
    if arr.size == 0:
        return {**out, "mean": None, **{f"p{q}": None for q in PERCENTILES}, "max": None}
    out["mean"] = float(arr.mean())
    for q in PERCENTILES:
        out[f"p{q}"] = float(np.percentile(arr, q, method="linear"))
    out["max"] = float(arr.max())
    return out


def mean(values: Iterable[Any]) -> float | None:
    """Arithmetic mean of the finite values, None if there are none."""
    arr = _clean(values)
    return float(arr.mean()) if arr.size else None
