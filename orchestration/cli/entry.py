"""The ``aitb`` console script: imports the CLI (typer, rich and the command modules take a
few hundred milliseconds) under a guard, so that Ctrl-C during start-up ends with exit 130
and one line instead of a KeyboardInterrupt traceback."""

from __future__ import annotations

import sys


def main() -> None:
    """Entry point of the ``aitb`` console script (see :func:`orchestration.cli.app.main`)."""
    try:
        from orchestration.cli.app import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    cli_main()
