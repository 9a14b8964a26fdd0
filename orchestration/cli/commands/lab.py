"""``aitb topo deploy|inspect|destroy``, ``aitb exec`` and ``aitb clean``: live labs.

All need root. Run state lives under ``$AITB_STATE_DIR`` (default /run/aitb).
"""

# Modules that one command needs are imported inside it, when it runs, not at start-up:
# that keeps `aitb --help` and the other commands fast.

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from models.errors import CommandError, LabError, SpecError
from models.rundir import mark_killed
from orchestration.cli.commands.topo import line_issues_here, load_plan, topo_app
from testbed.lab import clean as clean_mod
from testbed.lab import signals
from testbed.lab.lab import Lab
from testbed.lab.registry import Registry, state_dir, unknown_name
from testbed.lab.state import describe

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def file_backend(path: Path) -> str | None:
    """The ``backend:`` key of a topology file (None if absent or a plan.json)."""
    if path.suffix == ".json":
        return None
    from topologies.loader import read_yaml

    doc, _ = read_yaml(path)
    value = doc.get("backend") if hasattr(doc, "get") else None
    return None if value is None else str(value)


BackendOpt = Annotated[str | None, typer.Option(
    "--backend", help="native (default) or mininet; overrides the file's backend: key.")]


def deploy(file: Annotated[Path, typer.Argument(help="Topology file (YAML) or a plan.json.")],
           run_id: Annotated[str | None, typer.Option("--run-id", help="Run id (a-z0-9).")
                             ] = None,
           backend: BackendOpt = None,
           cli: Annotated[bool, typer.Option(
               "--cli", help="mininet backend: open Mininet's CLI on the live lab and tear it "
               "down when the CLI exits.")] = False,
           switch: Annotated[str, typer.Option(
               "--switch", help="mininet backend: bridge (Linux bridge) or ovs (Open vSwitch;"
               " the kernel datapath where the kernel has it, else the user-space one).")
           ] = "bridge",
           controller: Annotated[str | None, typer.Option(
               "--controller", help="mininet backend, OVS switches: an OpenFlow controller "
               "target, unix:PATH (any namespace) or tcp:HOST:PORT (inside the lab); default "
               "none: aitb's own rules only.")] = None,
           line_cpu: Annotated[int | None, typer.Option(
               "--delay-line-cpu", help="give this CPU to the native delay line alone: its "
               "helpers run pinned there and the lab's receive processing moves to the other "
               "CPUs (accurate releases at ~1 Gbit/s of MTU packets; costs that CPU).")] = None,
           as_json: JsonOpt = False) -> None:
    """Bring a lab up and leave it up; prints its run id. Link traces play until destroy
    (records: link_trace.jsonl in the lab's state directory). On failure or SIGINT/SIGTERM
    everything made so far is removed (exit 130/143 on a signal); a signal that lands once
    the lab is deployed and detached (its run id printed, or about to be) leaves it up and
    still exits 130/143 (the signal came; orchestration.cli.exiting)."""
    from testbed.lab.backends import check_backend, make_lab

    plan = load_plan(file)
    issues = line_issues_here(plan, file)  # refused before anything exists, exit 2
    if issues:
        raise SpecError(issues)
    chosen = check_backend(backend or file_backend(file) or "native",
                           "--backend" if backend else f"{file}: backend")
    if chosen != "mininet" and (cli or switch != "bridge" or controller):
        raise unknown_name("--cli, --switch and --controller need --backend mininet")
    if line_cpu is not None:
        from testbed.delay.nfqueue.linecpu import check_line_cpu
        check_line_cpu(line_cpu, "--delay-line-cpu")
    opts: dict[str, Any] = {"switch": switch, "controller": controller} \
        if chosen == "mininet" else {}
    lab = make_lab(plan, chosen, run_id, state_dir(), line_cpu=line_cpu, **opts)
    with signals.raising():
        try:
            lab.up()
            if cli:
                typer.echo(f"run {lab.run_id}: Mininet CLI (exit tears the lab down)")
                lab.cli()  # type: ignore[attr-defined]
                lab.down()
                return
            from testbed.live.trace_process import start_detached

            start_detached(lab)  # plays the plan's link traces until destroy
            lab.detach()
        except BaseException:
            # a failed up() has already removed its lab (and its registry); a signal that came
            # after up() returned, even before the next statement ran, leaves a complete lab:
            # its registry still exists, and an interrupted deploy leaves nothing behind
            if lab.registry.dir.exists():
                lab.down()
            raise
    lab.release()
    if as_json:
        typer.echo(json.dumps({"run_id": lab.run_id, "lab": lab.plan.name, "backend": chosen,
                               "timings_s": lab.timings, "ovs_datapaths": lab.ovs_datapaths,
                               "delay_line_cpu": lab.line_cpu,
                               "namespaces": {
                                   n: lab.netns_name(n) for n in lab.layout.nodes}}))
    else:
        typer.echo(lab.run_id)


