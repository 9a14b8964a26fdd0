"""``aitb doctor``: what this host can emulate, and how to get what it lacks."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from testbed.host.capabilities import CapabilityReport, delay_lines_offered, probe
from testbed.vm.run import cached_accel, detect_accel


def _table(report: CapabilityReport) -> Table:
    table = Table(title=f"aitb doctor: kernel {report.kernel_release}"
                  + (f" (inside the VM, {report.in_vm})" if report.in_vm else ""))
    for col in ("capability", "present", "seen", "remedy"):
        table.add_column(col, overflow="fold")
    for cap in report.capabilities.values():
        # detail and remedy are text from the host and the probes ("pip install '.[vm]'")
        table.add_row(escape(cap.name), "[green]yes[/]" if cap.present else "[red]no[/]",
                      escape(cap.detail), escape(cap.remedy) if not cap.present else "")
    return table


def _accel(boot_vm: bool, report: CapabilityReport) -> str | None:
    """The VM accelerator: tested now with ``--boot-vm``, else the cached verdict, else None."""
    if boot_vm and report.capabilities["vm"].present:
        return detect_accel()
    return cached_accel()


def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object instead of a table."),
    boot_vm: bool = typer.Option(False, "--boot-vm",
                                 help="Boot the VM once to learn whether KVM works here."),
) -> None:
    """Probe this host: root, namespaces, link kinds, qdiscs, programs, the stock-kernel VM.

    Exits 0 even when capabilities are missing (it reports them with a remedy each); non-zero
    only when the probe itself fails. Needs root to probe the kernel (creates and removes one
    throwaway namespace).
    """
    report = probe()
    accel = _accel(boot_vm, report)
    if as_json:
        typer.echo(json.dumps({**report.to_dict(), "vm_accel": accel,
                               "delay_lines": delay_lines_offered(report)}, indent=2))
        return
    console = Console(emoji=False)
    console.print(_table(report))
    lines = delay_lines_offered(report)
    console.print(f"delay lines here: {', '.join(lines) or 'none (aitb --vm has netem)'}"
                  + (f" (delay_line: auto takes {lines[0]})" if lines else ""), markup=False)
    console.print(f"VM accelerator: {accel or 'not tested yet (aitb doctor --boot-vm)'}",
                  markup=False)


def register(app: typer.Typer) -> None:
    """Add ``doctor`` to ``app``."""
    app.command("doctor")(doctor)
