"""``aitb verify RUN_DIR``: do the files a run's locality verdict rests on still hash to the
chain in its ``locality.json`` (aitb.evidence)? Exit 0 when every file matches, 1 naming each
changed or missing file, 2 when the run has no locality.json (no workload marked its data,
or the run was never analysed: ``aitb analyze RUN_DIR`` writes it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from aitb.evidence import verify_chain


def verify(
    run_dir: Annotated[Path, typer.Argument(help="Run directory, results/<experiment>/<run-id>/",
                                            show_default=False)],
) -> None:
    """Check the hash chain over the records and captures of the run's locality verdict."""
    path = run_dir / "locality.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        typer.echo(f"error: {path}: no readable locality verdict ({exc})", err=True)
        raise typer.Exit(2) from None
    problems = verify_chain(run_dir, doc.get("evidence", {}))
    if problems:
        for p in problems:
            typer.echo(f"changed: {p}", err=True)
        typer.echo(f"{run_dir}: NOT verified ({len(problems)} problem(s))")
        raise typer.Exit(1)
    n = len(doc["evidence"]["links"])
    typer.echo(f"{run_dir}: verified, {n} file(s), head {doc['evidence']['head']}; "
               f"locality verdict {doc.get('verdict')}")


def register(app: typer.Typer) -> None:
    """Add ``verify`` to ``app``."""
    app.command("verify")(verify)
