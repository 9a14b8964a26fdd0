"""``aitb run [EXPERIMENT]``: run one experiment and print its run directory last.

Exit codes: 0 the run finished (its fidelity verdict is in fidelity.json and the output),
1 the run failed (its directory keeps manifest.json, error.json, partial records, run.log),
2 bad input (experiment, topology or workload file; nothing was created), 130/143
interrupted by SIGINT/SIGTERM (lab torn down, no analysis; `aitb analyze` can follow).
Output: progress on stderr; stdout carries only the run directory (last line) or, with
``--json``, one JSON object.
"""

# Modules that one command needs are imported inside it, when it runs, not at start-up:
# that keeps `aitb --help` and the other commands fast.

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from models.errors import SpecError, SpecIssue
from models.rundir import finite
from orchestration.cli.commands.run_progress import StepProgress
from orchestration.vm_rerun import cli_in_vm
from testbed.host.capabilities import in_vm
from testbed.lab import signals
from testbed.lab.lab import missing_kernel_features
from testbed.vm.kernel import SETUP_REMEDY, vm_problems

console = Console(emoji=False, stderr=True)
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
_VM_RUN_TIMEOUT_S = 24 * 3600.0


def run(
    experiment: Annotated[Path | None, typer.Argument(
        help="Experiment file (YAML); default: the built-in quickstart.",
        show_default=False)] = None,
    results: Annotated[Path, typer.Option(
        "--results", help="Folder that receives <experiment>/<run-id>/.")] = Path("results"),
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object on stdout (ok, run_dir, error, trustworthy, "
        "exit_code, workloads); no progress.")] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="No progress; only errors on stderr, the run directory on "
        "stdout.")] = False,
    check: Annotated[bool, typer.Option(
        "--check", help="Validate and build the experiment, create nothing, exit.")] = False,
    backend: Annotated[str | None, typer.Option(
        "--backend", help="native or mininet; overrides the experiment's backend: key.")
    ] = None,
    use_vm: Annotated[bool, typer.Option(
        "--auto-vm/--no-vm", help="When the lab needs qdiscs the host kernel lacks (netem), "
        "run inside the stock-kernel VM (default), or refuse.")] = True,
    run_id: Annotated[str | None, typer.Option(
        "--run-id", hidden=True, help="Run id to use (the VM path passes the host's).")] = None,
    analysis: Annotated[bool, typer.Option(
        "--analysis/--no-analysis", help="Analyse the run at its end (metrics.json, "
        "report.html), or skip it (`aitb analyze RUN_DIR` does it later).")] = True,
) -> None:
    """Deploy the experiment's lab, replay its workloads over real sockets, record, check
    fidelity, tear down. Exit codes: 0 ok, 1 run failed, 2 bad input, 130/143 interrupted."""
    try:  # SIGINT/SIGTERM at any instant: aitb's own exit 130/143, never death by signal
        with signals.raising():
            _run(experiment, results, as_json, quiet, check, backend, use_vm, run_id,
                 analysis)
    except signals.LabInterrupted as exc:
        console.print(f"[bold red]run interrupted[/] by {signal.Signals(exc.signum).name}",
                      markup=True, highlight=False)
        raise typer.Exit(exc.exit_code) from None


