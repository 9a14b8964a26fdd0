"""Comparison plots of a campaign (matplotlib, PNG): a metric's per-point mean with its 95%
confidence interval as error bars against one swept key, one line per value of another."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from models.units import UnitError, parse_duration_s, parse_rate_bps, parse_size_bytes  # noqa: E402
from orchestration.campaign.spec import CampaignSpec, PlotSpec  # noqa: E402

__all__ = ["axis_value", "default_plots", "write_plots"]

_PARSERS = ((parse_duration_s, "s"), (parse_rate_bps, "bit/s"), (parse_size_bytes, "B"))
_DEFAULT_METRICS = ("cct_s_mean", "iteration_time_s_mean", "fct_s_p99", "goodput_bps",
                    "dci_collective_time_s")


def axis_value(value: Any) -> tuple[float | None, str]:
    """A swept value as a number for an axis, with its unit: numbers as they are, unit
    strings through models.units (duration -> s, rate -> bit/s, size -> B); (None, "")
    when it is neither (the axis is then categorical)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value), ""
    if isinstance(value, str):
        for parse, unit in _PARSERS:
            try:
                return float(parse(value)), unit
            except (UnitError, ValueError, TypeError):
                continue
    return None, ""


def default_plots(spec: CampaignSpec, table: pd.DataFrame) -> list[PlotSpec]:
    """When the campaign names no plots: each of a few headline metrics the table has
    against the first swept key, lines by the second (if any)."""
    swept = spec.swept()
    if not swept:
        return []
    lines = swept[1] if len(swept) > 1 else None
    return [PlotSpec(metric=m, x=swept[0], lines=lines) for m in _DEFAULT_METRICS
            if f"{m}_mean" in table and table[f"{m}_mean"].notna().any()]


def _series(table: pd.DataFrame, p: PlotSpec) -> dict[str, pd.DataFrame]:
    if p.lines is None:
        return {"": table}
    return {f"{p.lines.rsplit('.', 1)[-1]}={v}": g for v, g in table.groupby(p.lines, sort=False)}


def _plot_one(table: pd.DataFrame, p: PlotSpec, path: Path) -> Path:
    xs = [axis_value(v) for v in table[p.x]]
    numeric = all(x is not None for x, _ in xs)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for label, g in _series(table, p).items():
        g = g.assign(_x=[axis_value(v)[0] if numeric else str(v) for v in g[p.x]])
        g = g.sort_values("_x") if numeric else g
        err = [0.0 if math.isnan(e) else e for e in g[f"{p.metric}_ci95"]]
        ax.errorbar(g["_x"], g[f"{p.metric}_mean"], yerr=err, marker="o", capsize=3,
                    label=label or None)
    unit = xs[0][1] if numeric else ""
    ax.set_xlabel(p.x + (f" ({unit})" if unit else ""))
    ax.set_ylabel(f"{p.metric} (mean, 95% CI)")
    if p.lines is not None:
        ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_plots(root: Path, spec: CampaignSpec, table: pd.DataFrame) -> list[Path]:
    """Write ``root/plots/<metric>__vs__<x>.png`` for the campaign's plots (or
    :func:`default_plots`); a plot whose metric no run reported is skipped. Returns the
    files written."""
    plots = spec.plots or default_plots(spec, table)
    out = []
    for p in plots:
        if f"{p.metric}_mean" not in table or not table[f"{p.metric}_mean"].notna().any():
            continue
        (root / "plots").mkdir(exist_ok=True)
        name = f"{p.metric}__vs__{p.x}" + (f"__by__{p.lines}" if p.lines else "")
        out.append(_plot_one(table, p, root / "plots" / f"{name}.png"))
    return out