def inspect(run_id: str, as_json: JsonOpt = False) -> None:
    """Nodes, namespaces, interfaces with addresses, qdiscs with live counters."""
    lab = Lab.attach(run_id, state_dir())
    try:
        info = describe(lab)
    finally:
        lab.release()
    if as_json:
        typer.echo(json.dumps(info))
        return
    table = Table("node", "netns", "interface", "addresses", "qdiscs / classes")
    for node, n in info["nodes"].items():
        for i in n["interfaces"]:
            tc = [f"{q['kind']} {q['handle']} pkts={q.get('packets')} drops={q.get('drops')}"
                  + (f" rate={q['rate_bps']}" if "rate_bps" in q else "")
                  for q in i.get("qdiscs", []) + i.get("classes", [])]
            table.add_row(node, n["netns"], i["ifname"], " ".join(i.get("addresses", [])),
                          "\n".join(tc))
    _stdout_console().print(table)


# a width no table row of inspect reaches (rows are a few hundred characters); a Table that
# does not expand renders at its natural width inside it, unpadded
_PIPE_WIDTH = 100_000


def _stdout_console() -> Console:
    """rich's Console for stdout: its own width on a terminal (or from ``COLUMNS``, as rich
    reads it); on a pipe or file, where rich falls back to 80 columns and folds or truncates
    table cells with an ellipsis (rich.console.Console ``width``), one wide enough for whole
    names: each row on one line, as long as its cells."""
    console = Console(emoji=False)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(emoji=False, width=_PIPE_WIDTH)


def destroy(run_id: str, as_json: JsonOpt = False) -> None:
    """Tear a lab down (processes, namespaces, registry). Refuses while its owner process
    holds it (use `aitb clean RUN_ID --force`)."""
    if run_id not in Registry.runs(state_dir()):
        raise unknown_name(f"unknown run id {run_id!r}; known runs: "
                           f"{', '.join(Registry.runs(state_dir())) or 'none'}")
    reg = Registry(state_dir(), run_id)
    if reg.owner_alive():
        raise LabError(f"run {run_id} is held by its owner pid {reg.owner()[0]}; stop that "
                       f"process or use `aitb clean {run_id} --force`")
    report = clean_mod.teardown(reg)
    clean_mod.raise_failures(report)
    typer.echo(json.dumps(report.to_dict()) if as_json else
               f"destroyed run {run_id}: {len(report.namespaces)} namespace(s), "
               f"{len(report.processes)} process(es)")


def exec_(run_id: str, node: str,
          cmd: Annotated[list[str], typer.Argument(help="Command and arguments (after --).")]
          ) -> None:
    """Run CMD inside NODE's namespace (like `ip netns exec`); exits with CMD's status, or as
    a shell does when CMD cannot start: 127 if it is not found, 126 if it cannot be run."""
    lab = Lab.attach(run_id, state_dir())
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        lab.release()
        raise unknown_name("no command given (aitb exec RUN NODE -- CMD ...)")
    try:
        proc = lab.popen(node, cmd)
    except CommandError as exc:
        found = "/" in cmd[0] and os.path.exists(cmd[0]) or \
            "/" not in cmd[0] and shutil.which(cmd[0]) is not None
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(126 if found else 127) from None
    finally:
        lab.release()
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            continue  # the terminal's SIGINT reached CMD too; wait for it to end
    raise typer.Exit(code)


