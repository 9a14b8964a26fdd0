"""``aitb topo import`` and ``aitb topo export --format clab``: containerlab interop.

import reads a containerlab topology and writes an aitb topology; export writes a containerlab
topology plus a script with the lab's addresses, routes and tc shaping (topologies/clab/).
"""

# Modules that one command needs are imported inside it, when it runs, not at start-up:
# that keeps `aitb --help` and the other commands fast.

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from models.errors import SpecError, SpecIssue
from models.plan import LabPlan
from orchestration.cli.commands.topo import topo_app

FORMATS = ("clab",)
KIND_CHOICES = ("host", "router", "switch")
err = Console(emoji=False, stderr=True)


def register(app: typer.Typer) -> None:
    """The commands add themselves to ``aitb topo`` (see :data:`topo_app`)."""


def _kinds(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        node, sep, kind = pair.partition("=")
        if not sep or kind not in KIND_CHOICES:
            raise SpecError(f"--kind {pair!r}: use NODE=KIND with KIND one of "
                            f"{', '.join(KIND_CHOICES)}")
        out[node] = kind
    return out


def _warn(issues: list[SpecIssue]) -> None:
    for issue in issues:
        err.print(f"[bold yellow]warning:[/] {escape(str(issue))}", highlight=False,
                  soft_wrap=True)


@topo_app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="containerlab topology (*.clab.yml).")],
    out: Annotated[Path | None, typer.Option("-o", "--output",
                                             help="Write the aitb topology here (default: "
                                             "standard output).")] = None,
    drop_external: Annotated[bool, typer.Option(
        "--drop-external", help="Drop links that leave the lab (host, mgmt-net, macvlan, "
        "vxlan) with a warning instead of refusing the file.")] = False,
    kind: Annotated[list[str] | None, typer.Option(
        "--kind", help="NODE=host|router|switch: override the mapping of one node "
        "(repeatable).")] = None,
    stretch: Annotated[float, typer.Option(
        "--stretch", help="Maps: route-stretch factor on great-circle delays (>= 1).")] = 1.0,
    no_delay: Annotated[bool, typer.Option(
        "--no-delay", help="Maps: leave link delays out.")] = False,
    default_rate: Annotated[str, typer.Option(
        "--default-rate", help="Maps: rate of links without LinkSpeedRaw.")] = "10Gbit",
    missing_delay_us: Annotated[float | None, typer.Option(
        "--missing-delay-us", help="Maps: delay of links at PoPs without coordinates "
        "(default: none).")] = None,
    hosts_per_pop: Annotated[int, typer.Option(
        "--hosts-per-pop", min=0, help="Maps: hosts behind every PoP router.")] = 1,
    attach: Annotated[list[str] | None, typer.Option(
        "--attach", help="Maps: POP=GENERATOR[:{k: 4}] builds a DC or edge sites at a PoP "
        "(repeatable).")] = None,
) -> None:
    """Import a containerlab topology, or an Internet Topology Zoo map (.graphml, .gml), as
    an aitb topology. containerlab kinds aitb cannot run become hosts, routers or switches
    with a warning; a map's PoPs become routers with hosts, its links get great-circle
    delays and the map's rates. Exit 2 with every reason when it cannot."""
    from orchestration.cli.commands.outputs import write_output_file
    from orchestration.cli.commands.wan import MAP_SUFFIXES, import_map, parse_attach
    from topologies.wan import WanOptions

    if file.suffix.lower() in MAP_SUFFIXES:
        if drop_external or kind:
            raise SpecError("--drop-external and --kind apply to containerlab files only")
        return import_map(file, out, WanOptions(
            stretch=stretch, delays=not no_delay, missing_delay_us=missing_delay_us,
            default_rate=default_rate, hosts_per_pop=hosts_per_pop,
            attach=tuple(parse_attach(a) for a in attach or [])))
    from topologies.clab import import_clab
    from topologies.clab.yamlout import to_yaml

    result = import_clab(file, drop_external=drop_external, kinds=_kinds(kind or []))
    _warn(result.warnings)
    text = to_yaml(result.topology, [f"aitb topology imported from the containerlab file "
                                     f"{file.name} by `aitb topo import`."])
    if out is None:
        typer.echo(text, nl=False)
        return
    write_output_file(out, text, "--output")
    err.print(f"wrote {out} ({len(result.plan.nodes)} nodes, {len(result.plan.links)} links)",
              highlight=False)