def _run(experiment: Path | None, results: Path, as_json: bool, quiet: bool, check: bool,
         backend: str | None, use_vm: bool, run_id: str | None, analysis: bool) -> None:
    """The body of :func:`run` (under :func:`testbed.lab.signals.raising`)."""
    from orchestration.cli.commands.outputs import output_dir
    from orchestration.run.defaults import default_experiment
    from orchestration.run.runner import execute, prepare
    from testbed.lab.backends import check_backend

    path = experiment or default_experiment()
    if backend is not None:
        check_backend(backend, "--backend")
    try:
        prep = prepare(path)
    except SpecError as exc:
        if not as_json:
            raise
        _emit({"ok": False, "run_dir": None, "error": str(exc), "exit_code": EXIT_BAD_INPUT,
               "issues": [i.to_dict() for i in exc.issues]})
        raise typer.Exit(EXIT_BAD_INPUT) from None
    # a cluster lab's kernels are the machines' (each deploys its part with its own aitb)
    missing = [] if in_vm() or prep.spec.cluster else missing_kernel_features(prep.plan)
    if missing and not use_vm:
        raise SpecError(f"this lab needs {', '.join(missing)}, which the host kernel lacks; "
                        "drop --no-vm to run it in the stock-kernel VM", file=str(path))
    if missing and (vm_missing := vm_problems()):  # refused before a run directory exists
        raise SpecError(f"this lab needs {', '.join(missing)}, which the host kernel lacks, "
                        "and the stock-kernel VM that has them is not set up: "
                        f"{'; '.join(vm_missing)}; {SETUP_REMEDY}", file=str(path))
    if not missing:  # the VM's kernel has its own list; checked there
        _check_congestion_control(prep, path)
        if prep.spec.cluster is None:  # a cluster's machines probe their own kernels
            _check_node_sysctls(prep, path)  # (Lab.up of each part, before it exists)
        _check_delay_lines(prep, path)
    _check_images(prep, path)
    if check:
        if as_json:
            _emit({"ok": True, "run_dir": None, "error": None, "exit_code": EXIT_OK,
                   "nodes": len(prep.plan.nodes), "workloads": len(prep.workloads)})
        else:
            typer.echo(f"{path}: ok ({len(prep.plan.nodes)} nodes, "
                       f"{_count(len(prep.workloads), 'workload')})")
        return
    output_dir(results, "--results")
    if missing:
        if not (quiet or as_json):
            console.print(f"this lab needs {escape(', '.join(missing))}, which the host kernel "
                          "lacks: running it inside the stock-kernel VM (--no-vm refuses)")
        raise typer.Exit(_rerun_in_vm(path, results / prep.spec.name, results,
                                      as_json=as_json, quiet=quiet, analysis=analysis,
                                      backend=backend))
    with StepProgress(console, quiet=quiet or as_json) as step:
        outcome = execute(prep, results, progress=step, analyze=analysis, backend=backend,
                          run_id=run_id)
    code = outcome.exit_code or (EXIT_FAILED if outcome.analysis_error else EXIT_OK)
    if as_json:
        _emit({"ok": outcome.ok, "run_dir": str(outcome.run_dir), "error": outcome.error,
               "trustworthy": outcome.trustworthy, "exit_code": code,
               "workloads": outcome.workloads,
               "report": str(outcome.report) if outcome.report else None,
               "analysis_error": outcome.analysis_error})
    else:
        _summary(outcome, quiet)
        _say_analysis(outcome, quiet=quiet)
        typer.echo(str(outcome.run_dir))
    raise typer.Exit(code)


_CC_AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def _check_congestion_control(prep: Any, path: Path) -> None:
    """Refuse, before anything exists, a ``transport.tcp_congestion_control`` this kernel does
    not offer (it would only fail inside the agents). Raises SpecError naming file and key.
    (A kernel with loadable modules may offer more once one is loaded; this host's list is
    what its kernel has now.)"""
    want = prep.spec.transport.tcp_congestion_control
    if want is None or not _CC_AVAILABLE.exists():
        return
    have = _CC_AVAILABLE.read_text().split()
    if want not in have:
        raise SpecError([SpecIssue(
            f"congestion control {want!r} is not available in this kernel; available: "
            f"{', '.join(have)}", file=str(path),
            key_path=("transport", "tcp_congestion_control"))])


def _check_node_sysctls(prep: Any, path: Path) -> None:
    """Refuse, before anything exists, node sysctls (and tcp_congestion_control) that a
    network namespace on this kernel lacks, keeps read-only (global keys) or refuses
    (:func:`testbed.ns.sysctl_probe.namespace_problems`; probed in a throwaway namespace, needs
    root). Raises SpecError naming file, nodes, key and why."""
    from testbed.ns.sysctl_probe import namespace_problems

    problems = namespace_problems(prep.plan)
    if problems:
        raise SpecError([SpecIssue(p, file=str(prep.plan.source or path)) for p in problems])


