"""``aitb run [EXPERIMENT]``: run one experiment and print its run directory last."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console(stderr=True)


def run(
    experiment: Annotated[Path | None, typer.Argument(
        help="Experiment file (YAML); default: the built-in quickstart.",
        show_default=False)] = None,
    results: Annotated[Path, typer.Option(
        "--results", help="Folder that receives <experiment>/<run-id>/.")] = Path("results"),
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the run directory.")] = False,
    check: Annotated[bool, typer.Option(
        "--check", help="Validate and build the experiment, create nothing, exit.")] = False,
) -> None:
    """Deploy the experiment's lab, replay its workloads over real sockets, record, tear down."""
    from aitb.orchestration.defaults import default_experiment
    from aitb.orchestration.runner import execute, prepare

    path = experiment or default_experiment()
    prep = prepare(path)
    if check:
        typer.echo(f"{path}: ok ({len(prep.plan.nodes)} nodes, {len(prep.workloads)} workloads)")
        return
    say = (lambda m: None) if quiet or as_json else (lambda m: console.print(f"[dim]{m}[/]"))
    outcome = execute(prep, results, progress=say)
    if as_json:
        typer.echo(json.dumps({"ok": outcome.ok, "run_dir": str(outcome.run_dir),
                               "error": outcome.error, "workloads": outcome.workloads}))
    elif not outcome.ok:
        console.print(f"[bold red]run failed:[/] {outcome.error}", markup=True, highlight=False)
    if not as_json:
        typer.echo(str(outcome.run_dir))
    if not outcome.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app``."""
    app.command("run")(run)
