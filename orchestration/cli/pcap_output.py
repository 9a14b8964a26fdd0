"""What ``aitb pcap FILE...`` does, without typer: :func:`pcap_command` checks the files,
analyses them and prints JSON or tables. The typer command (:mod:`.commands.pcap`) and the
quick start path of :mod:`.entry` both call it; neither typer nor rich is imported.

Output is described in :mod:`orchestration.cli.commands.pcap`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from models.errors import SpecError
from models.units import format_duration, format_size

if TYPE_CHECKING:
    from analysis.tcpflows import CaptureAnalysis


def pcap_command(files: list[Path], as_json: bool) -> None:
    """Analyse ``files`` and print the result to stdout (JSON if ``as_json``).

    Raises :class:`SpecError` naming the first missing or unreadable file before anything is
    read (nothing is analysed then), or a file that is not a capture.
    """
    for path in files:  # check every file before reading any
        if not os.access(path, os.R_OK) or not path.is_file():
            why = "no such file" if not path.exists() else "not a readable file"
            raise SpecError(f"cannot read capture file: {why}", file=str(path))
    from analysis.tcpflows import analyse_capture

    results = [analyse_capture(p) for p in files]
    if as_json:
        sys.stdout.write(json.dumps(combined(results), indent=1) + "\n")
    else:
        show(results, sys.stdout)


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


def show(results: list[CaptureAnalysis], out: TextIO) -> None:
    """Write the per-flow table and the retransmission summary of each file to ``out``.

    Plain fixed-width text (bold and yellow on a terminal): rich, which the rest of the CLI
    uses, takes longer to import than the whole analysis of a small file."""
    bold, yellow, plain = ("\033[1m", "\033[33m", "\033[0m") if out.isatty() else ("", "", "")
    for res in results:
        out.write(f"{bold}{res.path}{plain}: {res.format}, {res.packets} packets, "
                  f"{len(res.flows)} flows\n")
        out.write(_table(res.flows))
        tcp = [f for f in res.flows if f["proto"] == "tcp"]
        tot = {k: sum(int(f.get(k) or 0) for f in tcp) for k in (
            "retransmissions", "fast_retransmissions", "rto_retransmissions",
            "spurious_retransmissions", "fin_retransmissions", "dup_acks", "zero_windows",
            "payload_bytes", "duplicate_captures", "capture_gaps", "gap_bytes", *_ECN)}
        dups = tot["duplicate_captures"]
        out.write(
            f"retransmissions: {tot['retransmissions']} (fast {tot['fast_retransmissions']}, "
            f"RTO {tot['rto_retransmissions']}, spurious {tot['spurious_retransmissions']}, "
            f"FIN {tot['fin_retransmissions']}); "
            f"dup ACKs {tot['dup_acks']}; zero windows {tot['zero_windows']}; "
            f"TCP payload {format_size(tot['payload_bytes'])}"
            + (f"; duplicate captures {dups} (counted once)" if dups else "") + "\n")
        out.write(f"capture gaps: {tot['capture_gaps']} (segments after a range this capture "
                  f"did not see), {tot['gap_bytes']} bytes acknowledged but never seen; ECN: "
                  + ", ".join(f"{name} {tot[k]}" for k, name in _ECN.items()) + "\n")
        if tcp:
            out.write(NOTES)
        for w in res.warnings:
            where = "" if w.offset is None else f"offset {w.offset}: "
            out.write(f"{yellow}warning:{plain} {res.path}: {where}{w.what}\n")


_COLUMNS = ("proto", "a -> b", "pkts", "payload a>b", "payload b>a", "FCT", "goodput",
            "retx fast/RTO/spur/FIN", "dupACK", "0win", "gaps", "CE/ECE", "RTT mean")
_ECN = {"ect0": "ECT(0)", "ect1": "ECT(1)", "ce": "CE", "ece": "ECE", "cwr": "CWR"}
# what the table's numbers mean (analysis/tcpflows/summary.py holds the definitions)
NOTES = (
    "FCT: from the SYN to the ACK of the last payload byte, as seen here; not tshark's "
    "conversation duration (first to last frame, teardown included).\n"
    "retransmissions: segments this capture point saw twice; the run's records (TCP_INFO "
    "total_retrans, at the sender) also count resends of segments lost before this point, "
    "which show here as capture gaps: each capture sees one point of the path.\n")


def _table(flows: list[dict[str, object]]) -> str:
    """The flow table as lines of text: the first two columns left-aligned, the rest right."""
    rows = [list(_COLUMNS)]
    for f in flows:
        retx = (f"{f['retransmissions']} ({f['fast_retransmissions']}/"
                f"{f['rto_retransmissions']}/{f['spurious_retransmissions']}/"
                f"{f.get('fin_retransmissions', 0)})")
        tcp = f["proto"] == "tcp"
        rows.append([
            str(f["proto"]), _endpoints(f), str(f["packets"]),
            format_size(f["payload_bytes_a_to_b"]), format_size(f["payload_bytes_b_to_a"]),
            _dur(f["fct_s"]), _rate(f["goodput_bps"]), retx, str(f["dup_acks"]),
            str(f["zero_windows"]), str(f.get("capture_gaps", 0)) if tcp else "-",
            f"{f.get('ce', 0)}/{f.get('ece', 0)}" if tcp else "-",
            _dur(f.get("rtt_mean_s"))])
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    return "".join(
        " " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip() + "\n"
        for r in rows)


def _endpoints(f: dict[str, object]) -> str:
    def ep(addr: object, port: object) -> str:
        return f"[{addr}]:{port}" if ":" in str(addr) else f"{addr}:{port}"
    return f"{ep(f['src'], f['sport'])} -> {ep(f['dst'], f['dport'])}"
