"""``aitb workload ...``: inspect the schedule a workload will produce, before running it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from models.errors import SpecError, SpecIssue
from models.units import format_duration, format_size
from workloads.spec import load_schedule
from workloads.summary import summarise

workload_app = typer.Typer(help="Workloads: inspect schedules (training, AICB files).",
                           no_args_is_help=True)


def _subset(text: str | None) -> int | None:
    """``dp=N`` -> N (keep the first N data-parallel replicas)."""
    if text is None:
        return None
    key, _, value = text.partition("=")
    if key.strip() != "dp" or not value.strip().isdigit() or int(value) < 1:
        raise SpecError(SpecIssue(f"--subset {text!r}: expected dp=N with N >= 1 (keep the "
                                  "first N data-parallel replicas)", key_path=("--subset",)))
    return int(value)


@workload_app.command("inspect")
def inspect(
    spec_or_file: Annotated[Path, typer.Argument(
        help="AICB .csv/.txt file, Chakra .et/.et.gz trace or YAML spec.")],
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object."),
    scale: float | None = typer.Option(None, "--scale", help="Divide every size by this."),
    subset: str | None = typer.Option(None, "--subset", help="dp=N: keep N DP replicas."),
    world_size: int | None = typer.Option(
        None, "--world-size", help="World size for AICB files that lack it; ranks that replay "
        "a Chakra trace."),
) -> None:
    """Summarise one iteration: collectives per (op, group), bytes, compute time."""
    if scale is not None and scale < 1:
        raise SpecError(SpecIssue(f"--scale {scale}: must be at least 1", key_path=("--scale",)))
    if not spec_or_file.is_file():
        raise SpecError("no such file" if not spec_or_file.exists() else "not a regular file",
                        file=str(spec_or_file))
    s = load_schedule(spec_or_file, scale=scale, dp_replicas=_subset(subset),
                      world_size=world_size)
    summary = summarise(s)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
        return
    _print(summary)


def _print(summary: dict) -> None:
    console = Console(emoji=False)
    console.print(f"[bold]{escape(str(summary['name']))}[/]  world {summary['world_size']}  "
                  "iterations "
                  f"{summary['iterations']}  compute/iteration "
                  f"{format_duration(summary['compute_s_per_iteration'])}  scale "
                  f"{summary['meta'].get('scale', 1.0)}", highlight=False)
    table = Table("op", "group", "group size", "communicators", "count", "bytes",
                  title="per communicator, per iteration")
    for r in summary["collectives"]:
        table.add_row(r["op"], r["group"], str(r["group_size"]), str(r["instances"]),
                      str(r["count"]), format_size(r["total_bytes"]))
    console.print(table)
    if summary.get("stages"):
        console.print(_stage_rows(summary["stages"]))


def _stage_rows(rows: list[dict]) -> Table:
    table = Table("stage", "op", "group", "group size", "communicators", "count", "bytes",
                  title="per pipeline stage, per communicator, per iteration")
    for r in rows:
        table.add_row(r["stage"], r["op"], r["group"], str(r["group_size"]),
                      str(r["instances"]), str(r["count"]), format_size(r["total_bytes"]))
    return table


def register(app: typer.Typer) -> None:
    """Add the ``workload`` group to ``app``."""
    app.add_typer(workload_app, name="workload")
