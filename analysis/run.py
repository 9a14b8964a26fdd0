"""``analyze_run``: a run directory -> tables/*.parquet, metrics.json, report.html."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.io import write_json_atomic
from analysis.metrics import compute_metrics
from analysis.report import render_report
from analysis.tables import load_run, write_tables

__all__ = ["analyze_run"]


def analyze_run(run_dir: Path) -> dict[str, Any]:
    """Analyse the run directory ``run_dir`` (``results/<experiment>/<run-id>/``).

    Writes, each atomically, into ``run_dir``: ``tables/*.parquet`` (records, the flows with
    their ideal FCT and slowdown, qdisc samples, the one-row summary), ``metrics.json``
    (contracts.md section 4) and ``report.html``.
    Needs no root; re-runnable (the outputs are replaced, the inputs never touched). Returns
    the metrics dict (as written to metrics.json). Raises :class:`aitb.models.errors.SpecError`
    naming the directory if it is missing or not a run directory (no manifest.json), or
    naming a malformed JSON file; nothing is written then.
    """
    tables = load_run(Path(run_dir))
    metrics, flow_table = compute_metrics(tables)
    write_tables(tables, metrics["summary"], flow_table)
    write_json_atomic(tables.run_dir / "metrics.json", metrics)
    render_report(tables, metrics, flow_table)
    return metrics
