"""``aitb calibrate`` (measure this machine) and ``aitb plan-capacity FILE`` (does a lab fit,
how many machines, where to cut): orchestration/capacity/."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from models.errors import SpecError, SpecIssue
from models.plan import LabPlan
from orchestration.capacity.model import CALIBRATION_FILE

console = Console(emoji=False, stderr=True)


def _state_dir() -> Path:
    from testbed.lab.registry import state_dir

    return state_dir()


def calibrate(
    out: Annotated[Path | None, typer.Option(
        "--out", help="Where to write the calibration (default: <state dir>/calibration.json)."
    )] = None,
    hosts: Annotated[int, typer.Option("--hosts", help="Hosts of the bring-up lab.")] = 16,
    seconds: Annotated[float, typer.Option("--seconds", help="Length of the HTB flow.")] = 3.0,
) -> None:
    """Measure this machine's limits for plan-capacity (needs root; two small labs)."""
    from orchestration.capacity.measure import calibrate as measure
    from orchestration.capacity.model import save_calibration
    from orchestration.cli.commands.outputs import output_file

    path = out or _state_dir() / CALIBRATION_FILE
    output_file(path, "--out")  # before the minutes of measuring, not after them
    cal = measure(_state_dir(), hosts, seconds,
                  progress=lambda m: console.print(f"[dim]{escape(m)}[/]"))
    try:
        save_calibration(cal, path)
    except OSError as exc:  # it changed during the measuring
        raise SpecError(f"--out: cannot write this file: {exc.strerror}",
                        file=str(path)) from None
    typer.echo(json.dumps(dataclasses.asdict(cal), indent=2))
    typer.echo(str(path))


def _plan_of(file: Path) -> tuple[LabPlan, list[tuple[str, str]]]:
    """The lab plan of a topology or experiment file (an experiment's is scaled) and the
    (node, ifname) its capture records (none for a topology file)."""
    from orchestration.run.runner import prepare
    from topologies import load_topology
    from topologies.loader import read_yaml

    doc, _ = read_yaml(file, "a topology or an experiment")
    if isinstance(doc, dict) and "workloads" in doc:
        prep = prepare(file)
        return prep.plan, [(p.node, p.ifname) for p in prep.observe.points]
    return load_topology(file), []


def plan_capacity(
    file: Annotated[Path, typer.Argument(help="Topology or experiment file (YAML).",
                                         show_default=False)],
    machines: Annotated[int | None, typer.Option(
        "--machines", help="Machines to cut the lab over (default: as many as it needs).")
                        ] = None,
    calibration: Annotated[Path | None, typer.Option(
        "--calibration", help="Calibration file (default: <state dir>/calibration.json, "
        "written by aitb calibrate).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON object.")] = False,
) -> None:
    """Say whether a lab fits this machine at fidelity, how many machines it needs and where
    the cut goes (orchestration/capacity/model.py for the model). No root."""
    from orchestration.capacity.cut import cut
    from orchestration.capacity.model import demand, load_calibration, verdict

    if machines is not None and machines < 1:
        raise SpecError(SpecIssue(f"--machines {machines}: must be >= 1"))
    path = calibration or _state_dir() / CALIBRATION_FILE
    try:
        cal = load_calibration(path)
    except ValueError as exc:
        raise SpecError(SpecIssue(str(exc), file=str(path))) from None
    plan, captured = _plan_of(file)
    d = demand(plan, captured=captured)
    v = verdict(d, cal)
    c = cut(plan, machines or v.machines)
    if as_json:
        typer.echo(json.dumps({"lab": plan.name, "calibration": str(path),
                               "demand": dataclasses.asdict(d),
                               "verdict": dataclasses.asdict(v),
                               "cut": {"machines": len(c.parts), "by": c.by,
                                       "nodes_per_machine": [len(p) for p in c.parts],
                                       "parts": [list(p) for p in c.parts],
                                       "cut_links": list(c.cut_links),
                                       "cut_bps": c.cut_bps}}))
        return
    fit = "fits one machine at fidelity" if v.fits_one else \
        f"needs {v.machines} machines like {cal.host}"
    typer.echo(f"{plan.name}: {d.nodes} nodes, {d.links} links, {d.hosts} hosts; {fit}")
    typer.echo(f"  cores: HTB {v.cores_htb:.1f}, delay line {v.cores_delay:.1f}, agents "
               f"{v.cores_agents:.1f}, capture {v.cores_capture:.1f} = "
               f"{v.cores_needed:.1f} of {cal.cores} per machine; "
               f"bring-up {v.bringup_s:.1f} s on one machine")
    for r in v.reasons:
        typer.echo(f"  {r}")
    if len(c.parts) > 1:
        sizes = [len(p) for p in c.parts]
        typer.echo(f"  cut over {len(c.parts)} machines by {c.by}: {min(sizes)} to "
                   f"{max(sizes)} nodes each; {len(c.cut_links)} links cut "
                   f"({c.cut_bps / 1e9:g} Gbit/s), each a VXLAN tunnel (MTU - 50)")


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` and ``plan-capacity`` to ``app``."""
    app.command("calibrate")(calibrate)
    app.command("plan-capacity")(plan_capacity)
