"""``aitb topo import MAP.graphml|MAP.gml``: a real WAN map (Internet Topology Zoo) as an aitb
topology (topologies/wan/); the containerlab import shares the command (commands/clab.py)."""

# Modules that one command needs are imported inside it, when it runs, not at start-up:
# that keeps `aitb --help` and the other commands fast.

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from models.errors import SpecError, SpecIssue
from topologies.wan import FIBRE_US_PER_KM, Attachment, WanOptions

MAP_SUFFIXES = (".graphml", ".gml")
err = Console(emoji=False, stderr=True)


def parse_attach(text: str) -> Attachment:
    """``POP=GENERATOR`` or ``POP=GENERATOR:{key: value, ...}`` (a YAML flow mapping)."""
    pop, sep, rest = text.partition("=")
    gen, _, params = rest.partition(":")
    if not sep or not pop.strip() or not gen.strip():
        raise SpecError(SpecIssue(f"--attach {text!r}: use POP=GENERATOR or "
                                  "POP=GENERATOR:{k: 4}", key_path=("--attach",)))
    try:
        value = YAML(typ="safe").load(params) if params.strip() else {}
    except YAMLError as exc:
        raise SpecError(SpecIssue(f"--attach {text!r}: parameters are not YAML: {exc}",
                                  key_path=("--attach",))) from None
    if not isinstance(value, dict):
        raise SpecError(SpecIssue(f"--attach {text!r}: parameters must be a mapping such as "
                                  "{k: 4}", key_path=("--attach",)))
    return Attachment(pop.strip(), gen.strip(), value)


def import_map(file: Path, out: Path | None, options: WanOptions) -> None:
    """Import ``file``, print the report on standard error, write the topology to ``out``
    (standard output when None). Writes nothing when the map or an option is refused."""
    from orchestration.cli.commands.outputs import write_output_file
    from topologies.clab.yamlout import to_yaml
    from topologies.wan import import_wan

    result = import_wan(file, options)
    for issue in result.report:
        err.print(f"[bold cyan]note:[/] {escape(str(issue))}", highlight=False, soft_wrap=True)
    header = [f"aitb topology imported from the Internet Topology Zoo map {file.name} by "
              "`aitb topo import` (S. Knight et al., IEEE JSAC 29(9), 2011).",
              f"Delays: great-circle distance x stretch {options.stretch} x "
              f"{FIBRE_US_PER_KM} us/km (light in fibre)" if options.delays
              else "Delays left out (--no-delay)."]
    text = to_yaml(result.topology, header)
    if out is None:
        typer.echo(text, nl=False)
        return
    write_output_file(out, text, "--output")
    err.print(f"wrote {out} ({len(result.plan.nodes)} nodes, {len(result.plan.links)} links)",
              highlight=False)