def shaping_commands(plan: LabPlan) -> list:
    """aitb's tc recipe for every direction of every link of ``plan`` as
    :class:`topologies.clab.export.NodeCommand` (section "shaping"), in creation order:
    egress objects on the sender, then the IFB and the ingress objects on the receiver."""
    from testbed.lab.layout import make_layout
    from topologies.clab.export import NodeCommand

    layout = make_layout(plan, "export")
    out = []
    for recipe in layout.recipes.values():
        out += [NodeCommand(o.node, tuple(o.tc_argv()), "shaping") for o in recipe.egress]
        if recipe.ifb:
            out += [NodeCommand(recipe.rx_node, argv, "shaping") for argv in (
                ("ip", "link", "add", recipe.ifb, "type", "ifb"),
                ("ip", "link", "set", recipe.ifb, "up"))]
        out += [NodeCommand(o.node, tuple(o.tc_argv()), "shaping") for o in recipe.ingress]
    return out


def export_files(plan: LabPlan, out_dir: Path, image: str, keep_kinds: bool) -> list[Path]:
    """Write ``<lab>.clab.yml`` and ``<lab>.aitb.sh`` (mode 0755) for ``plan`` into
    ``out_dir`` (created if missing); with ``keep_kinds`` imported network-OS nodes get their
    containerlab kind back and the script shapes their links but leaves their addresses and
    routes to their own configuration. Returns both paths. Raises SpecError if ``out_dir``
    cannot be written."""
    from testbed.lab.layout import needs_wire_packets
    from topologies.clab.export import (
        clab_plan,
        network_commands,
        render_script,
        render_topology,
        vendor_nodes,
    )

    cplan = clab_plan(plan)
    topo, script = out_dir / f"{plan.name}.clab.yml", out_dir / f"{plan.name}.aitb.sh"
    skip = vendor_nodes(cplan, keep_kinds)  # network OSes configure themselves
    commands = network_commands(cplan, needs_wire_packets(cplan), skip) + shaping_commands(cplan)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        topo.write_text(render_topology(cplan, image, keep_kinds, script.name), encoding="utf-8")
        script.write_text(render_script(cplan, commands, topo.name), encoding="utf-8")
        os.chmod(script, 0o755)
    except OSError as exc:
        raise SpecError(f"cannot write the export: {exc}", file=str(out_dir)) from None
    return [topo, script]


@topo_app.command("export")
def export_cmd(
    file: Annotated[Path, typer.Argument(help="aitb topology (YAML) or a run's plan.json.")],
    fmt: Annotated[str, typer.Option("--format", help="Target: clab (containerlab).")],
    out: Annotated[Path, typer.Option("-o", "--output", help="Directory to write into.")
                   ] = Path("."),
    image: Annotated[str | None, typer.Option("--image", help="Container image of every "
                                              "node (default: network-multitool).")] = None,
    keep_kinds: Annotated[bool, typer.Option(
        "--keep-kinds", help="Nodes imported from containerlab get their original kind and "
        "image back (e.g. a vendor NOS).")] = False,
) -> None:
    """Export a topology to containerlab: a topology file plus a script that applies the
    same addresses, routes and link shaping (tc) inside containerlab's nodes."""
    from orchestration.cli.commands.topo import load_plan
    from topologies.clab.export import DEFAULT_IMAGE

    if fmt not in FORMATS:
        raise SpecError(f"--format {fmt!r}: known formats: {', '.join(FORMATS)}")
    for path in export_files(load_plan(file), out, image or DEFAULT_IMAGE, keep_kinds):
        typer.echo(f"wrote {path}")
