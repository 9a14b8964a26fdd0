"""``aitb campaign FILE``: sweep an experiment, resumable; ``--dry-run`` lists the runs."""

# Modules that one command needs are imported inside it, when it runs, not at start-up:
# that keeps `aitb --help` and the other commands fast.

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from models.errors import LabError, SpecError, SpecIssue
from orchestration.vm_rerun import cli_in_vm
from testbed.host.capabilities import in_vm
from testbed.lab.lab import missing_kernel_features

if TYPE_CHECKING:
    from orchestration.campaign.runner import Campaign, CampaignResult, Executor

console = Console(emoji=False, stderr=True)


def _dry_run(c: Campaign, results: Path, as_json: bool) -> None:
    from orchestration.campaign.state import STATE_FILE

    state_path = results / c.spec.name / STATE_FILE
    done = set()
    if state_path.exists():
        runs = json.loads(state_path.read_text(encoding="utf-8")).get("runs", {})
        done = {k for k, e in runs.items() if e.get("status") == "ok"}
    rows = [{"run": r.key, "point": r.point.id, "rep": r.rep, "seed": r.seed,
             "values": r.point.values, "done": r.key in done} for r in c.runs]
    if as_json:
        typer.echo(json.dumps({"campaign": c.spec.name, "points": len(c.points),
                               "repetitions": c.spec.repetitions, "runs": rows}))
        return
    table = Table(title=f"campaign {c.spec.name}: {len(c.points)} points x "
                        f"{c.spec.repetitions} repetitions = {len(rows)} runs")
    for col in ("run", "seed", *c.spec.swept(), "done"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["run"], str(r["seed"]), *(str(r["values"][k]) for k in c.spec.swept()),
                      "yes" if r["done"] else "")
    Console(emoji=False).print(table)


def _needs_vm(c: Campaign) -> list[str]:
    if in_vm():
        return []
    return sorted({f for plan in c.plans() for f in missing_kernel_features(plan)})


def campaign(
    file: Annotated[Path, typer.Argument(help="Campaign file (YAML).", show_default=False)],
    results: Annotated[Path, typer.Option(
        "--results", help="Folder that receives <campaign>/.")] = Path("results"),
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Validate every point, list the runs, run nothing (no root).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the campaign folder.")
                     ] = False,
    use_vm: Annotated[bool, typer.Option(
        "--auto-vm/--no-vm", help="When a point's lab needs qdiscs the host kernel lacks "
        "(netem), run the whole campaign inside the stock-kernel VM (default), or refuse.")
                      ] = True,
    executor: Annotated[str, typer.Option(
        "--executor", help="Where the runs happen: local (one after the other here) or ray "
        "(Ray tasks on a cluster's workers, orchestration/campaign/executors.py).")
                        ] = "local",
    address: Annotated[str | None, typer.Option(
        "--address", help="With --executor ray: the cluster's HOST:PORT (default: a Ray "
        "instance started here with this machine's CPUs).")] = None,
    cpus_per_point: Annotated[float, typer.Option(
        "--cpus-per-point", help="With --executor ray: CPUs one run asks for (a machine runs "
        "at most its CPUs / this many points at once).")] = 1.0,
    ray_token_file: Annotated[Path | None, typer.Option(
        "--ray-token-file", help="With --address: the file holding the cluster's Ray token "
        "(its nodes' RAY_AUTH_TOKEN_PATH; default: RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH if "
        "set, else no token; ~/.ray/auth_token is never read). A Ray instance started here "
        "gets a fresh token of its own.", show_default=False)] = None,
) -> None:
    """Run every point x repetition of a campaign not yet done, then aggregate and plot.

    Re-running the same command after a crash or Ctrl-C resumes: completed runs are kept
    untouched, an unfinished one is discarded and redone.
    """
    from orchestration.campaign.runner import load, run_campaign
    from orchestration.cli.commands.outputs import output_dir

    runs_on = _executor(executor, address, cpus_per_point, ray_token_file)
    c = load(file)
    if dry_run:
        _dry_run(c, results, as_json)
        return
    output_dir(results, "--results")
    say = ((lambda m: None) if quiet or as_json
           else (lambda m: console.print(f"[dim]{escape(m)}[/]")))
    missing = _needs_vm(c)
    if missing:
        if not use_vm:
            raise LabError(f"this campaign needs {', '.join(missing)}, which the host kernel "
                           "lacks; drop --no-vm to run it in the stock-kernel VM")
        if runs_on is not None:
            raise LabError(f"this campaign needs {', '.join(missing)}, which the host kernel "
                           "lacks; --executor ray runs points on the workers' host kernels")
        say(f"this campaign needs {', '.join(missing)}: running it inside the stock-kernel VM")
        raise typer.Exit(_rerun_in_vm(file, results, as_json=as_json, quiet=quiet))
    result = run_campaign(c, results, progress=say, executor=runs_on)
    _report(result, as_json, quiet)
    if result.failed:
        raise typer.Exit(1)