def _check_delay_lines(prep: Any, path: Path) -> None:
    """Refuse, before anything exists, what the delay line chosen for each link on this host
    cannot do (native: duplicate, delay correlation, links between two OVS switches, lines
    beyond its memory cap; the events: it could not play live), naming link, direction and
    key (and the event)."""
    from orchestration.cli.commands.topo import line_issues_here
    from orchestration.events.spec import line_problems
    from testbed.delay.nfqueue.choose import lines_of, resolve_here

    # the topology's own file where it has one (else the experiment's topology.inline)
    issues = line_issues_here(prep.plan, Path(prep.plan.source or path))
    plan = resolve_here(prep.plan)  # its probes are cached: line_issues_here made them
    problems = line_problems(plan, prep.events)  # the experiment's events and keys
    if prep.spec.delay_line_cpu is not None and "native" not in lines_of(plan).values():
        problems.append(f"delay_line_cpu {prep.spec.delay_line_cpu}: no link direction uses "
                        "the native delay line on this host (each delay is netem's, or there "
                        "is none): nothing would use that CPU")
    issues += [SpecIssue(p, file=str(path)) for p in problems]
    if issues:
        raise SpecError(issues)


def _check_images(prep: Any, path: Path) -> None:
    """Refuse, before anything exists, container hosts whose image the running docker engine
    does not have (no registry is reachable: images are built locally). Without a running
    engine nothing is checked here: the lab starts one and refuses a missing image before
    its first namespace. Raises SpecError naming file, node and image."""
    boxes = [n for n in prep.plan.nodes if n.image]
    if not boxes:
        return
    from testbed.containers.dockerd import client, missing_images

    cli = client()
    if cli is None:
        return
    lacking = missing_images(cli, [n.image for n in boxes])
    if lacking:
        raise SpecError([SpecIssue(
            f"node {n.name}: image {n.image!r} is not in the local docker engine (no registry "
            "is reachable: build it locally, e.g. `aitb image build`)", file=str(path))
            for n in boxes if n.image in lacking])


def _count(n: int, noun: str) -> str:
    """``1 workload``, ``3 workloads``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _emit(doc: dict[str, Any]) -> None:
    typer.echo(json.dumps(finite(doc), allow_nan=False))


def _summary(outcome: Any, quiet: bool) -> None:
    """The verdict on stderr: failure always, fidelity unless quiet."""
    if not outcome.ok:
        verdict = "run interrupted" if outcome.exit_code >= 128 else "run failed"
        console.print(f"[bold red]{verdict}:[/] {escape(str(outcome.error))}", markup=True,
                      highlight=False)
    if outcome.exit_code >= 128:  # no verdict on a run that was cut short
        return
    if quiet or not outcome.run_dir.joinpath("fidelity.json").exists():
        return
    if outcome.trustworthy is None:
        console.print("fidelity: not assessed (nothing could be measured; fidelity.json)")
        return
    if outcome.trustworthy:
        passed, missing = _coverage(outcome.run_dir / "fidelity.json")
        console.print("[green]fidelity: passed where checked"
                      + (f" ({escape(passed)})" if passed else "") + ", CPU not saturated[/]"
                      + (f"; not exercised: {escape(missing)}" if missing else "")
                      + " (fidelity.json)", highlight=False)
    else:
        console.print("[yellow]fidelity: NOT trustworthy[/] - see fidelity.json "
                      "(reasons, per-link checks)", highlight=False)


def _coverage(path: Path) -> tuple[str, str]:
    """(checks that ran, checks that did not) of fidelity.json at ``path`` in words
    (analysis.fidelity.coverage_words); ("", "") if it cannot be read."""
    from analysis.fidelity import check_coverage, coverage_words

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return coverage_words(doc.get("coverage") or check_coverage(doc.get("links") or []))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "", ""


def _say_analysis(outcome, *, quiet: bool) -> None:
    """The report's path (stderr, unless quiet), or why the analysis failed (always)."""
    if outcome.analysis_error:
        console.print(f"[bold red]analysis failed:[/] {escape(str(outcome.analysis_error))}; "
                      f"the run is kept, retry with `aitb analyze "
                      f"{escape(str(outcome.run_dir))}`", markup=True, highlight=False)
    elif outcome.report and not quiet:
        typer.echo(f"report: {outcome.report}", err=True)  # unwrapped: a path to copy


