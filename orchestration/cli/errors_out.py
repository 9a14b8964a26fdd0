"""Errors of the ``aitb`` CLI for a person (stderr) and for a script (JSON on stdout),
without typer, so that the quick start path of :mod:`orchestration.cli.entry` can report them
exactly as :mod:`orchestration.cli.app` does; rich is imported only when an error is shown."""

from __future__ import annotations

import json
import sys

from models.errors import AitbError, SpecError


def report_error(exc: AitbError) -> None:
    """Print ``exc`` for a person: one line per issue, prefixed with ``error:``."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(emoji=False, stderr=True)
    lines = [str(i) for i in exc.issues] if isinstance(exc, SpecError) else [str(exc)]
    for line in lines:
        console.print(f"[bold red]error:[/] {escape(line)}", markup=True, highlight=False,
                      soft_wrap=True)


def print_json_error(exc: AitbError) -> None:
    """The error as one JSON object on stdout (``ok: false``, message, exit code and, for bad
    input, one entry per issue), so that a script reading a ``--json`` command's stdout gets
    JSON on failure too; the stderr lines of :func:`report_error` stay for a person."""
    doc: dict[str, object] = {"ok": False, "error": str(exc), "exit_code": exc.exit_code}
    if isinstance(exc, SpecError):
        doc["issues"] = [issue.to_dict() for issue in exc.issues]
    sys.stdout.write(json.dumps(doc) + "\n")