def observe(run_id: str,
            config: Annotated[str, typer.Option("--config", help="JSON (orchestration/"
                                                "cluster/observe_part.py).")]) -> None:
    """Observe a deployed lab (capture, counter sampling, fidelity probes) until a line or
    end of file on stdin: the machine's side of a cluster run (orchestration/cluster/
    observe_part.py); JSON lines on stdout."""
    import sys

    from orchestration.observe.cluster_part import observe_part

    try:
        cfg = json.loads(config)
    except ValueError as exc:
        raise unknown_name(f"--config: not JSON: {exc}") from None
    raise typer.Exit(observe_part(run_id, cfg, sys.stdin, sys.stdout))


def events(run_id: str) -> None:
    """Play event actions on a deployed lab as told on stdin until a stop or end of file:
    the machine's side of a cluster run's events (orchestration/events/cluster_part.py);
    JSON lines on stdout."""
    import sys

    from orchestration.events.cluster_part import events_part

    raise typer.Exit(events_part(run_id, sys.stdin, sys.stdout))


def clean(run_id: Annotated[str | None, typer.Argument(help="Only this run.")] = None,
          force: Annotated[bool, typer.Option("--force", help="Even if its owner is alive.")
                           ] = False,
          as_json: JsonOpt = False) -> None:
    """Remove what crashed runs left (their owner pid is dead), exactly as their registries
    list it, and the scratch dead aitb processes left outside any registry (temporary
    directories and probe namespaces whose name marks a dead owner, models.owned); with RUN_ID
    only that run (also a deployed one) and its dead owner's scratch."""
    if force and run_id is None:
        raise unknown_name("--force needs a RUN_ID: it removes a run whose owner is alive")
    run_dirs = {rid: [r["path"] for r in Registry(state_dir(), rid).records()
                      if r.get("kind") == "run_dir"]
                for rid in ([run_id] if run_id else Registry.runs(state_dir()))}
    reports, skipped = clean_mod.clean(state_dir(), run_id, force)
    for r in reports:  # the owner is dead: a run it left 'running' was killed
        for path in run_dirs.get(r.run_id, []):
            mark_killed(Path(path), "aitb clean")
    orphans: dict[str, list[str]] = {"paths": [], "namespaces": []}
    if run_id is None:  # every dead owner's scratch, not only the labs' owners'
        orphans = clean_mod.sweep_orphans(state_dir())
    out: dict[str, Any] = {"removed": [r.to_dict() for r in reports], "skipped": skipped,
                           "orphans": orphans}
    failures = [f for r in reports for f in r.failures]
    if as_json:
        typer.echo(json.dumps(out))
    else:
        for r in reports:
            typer.echo(f"run {r.run_id}: removed {len(r.namespaces)} namespace(s), "
                       f"{len(r.processes)} process(es)")
        for s in skipped:
            typer.echo(f"run {s['run_id']}: kept ({s['reason']})")
        scratch = [p for r in reports for p in r.scratch] + orphans["paths"]
        if scratch or orphans["namespaces"]:
            typer.echo(f"dead processes' scratch: removed {len(scratch)} temporary "
                       f"path(s), {len(orphans['namespaces'])} probe namespace(s)")
        if not reports and not skipped and not scratch and not orphans["namespaces"]:
            typer.echo("nothing to clean: no aitb run is registered under " + str(state_dir()))
    if failures:
        raise LabError("clean left objects behind:\n  " + "\n  ".join(failures))


def register(app: typer.Typer) -> None:
    """Add deploy/inspect/destroy to ``topo``, and ``exec`` and ``clean`` to ``app``."""
    topo_app.command("deploy")(deploy)
    topo_app.command("inspect")(inspect)
    topo_app.command("destroy")(destroy)
    topo_app.command("observe", hidden=True)(observe)
    topo_app.command("events", hidden=True)(events)
    app.command("exec", context_settings={"ignore_unknown_options": True,
                                          "allow_interspersed_args": False})(exec_)
    app.command("clean")(clean)