def _rerun_in_vm(path: Path, experiment_dir: Path, results: Path, *, as_json: bool,
                 quiet: bool, analysis: bool = True, backend: str | None = None) -> int:
    """The same run inside the VM (on ``backend`` if given, either one: the guest has the
    host's Mininet and Open vSwitch), with the results folder shared read-write; its
    analysis then runs here on the host (pandas and matplotlib under the VM's software
    emulation take minutes). Returns the exit code."""
    from models.rundir import new_run_id
    from orchestration.run.runner import analyze_finished

    results = results.resolve()
    run_id = new_run_id()
    args = ["run", str(path.resolve()), "--results", str(results), "--run-id", run_id,
            "--no-analysis",
            *(["--backend", backend] if backend else []),
            *(["--json"] if as_json else []), *(["--quiet"] if quiet else [])]
    run_dir = experiment_dir.resolve() / run_id
    try:  # SIGINT/SIGTERM: the VM (its own process group) is ended, then we exit 130/143
        with signals.raising():
            # no VM-level deadline of its own: the experiment's phase and transfer timeouts
            res = cli_in_vm(args, [results], echo=not as_json, timeout_s=_VM_RUN_TIMEOUT_S)
    except signals.LabInterrupted as exc:
        if not (run_dir / "manifest.json").exists():  # the VM was still booting
            console.print(f"[bold red]run interrupted[/] by {signal.Signals(exc.signum).name} "
                          "before the run began in the VM; nothing was created",
                          markup=True, highlight=False)
            if as_json:
                _emit({"ok": False, "run_dir": None, "error": str(exc),
                       "exit_code": exc.exit_code})
            return exc.exit_code
        _mark_interrupted(run_dir, exc)
        console.print(f"[bold red]run interrupted:[/] {escape(str(exc))}", markup=True,
                      highlight=False)
        if as_json:
            _emit({"ok": False, "run_dir": str(run_dir), "error": str(exc),
                   "exit_code": exc.exit_code})
        else:
            typer.echo(str(run_dir))
        return exc.exit_code
    code = res.returncode
    report, error = None, None
    if analysis and code < 128 and (run_dir / "manifest.json").exists():
        with StepProgress(console, quiet=quiet or as_json) as step:
            report, error = analyze_finished(run_dir, step)
        code = code or (EXIT_FAILED if error else EXIT_OK)
    if as_json:
        doc = _last_json(res.stdout) or {"ok": False, "run_dir": str(run_dir),
                                         "error": res.stderr[-2000:]}
        _emit({**doc, "exit_code": code, "report": str(report) if report else None,
               "analysis_error": error})
    elif report or error:
        _say_analysis(SimpleNamespace(report=report, analysis_error=error, run_dir=run_dir),
                      quiet=quiet)
    return code


def _mark_interrupted(run_dir: Path, exc: Exception) -> None:
    """The manifest of a run whose VM was stopped says so (the guest could not)."""
    from models.rundir import write_json_atomic

    path = run_dir / "manifest.json"
    if not path.exists():
        return
    manifest = json.loads(path.read_text())
    manifest.update(status="interrupted", error=f"{exc}; the stock-kernel VM was stopped")
    write_json_atomic(path, manifest)
    write_json_atomic(run_dir / "error.json", {"error": manifest["error"],
                                               "type": type(exc).__name__})


def _last_json(stdout: str) -> dict[str, Any] | None:
    """The JSON object ``aitb run --json`` printed (its last non-empty line), or None."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app``."""
    app.command("run")(run)
