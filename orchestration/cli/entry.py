"""The ``aitb`` console script: imports the CLI (typer, rich and the command modules take
about a second) under :func:`orchestration.cli.exiting.supervise`, so that Ctrl-C during
start-up ends with exit 130 and one line instead of a KeyboardInterrupt traceback, and a
SIGINT/SIGTERM at any later instant (the interpreter's exit included) with 130/143.

``aitb pcap FILE... [--json]`` takes a quick path that imports none of that: only the capture
reader and, for the table, rich (the issue's target: under 0.3 s for a small file; tshark
takes 0.5 s; bench/pcap_startup.py compares). Anything else on that command line (``--help``,
an unknown option, global options before ``pcap``) goes to the full CLI, which parses and
reports it as always.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Entry point of the ``aitb`` console script (see :func:`orchestration.cli.app.main`).
    Its exit status is aitb's own for SIGINT/SIGTERM at any instant, 130/143, also during
    the interpreter's exit (:mod:`orchestration.cli.exiting`)."""
    from orchestration.cli import exiting

    exiting.install()
    exiting.supervise(_main)


def _main() -> None:
    if _quick_pcap(sys.argv[1:]):
        return
    from orchestration.cli.app import main as cli_main

    cli_main()


def _quick_pcap(args: list[str]) -> bool:
    """Run ``pcap FILE... [--json]`` without the full CLI; False if ``args`` is not exactly
    that (then nothing was done). Errors exit as :func:`orchestration.cli.app.main` does."""
    if args[:1] != ["pcap"]:
        return False
    names = [a for a in args[1:] if a != "--json"]
    if not names or any(a.startswith("-") for a in names):
        return False
    from pathlib import Path

    from models.errors import AitbError
    from orchestration.cli.pcap_output import pcap_command

    as_json = "--json" in args
    try:
        pcap_command([Path(n) for n in names], as_json)
    except AitbError as exc:
        from orchestration.cli.errors_out import print_json_error, report_error

        report_error(exc)
        if as_json:
            print_json_error(exc)
        sys.exit(exc.exit_code)
    return True
