"""``analyze_run``: a run directory -> tables/*.parquet, metrics.json, report.html."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.dci import write_dci
from analysis.io import write_json_atomic
from analysis.locality import policies_of, write_locality
from analysis.metrics import compute_metrics
from analysis.metrics.events import impact_table
from analysis.report import render_report
from analysis.tables import load_run, write_tables
from models.paths import dci_links
from models.plan import plan_from_dict

__all__ = ["analyze_run"]


def analyze_run(run_dir: Path) -> dict[str, Any]:
    """Analyse the run directory ``run_dir`` (``results/<experiment>/<run-id>/``).

    Writes, each atomically, into ``run_dir``: ``tables/*.parquet`` (records, the flows with
    their ideal FCT and slowdown, qdisc samples, the one-row summary, and with an ``events:``
    timeline ``events_impact.parquet``: analysis.metrics.events), ``metrics.json``
    (analysis/metrics/__init__.py), ``dci.json`` when the plan has DCI links (analysis.dci),
    ``locality.json`` when a workload marks its data (analysis.locality) and
    ``report.html``.
    Needs no root; re-runnable (the outputs are replaced, the inputs never touched). Returns
    the metrics dict (as written to metrics.json). Raises :class:`models.errors.SpecError`
    naming the directory if it is missing or not a run directory (no manifest.json), or
    naming a malformed JSON file; nothing is written then.
    """
    if _has_dci(Path(run_dir)):
        write_dci(Path(run_dir))  # dci.json: which collectives crossed a DCI (analysis.dci)
    if _has_data_policy(Path(run_dir)):
        write_locality(Path(run_dir))  # locality.json: marked data stayed in its regions?
    tables = load_run(Path(run_dir))
    metrics, flow_table = compute_metrics(tables)
    write_tables(tables, metrics["summary"], flow_table, impact_table(metrics["events"]))
    write_json_atomic(tables.run_dir / "metrics.json", metrics)
    render_report(tables, metrics, flow_table)
    return metrics


def _has_data_policy(run_dir: Path) -> bool:
    """Whether a workload of experiment.json marks its data (analysis.locality)."""
    try:
        doc = json.loads((run_dir / "experiment.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(policies_of(doc)) and (run_dir / "plan.json").exists()


def _has_dci(run_dir: Path) -> bool:
    """Whether the run's plan.json has a DCI link (False without a readable plan.json: the
    table loader then reports the directory)."""
    try:
        plan = plan_from_dict(json.loads((run_dir / "plan.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return bool(dci_links(plan))
