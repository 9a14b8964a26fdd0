"""``aitb topo ...``: validate topology files and print their JSON Schema (deploy, inspect and
destroy live in orchestration/cli/commands/lab.py and add themselves to :data:`topo_app`)."""

# Modules that one command needs are imported inside it, when it runs, not at start-up:
# that keeps `aitb --help` and the other commands fast.

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from models.errors import SpecError, SpecIssue, short_repr
from models.plan import LabPlan, PlanError, plan_from_dict, plan_to_dict
from models.specfile import load_json

topo_app = typer.Typer(help="Topologies: validate, deploy, inspect, destroy.",
                       no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``topo`` group to ``app``."""
    app.add_typer(topo_app, name="topo")


def line_issues_here(plan: LabPlan, file: Path) -> list[SpecIssue]:
    """What the delay line each direction of ``plan`` gets on this host cannot do (duplicate,
    delay correlation, a line between two OVS switches, one beyond the memory cap:
    testbed.delay.nfqueue.labline.plan_problems), one issue each naming ``file``, link, direction
    and key. Needs root: probes this kernel's netem and the native line (once per process)."""
    from testbed.delay.nfqueue.choose import resolve_here
    from testbed.delay.nfqueue.labline import plan_problems

    return [SpecIssue(p, file=str(file)) for p in plan_problems(resolve_here(plan))]


def load_plan(path: Path) -> LabPlan:
    """A topology file through ``topologies.load_topology``, or a run's ``plan.json``
    (checked like a topology file: every name through models.plan.plan_problems). Raises
    SpecError naming the file and each problem."""
    if path.suffix == ".json":
        data = load_json(path)
        try:
            return plan_from_dict(data)
        except PlanError as exc:
            raise SpecError([SpecIssue(p, file=str(path)) for p in exc.problems]) from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SpecError(f"not a plan.json (models.plan.plan_to_dict): {type(exc).__name__} "
                            f"{short_repr(str(exc))}", file=str(path)) from None
    from topologies import load_topology

    return load_topology(path)


def plan_summary(plan: LabPlan) -> dict[str, Any]:
    """Counts that describe ``plan``: nodes by kind, links, shaped links, whether any direction
    has delay or impairments (``needs_netem``, named before aitb had its native line) and how
    many per delay line asked for (``delay_lines``), subnets and routes."""
    directions = [s for lk in plan.links for s in (lk.a_to_b, lk.b_to_a)]
    subnets = {ep.ipv4.network for lk in plan.links for ep in (lk.a, lk.b) if ep.ipv4}
    return {
        "name": plan.name, "source": plan.source,
        "nodes": dict(sorted(Counter(n.kind for n in plan.nodes).items())),
        "links": len(plan.links),
        "shaped_links": sum(lk.a_to_b.is_shaped or lk.b_to_a.is_shaped for lk in plan.links),
        "needs_netem": any(s.needs_netem for s in directions),
        # directions with delay or impairments, by the delay line asked for (auto|netem|native)
        "delay_lines": dict(sorted(Counter(lk.delay_line for lk in plan.links
                                           for s in (lk.a_to_b, lk.b_to_a)
                                           if s.needs_netem).items())),
        "subnets": len(subnets),
        "routes": sum(len(n.routes) for n in plan.nodes),
    }


def _print_summary(s: dict[str, Any]) -> None:
    kinds = ", ".join(f"{n} {k}{'' if n == 1 else 'es' if k.endswith('ch') else 's'}"
                      for k, n in s["nodes"].items())
    typer.echo(f"{s['source']}: ok: lab {s['name']!r}")
    typer.echo(f"  nodes:   {kinds}")
    typer.echo(f"  links:   {s['links']} ({s['shaped_links']} shaped)")
    lines = s["delay_lines"]
    asked = ", ".join(f"{n} {line}" for line, n in lines.items())
    typer.echo(f"  delay:   {sum(lines.values())} directions with delay or impairments"
               + (f" (delay_line: {asked}; auto is netem where the kernel has it, else aitb's "
                  "native line)" if lines else ""))
    typer.echo(f"  subnets: {s['subnets']}, static routes: {s['routes']}")


@topo_app.command("validate")
def validate(
    file: Annotated[Path, typer.Argument(help="Topology file (YAML) or a run's plan.json.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON object.")] = False,
    plan: Annotated[bool, typer.Option("--plan", help="Print JSON with the resolved plan "
                                       "(addresses, routes, shaping); implies --json.")]
    = False,
) -> None:
    """Check FILE and resolve it (addresses, routes, shaping); create nothing. As root, also
    what the delay line this host gives each direction cannot do (as `topo deploy` refuses).

    Exit status 0 when valid, 2 with every problem listed (file:line: key.path: message).
    """
    as_json = as_json or plan

    try:
        lab = load_plan(file)
        issues = line_issues_here(lab, file) if os.geteuid() == 0 else []
        if issues:
            raise SpecError(issues)
    except SpecError as exc:
        if not as_json:
            raise
        errors = [i.to_dict() for i in exc.issues]
        typer.echo(json.dumps({"ok": False, "errors": errors}, indent=2))
        raise typer.Exit(exc.exit_code) from None
    summary = plan_summary(lab)
    if as_json:
        out = {"ok": True, **summary, **({"plan": plan_to_dict(lab)} if plan else {})}
        typer.echo(json.dumps(out, indent=2))
    else:
        _print_summary(summary)


@topo_app.command("schema")
def schema(
    write: Annotated[bool, typer.Option("--write", help="Rewrite the committed schema file.")]
    = False,
) -> None:
    """Print the JSON Schema of topology files (or rewrite topologies/schema/ with --write)."""
    from topologies.schema_gen import schema_text, write_schema

    if write:
        typer.echo(f"wrote {write_schema()}")
    else:
        typer.echo(schema_text(), nl=False)
