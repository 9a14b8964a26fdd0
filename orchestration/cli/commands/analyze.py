"""``aitb analyze RUN_DIR``: a run's tables, metrics.json and report.html (no root).

Re-runnable: the outputs are replaced atomically, the run's records are never changed.
``--json`` prints metrics.json's content; otherwise a summary table and then the report's
path. A missing or non-run directory is an error naming it (exit 2).
"""

# Modules that one command needs are imported inside it, when it runs, not at start-up:
# that keeps `aitb --help` and the other commands fast.

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table


def analyze(
    run_dir: Annotated[Path, typer.Argument(help="Run directory, results/<experiment>/<run-id>/",
                                            show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print metrics.json to stdout.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q",
                                        help="Print only the report's path.")] = False,
) -> None:
    """Compute a run's metrics (FCT, CCT, incast loss, stragglers...) and write its report."""
    from analysis import analyze_run  # pandas and matplotlib: only for this command

    metrics = analyze_run(run_dir)
    report = run_dir / "report.html"
    _warn_unfinished(run_dir, Console(emoji=False, stderr=True))
    if as_json:
        typer.echo(json.dumps(metrics, indent=1))
        return
    if not quiet:
        show_summary(metrics, Console(emoji=False))
    typer.echo(str(report))


def _warn_unfinished(run_dir: Path, console: Console) -> None:
    """Say so on stderr when the run's manifest does not say it finished (``ok``/``failed``):
    an interrupted run, or one whose owner died (``running``): its metrics cover partial
    records."""
    try:
        status = json.loads((run_dir / "manifest.json").read_text()).get("status")
    except (OSError, ValueError):
        return
    if status not in ("ok", "failed"):
        console.print(f"[bold yellow]warning:[/] the run's status is {status!r}, not finished: "
                      "the metrics cover the records it left", highlight=False)


def show_summary(metrics: dict[str, Any], console: Console) -> None:
    """Print the summary keys that have a value, and the trustworthiness verdict."""
    table = Table(title=f"{metrics['experiment']} {metrics['run_id']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics["summary"].items():
        if value is not None:
            table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    console.print(table)
    if metrics["trustworthy"] is False:
        console.print("[bold red]untrustworthy run:[/] "
                      + escape("; ".join(metrics["fidelity"].get("reasons") or [])))


def register(app: typer.Typer) -> None:
    """Add ``analyze`` to ``app``."""
    app.command("analyze")(analyze)
