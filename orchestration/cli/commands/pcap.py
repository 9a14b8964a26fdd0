"""``aitb pcap FILE...``: per-flow table, retransmission summary and goodput of captures.

Standalone inspection of pcap/pcapng files from anywhere; no root. ``--json`` prints one
object: ``packets`` (frames in all files), ``flows`` (every flow, each tagged with its
``file``), ``warnings`` (damage, each with ``file``, ``offset``, ``what``) and ``files``.
Flow times (``start_s``, ``end_s``) are seconds since the first packet of that flow's file
(``files[i].start_ns`` is that instant in ns since the epoch); ``fct_s`` and ``goodput_bps``
are null where undefined (UDP, connections without payload); definitions in
:mod:`analysis.tcpflows.summary` and :mod:`analysis.tcpflows.connection`. A damaged file
still gives its results, with a warning, and exit status 0; a missing or non-capture file
is an error naming it (exit 2) and nothing is analysed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from aitb.errors import SpecError
from aitb.units import format_duration, format_size
from analysis.tcpflows import CaptureAnalysis, analyse_capture


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
    for path in files:  # check every file before reading any
        if not os.access(path, os.R_OK) or not path.is_file():
            why = "no such file" if not path.exists() else "not a readable file"
            raise SpecError(f"cannot read capture file: {why}", file=str(path))
    results = [analyse_capture(p) for p in files]
    if as_json:
        typer.echo(json.dumps(combined(results), indent=1))
    else:
        # never narrower than the table: rich would drop the flow column (a terminal wraps)
        width = Console().width if sys.stdout.isatty() else 0
        show(results, Console(width=max(width, 180)))


def combined(results: list[CaptureAnalysis]) -> dict[str, object]:
    """The ``--json`` object for several analysed files (see the module docstring)."""
    flows, warnings, files = [], [], []
    for res in results:
        d = res.to_dict()
        flows += [{"file": res.path, **f} for f in d.pop("flows")]
        warnings += [{"file": res.path, **w} for w in d.pop("warnings")]
        files.append(d)
    return {"packets": sum(r.packets for r in results), "flows": flows,
            "warnings": warnings, "files": files}


def _rate(bps: float | None) -> str:
    if bps is None:
        return "-"
    for div, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bps >= div:
            return f"{bps / div:.3g} {unit}"
    return f"{bps:.3g} bit/s"


def _dur(s: float | None) -> str:
    return "-" if s is None else format_duration(s)


def show(results: list[CaptureAnalysis], console: Console) -> None:
    """Print the per-flow table and the retransmission summary of each file."""
    for res in results:
        console.print(f"[bold]{res.path}[/]: {res.format}, {res.packets} packets, "
                      f"{len(res.flows)} flows", highlight=False)
        console.print(_table(res.flows))
        tcp = [f for f in res.flows if f["proto"] == "tcp"]
        tot = {k: sum(f[k] for f in tcp) for k in (
            "retransmissions", "fast_retransmissions", "rto_retransmissions",
            "spurious_retransmissions", "dup_acks", "zero_windows", "payload_bytes")}
        console.print(
            f"retransmissions: {tot['retransmissions']} (fast {tot['fast_retransmissions']}, "
            f"RTO {tot['rto_retransmissions']}, spurious {tot['spurious_retransmissions']}); "
            f"dup ACKs {tot['dup_acks']}; zero windows {tot['zero_windows']}; "
            f"TCP payload {format_size(tot['payload_bytes'])}", highlight=False)
        for w in res.warnings:
            console.print(f"[yellow]warning:[/] {res.path}: offset {w.offset}: {w.what}",
                          highlight=False)


def _table(flows: list[dict[str, object]]) -> Table:
    table = Table(show_lines=False, box=None)
    for col in ("proto", "a -> b", "pkts", "payload a>b", "payload b>a", "FCT", "goodput",
                "retx fast/RTO/spur", "dupACK", "0win", "RTT mean"):
        left = col in ("proto", "a -> b")
        table.add_column(col, justify="left" if left else "right", no_wrap=not left,
                         overflow="fold")
    for f in flows:
        retx = (f"{f['retransmissions']} ({f['fast_retransmissions']}/"
                f"{f['rto_retransmissions']}/{f['spurious_retransmissions']})")
        table.add_row(
            str(f["proto"]), _endpoints(f), str(f["packets"]),
            format_size(f["payload_bytes_a_to_b"]), format_size(f["payload_bytes_b_to_a"]),
            _dur(f["fct_s"]), _rate(f["goodput_bps"]), retx, str(f["dup_acks"]),
            str(f["zero_windows"]), _dur(f.get("rtt_mean_s")))
    return table


def _endpoints(f: dict[str, object]) -> str:
    def ep(addr: object, port: object) -> str:
        return f"[{addr}]:{port}" if ":" in str(addr) else f"{addr}:{port}"
    return f"{ep(f['src'], f['sport'])} -> {ep(f['dst'], f['dport'])}"
