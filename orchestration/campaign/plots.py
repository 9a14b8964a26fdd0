"""Comparison plots of a campaign (matplotlib, PNG): a metric's per-point center with its 95%
confidence interval as error bars against one swept key, one line per value of another
(orchestration/campaign/aggregate.py: the geometric mean and its interval on log values for a
metric whose values are all positive, else the mean and Student's t interval). The y label
names the aggregate.csv columns drawn; the legend's title is the swept key of the lines.
Points aggregated from untrustworthy runs only are drawn hollow, in red, and named in the
legend; a point that left untrustworthy runs out says how many ("-2 untrusted")."""

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

__all__ = ["axis_value", "default_plots", "write_plots", "plot_series", "y_label"]

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


def plot_series(table: pd.DataFrame, p: PlotSpec) -> dict[str, pd.DataFrame]:
    """Line label (a value of ``p.lines``; ``""`` without lines) -> its points, sorted by x
    when x is numeric: ``x`` (a number, or the swept value as text), ``y`` (the metric's
    ``_gmean`` where it has one, else its ``_mean``), ``low``/``high`` (``_ci95_low`` and
    ``_ci95_high``), ``trustworthy`` (the point's word) and ``left_out`` (untrustworthy runs
    left out of it)."""
    xs = [axis_value(v) for v in table[p.x]]
    numeric = all(x is not None for x, _ in xs)
    groups = {"": table} if p.lines is None else {
        str(v): g for v, g in table.groupby(p.lines, sort=False)}
    out = {}
    for label, g in groups.items():
        gm, mean = g[f"{p.metric}_gmean"], g[f"{p.metric}_mean"]
        trust = g["trustworthy"] if "trustworthy" in g else pd.Series("not assessed", g.index)
        s = pd.DataFrame({
            "x": [axis_value(v)[0] if numeric else str(v) for v in g[p.x]],
            "y": gm.where(gm.notna(), mean).to_numpy(),
            "low": g[f"{p.metric}_ci95_low"].to_numpy(),
            "high": g[f"{p.metric}_ci95_high"].to_numpy(),
            "trustworthy": trust.to_numpy(),
            "left_out": (g["runs_untrustworthy"].to_numpy() if "runs_untrustworthy" in g
                         else 0)})
        s = s.where(s["trustworthy"] != "no", s.assign(left_out=0))
        out[label] = s.sort_values("x", kind="stable").reset_index(drop=True) if numeric else s
    return out


def y_label(p: PlotSpec) -> str:
    """The y axis label: the metric and the aggregate.csv columns the plot draws."""
    m = p.metric
    return f"{m}: {m}_gmean (else {m}_mean)\n95% CI {m}_ci95_low .. {m}_ci95_high"


def _plot_one(table: pd.DataFrame, p: PlotSpec, path: Path) -> Path:
    xs = [axis_value(v) for v in table[p.x]]
    numeric = all(x is not None for x, _ in xs)
    fig, ax = plt.subplots(figsize=(6, 4.4), dpi=100)
    untrusted_drawn, left_out = False, 0
    for label, g in plot_series(table, p).items():
        err = [[0.0 if math.isnan(lo) else max(0.0, y - lo) for y, lo in zip(g["y"], g["low"],
                                                                           strict=True)],
               [0.0 if math.isnan(hi) else max(0.0, hi - y) for y, hi in zip(g["y"], g["high"],
                                                                          strict=True)]]
        line = ax.errorbar(g["x"], g["y"], yerr=err, marker="o", capsize=3, label=label or None)
        bad = g["trustworthy"] == "no"
        if bad.any():
            ax.plot(g["x"][bad], g["y"][bad], linestyle="none", marker="o", markersize=11,
                    markerfacecolor="none", markeredgecolor="red", markeredgewidth=2,
                    label=None if untrusted_drawn else "untrustworthy runs only")
            untrusted_drawn = True
        for x, y, k in zip(g["x"], g["y"], g["left_out"], strict=True):
            if k:
                left_out += int(k)
                ax.annotate(f"-{int(k)} untrusted", (x, y), textcoords="offset points",
                            xytext=(4, 4), fontsize="x-small", color=line[0].get_color())
    drawn = pd.concat(list(plot_series(table, p).values()))
    if (drawn["y"].dropna() > 0).all() and (drawn["low"].dropna() > 0).all():
        ax.set_yscale("log")  # the interval of a positive metric is multiplicative
    unit = xs[0][1] if numeric else ""
    ax.set_xlabel(p.x + (f" ({unit})" if unit else ""))
    ax.set_ylabel(y_label(p), fontsize="small")
    if left_out:
        ax.set_title(f"{left_out} untrustworthy run(s) left out (aggregate.csv "
                     "untrustworthy_reps)", fontsize="small")
    if p.lines is not None or untrusted_drawn:
        ax.legend(fontsize="small", title=p.lines, title_fontsize="small")
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