def _executor(name: str, address: str | None, cpus_per_point: float,
              ray_token_file: Path | None = None) -> Executor | None:
    """The executor named by --executor (None: local). Raises SpecError for an unknown
    name, --address or --ray-token-file without ray, --ray-token-file without --address, or
    a token that cannot be read (RayAuth.for_cluster)."""
    from orchestration.campaign.executors import EXECUTORS, RayAuth, RayExecutor

    if name not in EXECUTORS:
        raise SpecError(SpecIssue(f"--executor {name!r}: expected one of "
                                  f"{', '.join(EXECUTORS)}"))
    if name == "local":
        if address is not None:
            raise SpecError(SpecIssue("--address needs --executor ray"))
        if ray_token_file is not None:
            raise SpecError(SpecIssue("--ray-token-file needs --executor ray"))
        return None
    if cpus_per_point <= 0:
        raise SpecError(SpecIssue(f"--cpus-per-point {cpus_per_point:g}: must be > 0"))
    if address is None:
        if ray_token_file is not None:
            raise SpecError(SpecIssue("--ray-token-file needs --address: the Ray instance "
                                      "started here gets a fresh token of its own"))
        return RayExecutor(None, cpus_per_point, auth=RayAuth.fresh())
    return RayExecutor(address, cpus_per_point, auth=RayAuth.for_cluster(ray_token_file))


def _report(result: CampaignResult, as_json: bool, quiet: bool) -> None:
    if as_json:
        typer.echo(json.dumps({"root": str(result.root), "ran": result.ran,
                               "skipped": result.skipped, "failed": result.failed,
                               "untrustworthy": result.untrustworthy,
                               "discarded": [str(p) for p in result.discarded],
                               "tables": [str(p) for p in result.tables],
                               "plots": [str(p) for p in result.plots]}))
        return
    if not quiet:
        console.print(f"{len(result.ran)} runs now, {len(result.skipped)} done before, "
                      f"{len(result.failed)} failed")
        for key, err in result.failed.items():
            console.print(f"[bold red]run {escape(str(key))} failed:[/] {escape(str(err))}",
                          markup=True, highlight=False)
        if result.untrustworthy:
            console.print(f"[yellow]{len(result.untrustworthy)} run(s) untrustworthy[/], left "
                          "out of the aggregate unless a point has no other (runs.csv "
                          "trustworthy, aggregate.csv untrustworthy_reps): "
                          + escape("; ".join(f"{k}: {v}" for k, v in
                                             list(result.untrustworthy.items())[:3]))
                          + (" ..." if len(result.untrustworthy) > 3 else ""),
                          highlight=False)
        for p in [*result.tables, *result.plots]:
            console.print(str(p), highlight=False, soft_wrap=True)  # a path on one line
    typer.echo(str(result.root))


def _rerun_in_vm(file: Path, results: Path, *, as_json: bool, quiet: bool) -> int:
    """The same campaign inside the VM (one boot), the results folder shared read-write."""
    results = results.resolve()
    args = ["campaign", str(file.resolve()), "--results", str(results),
            *(["--json"] if as_json else []), *(["--quiet"] if quiet else [])]
    return cli_in_vm(args, [results], echo=True).returncode


def register(app: typer.Typer) -> None:
    """Add ``campaign`` to ``app``."""
    app.command("campaign")(campaign)
