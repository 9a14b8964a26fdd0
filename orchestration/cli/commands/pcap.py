"""``aitb pcap FILE...``: per-flow table, retransmission summary and goodput of captures.

Standalone inspection of pcap/pcapng files from anywhere; no root. ``--json`` prints one
object: ``packets`` (frames in all files), ``flows`` (every flow, each tagged with its
``file``), ``warnings`` (damage, each with ``file``, ``offset``, ``what``) and ``files``.
Flow times (``start_s``, ``end_s``) are seconds since the first packet of that flow's file
(``files[i].start_ns`` is that instant in ns since the epoch); ``fct_s`` and ``goodput_bps``
are null where undefined (UDP, connections without payload); definitions in
:mod:`analysis.tcpflows.summary` and :mod:`analysis.tcpflows.connection`. A damaged file
still gives its results, with a warning, and exit status 0; a missing or non-capture file
is an error naming it (exit 2) and nothing is analysed. Duplicate captures (flows at least
half of whose frames came twice), invalid and out-of-order timestamps are whole-file warnings
(``offset`` null). The table ends with what FCT means and why a capture's retransmission
count can differ from the run's records. The work is done in
:mod:`orchestration.cli.pcap_output`; ``aitb pcap`` starts without the rest of the CLI
(:mod:`orchestration.cli.entry`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestration.cli.pcap_output import pcap_command


def register(app: typer.Typer) -> None:
    """Add the ``pcap`` command to ``app``."""
    app.command("pcap")(pcap)


def pcap(
    files: Annotated[list[Path], typer.Argument(help="pcap or pcapng files",
                                                show_default=False)],
    as_json: Annotated[bool, typer.Option("--json",
                                          help="Print one JSON object to stdout.")] = False,
) -> None:
    """Inspect captures: per-flow table, retransmission summary and goodput."""
    pcap_command(files, as_json)
