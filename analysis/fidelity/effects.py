"""What an experiment's ``events:`` did to each shaped link direction, read from
``events.jsonl`` (models/events.py; one line per action, times in seconds after the run's t0):
so the fidelity checks judge each window against the values the event set, not the plan's.

A ``shape`` action's line has ``done.shaping`` (``"<link> <a_to_b|b_to_a>"`` -> the values the
direction had once it was applied); ``down``/``up`` lines name their ``links``. Lines of other
kinds (FRR ``record: convergence``, slowdowns) and actions that were not applied (no
``applied_t_s``) change nothing here. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["DirectionEffects", "event_effects", "expected_rates"]

_ARROW = {"a_to_b": "a->b", "b_to_a": "b->a"}


@dataclass(frozen=True, slots=True)
class DirectionEffects:
    """The events' changes to one direction, absolute times (s since the epoch).

    rate_changes: ``(began_s, applied_s, rate_bps)`` in time order: from ``applied_s`` on the
    direction runs at ``rate_bps`` (None: unshaped); between ``began_s`` and ``applied_s`` it
    is changing. down: ``(down_s, up_s)`` windows the link was down (``up_s`` inf: never
    up again). loss_set/delay_set: an event changed its loss (or took it down: every packet
    then is lost by plan) / its delay or jitter, so the run's loss and delay-line counts mix
    planned values with the plan's."""

    rate_changes: tuple[tuple[float, float, int | None], ...] = ()
    down: tuple[tuple[float, float], ...] = ()
    loss_set: bool = False
    delay_set: bool = False


@dataclass(slots=True)
class _Acc:
    rates: list[tuple[float, float, int | None]] = field(default_factory=list)
    down: list[tuple[float, float]] = field(default_factory=list)
    loss: bool = False
    delay: bool = False


def _shape(acc: dict[tuple[str, str], _Acc], rec: Mapping[str, Any], began: float,
           applied: float) -> None:
    for where, values in ((rec.get("done") or {}).get("shaping") or {}).items():
        link, _, d = where.rpartition(" ")
        a = acc.setdefault((link, _ARROW.get(d, d)), _Acc())
        a.rates.append((began, applied, values.get("rate_bps")))
        changes = rec.get("changes") or {}
        a.loss = a.loss or any(k.startswith("loss") or k == "corrupt_pct" for k in changes)
        a.delay = a.delay or any(k in ("delay_s", "jitter_s") for k in changes)

def event_effects(records: Iterable[Mapping[str, Any]], t0_unix_s: float
                  ) -> dict[tuple[str, str], DirectionEffects]:
    """(link, ``"a->b"``/``"b->a"``) -> :class:`DirectionEffects` of the applied actions in
    ``records`` (events.jsonl lines) with ``t0_unix_s`` the run's t0 (the manifest's
    ``events.t0_unix_s``). A ``down`` counts for both directions of each link until the
    next ``up`` of it."""
    acc: dict[tuple[str, str], _Acc] = {}
    opened: dict[str, float] = {}
    applied_recs = [r for r in records if r.get("applied_t_s") is not None and r.get("op")]
    for rec in sorted(applied_recs, key=lambda r: r["applied_t_s"]):
        began = t0_unix_s + float(rec.get("began_t_s", rec["applied_t_s"]))
        applied = t0_unix_s + float(rec["applied_t_s"])
        if rec["op"] == "shape":
            _shape(acc, rec, began, applied)
        elif rec["op"] == "down":
            for link in rec.get("links") or ():
                opened.setdefault(link, began)
        elif rec["op"] == "up":
            for link in rec.get("links") or ():
                if link in opened:
                    _down(acc, link, opened.pop(link), applied)
    for link, t in opened.items():
        _down(acc, link, t, float("inf"))
    return {k: DirectionEffects(tuple(a.rates), tuple(a.down), a.loss, a.delay)
            for k, a in acc.items()}


def _down(acc: dict[tuple[str, str], _Acc], link: str, lo: float, hi: float) -> None:
    for arrow in _ARROW.values():
        a = acc.setdefault((link, arrow), _Acc())
        a.down.append((lo, hi))
        a.loss = True


def expected_rates(t_lo: np.ndarray, t_hi: np.ndarray, plan_rate_bps: int | None,
                   effects: DirectionEffects | None) -> np.ndarray:
    """(n,) float64 bit/s: the rate in force over each interval [t_lo, t_hi] (absolute s):
    the plan's, or the last rate an event applied before ``t_lo``; NaN where none is
    configured, where a change was under way or took effect inside the interval, or where
    the link was down during it."""
    out = np.full(len(t_lo), np.nan if plan_rate_bps is None else float(plan_rate_bps))
    if effects is None:
        return out
    for began, applied, rate in effects.rate_changes:
        out[t_lo >= applied] = np.nan if rate is None else float(rate)
        out[(t_hi > began) & (t_lo < applied)] = np.nan
    for lo, hi in effects.down:
        out[(t_hi > lo) & (t_lo < hi)] = np.nan
    return out
