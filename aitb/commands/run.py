"""``aitb run [EXPERIMENT]``: run one experiment and print its run directory last."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from aitb.models.errors import LabError
from testbed.capabilities import in_vm
from testbed.lab import missing_kernel_features
from testbed.vm import run_in_vm

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
    backend: Annotated[str | None, typer.Option(
        "--backend", help="native or mininet; overrides the experiment's backend: key.")
    ] = None,
    use_vm: Annotated[bool, typer.Option(
        "--auto-vm/--no-vm", help="When the lab needs qdiscs the host kernel lacks (netem), "
        "run inside the stock-kernel VM (default), or refuse.")] = True,
    analysis: Annotated[bool, typer.Option(
        "--analysis/--no-analysis", help="Analyse the run at its end (metrics.json, "
        "report.html), or skip it (`aitb analyze RUN_DIR` does it later).")] = True,
) -> None:
    """Deploy the experiment's lab, replay its workloads over real sockets, record, tear down."""
    from aitb.orchestration.defaults import default_experiment
    from aitb.orchestration.runner import execute, prepare
    from testbed.backends import check_backend

    path = experiment or default_experiment()
    if backend is not None:
        check_backend(backend, "--backend")
    prep = prepare(path)
    if check:
        typer.echo(f"{path}: ok ({len(prep.plan.nodes)} nodes, {len(prep.workloads)} workloads)")
        return
    say = (lambda m: None) if quiet or as_json else (lambda m: console.print(f"[dim]{m}[/]"))
    missing = [] if in_vm() else missing_kernel_features(prep.plan)
    if missing:
        if not use_vm:
            raise LabError(f"this lab needs {', '.join(missing)}, which the host kernel lacks; "
                           "drop --no-vm to run it in the stock-kernel VM")
        say(f"this lab needs {', '.join(missing)}, which the host kernel lacks: running it "
            "inside the stock-kernel VM (--no-vm refuses)")
        if (backend or prep.backend) != "native":
            raise LabError(f"the {backend or prep.backend} backend does not run inside the "
                           "stock-kernel VM yet; this lab needs it for "
                           f"{', '.join(missing)}")
        raise typer.Exit(_rerun_in_vm(path, results, as_json=as_json, quiet=quiet,
                                      analysis=analysis))
    outcome = execute(prep, results, progress=say, analyze=analysis, backend=backend)
    if as_json:
        typer.echo(json.dumps({"ok": outcome.ok, "run_dir": str(outcome.run_dir),
                               "error": outcome.error, "workloads": outcome.workloads,
                               "report": str(outcome.report) if outcome.report else None,
                               "analysis_error": outcome.analysis_error}))
    elif not outcome.ok:
        console.print(f"[bold red]run failed:[/] {outcome.error}", markup=True, highlight=False)
    _say_analysis(outcome, quiet=quiet or as_json)
    if not as_json:
        typer.echo(str(outcome.run_dir))
    if not outcome.ok or outcome.analysis_error:
        raise typer.Exit(1)


def _say_analysis(outcome, *, quiet: bool) -> None:
    """The report's path (stderr, unless quiet), or why the analysis failed (always)."""
    if outcome.analysis_error:
        console.print(f"[bold red]analysis failed:[/] {outcome.analysis_error}; the run is "
                      f"kept, retry with `aitb analyze {outcome.run_dir}`", markup=True,
                      highlight=False)
    elif outcome.report and not quiet:
        typer.echo(f"report: {outcome.report}", err=True)  # unwrapped: a path to copy


def _rerun_in_vm(path: Path, results: Path, *, as_json: bool, quiet: bool,
                 analysis: bool = True) -> int:
    """The same run inside the VM, with the results folder shared read-write."""
    results = results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "aitb.cli", "run", str(path.resolve()),
            "--results", str(results), *(["--json"] if as_json else []),
            *(["--quiet"] if quiet else []), *([] if analysis else ["--no-analysis"])]
    return run_in_vm(argv, rwdirs=[results], echo=True).returncode


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app``."""
    app.command("run")(run)
