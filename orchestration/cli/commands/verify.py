"""``aitb verify RUN_DIR``: do the files a run's locality verdict rests on still hash to the
chain in its ``locality.json`` (models.evidence), does the chain cover all of them, and does the
verdict recomputed from them (analysis.locality.check_locality) match the one stated? Exit 0
when all holds, 1 naming each changed, missing or left-out file and each stated key that
differs, 2 when the run has no locality.json (no workload marked its data,
or the run was never analysed: ``aitb analyze RUN_DIR`` writes it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer


def verify(
    run_dir: Annotated[Path, typer.Argument(help="Run directory, results/<experiment>/<run-id>/",
                                            show_default=False)],
) -> None:
    """Check the hash chain over the records and captures of the run's locality verdict, and
    the verdict itself."""
    path = run_dir / "locality.json"
    if not run_dir.is_dir():
        _refuse(f"{run_dir}: " + ("not a directory (a run directory is results/<experiment>/"
                                  "<run-id>/)" if run_dir.exists() else "no such run directory"))
    if not path.is_file() and not (run_dir / "manifest.json").is_file():
        _refuse(f"{run_dir}: not a run directory (no manifest.json; runs are under "
                "results/<experiment>/<run-id>/)")
    if not path.is_file():
        _refuse(f"{run_dir}: no locality.json: no workload of the run marked its data, or the "
                f"run was not analysed (`aitb analyze {run_dir}` writes it)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        _refuse(f"{path}: no readable locality verdict ({getattr(exc, 'strerror', None) or exc})")
    from analysis.locality import check_locality  # pandas: ~0.35 s of every CLI start

    problems = check_locality(run_dir, doc)
    if problems:
        for p in problems:
            typer.echo(f"changed: {p}", err=True)
        typer.echo(f"{run_dir}: NOT verified ({len(problems)} problem(s))")
        raise typer.Exit(1)
    n = len(doc["evidence"]["links"])
    typer.echo(f"{run_dir}: verified, {n} file(s), head {doc['evidence']['head']}; "
               f"locality verdict {doc.get('verdict')}")


def _refuse(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    """Add ``verify`` to ``app``."""
    app.command("verify")(verify)
