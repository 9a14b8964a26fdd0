"""The ``aitb`` command line: one typer app; each command group lives in
orchestration/cli/commands/.

Errors that are the user's (bad files, unknown names) and failures while running are printed as
one clear message without a traceback; the exit code is 2 for bad input and 1 for a failure.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from models import __version__
from models.errors import AitbError, SpecError
from orchestration.cli.commands import register_all
from orchestration.cli.errors_out import print_json_error, report_error
from orchestration.vm_rerun import rerun_in_vm, wants_vm
from testbed.lab import signals

app = typer.Typer(
    name="aitb",
    help="AI traffic testbed: emulated networks, AI workload traffic, measurements.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(emoji=False, stderr=True)
_argv: list[str] | None = None  # the command line main() was given, for --vm to re-execute


def _version(value: bool) -> None:
    if value:
        typer.echo(f"aitb {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
    vm: bool = typer.Option(False, "--vm", help="Run this command inside the stock-kernel VM "
                            "(for qdiscs the host kernel lacks, e.g. netem)."),
) -> None:
    """AI traffic testbed."""
    if wants_vm(vm):
        args = _argv if _argv is not None else sys.argv[1:]
        if "deploy" in args:
            raise SpecError("a lab deployed with --vm would end with the VM, before you could "
                            "use it; use `aitb --vm run EXPERIMENT` (or any command that does "
                            "its work and finishes) instead")
        raise typer.Exit(rerun_in_vm(args))


register_all(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``aitb`` console script; exits with the command's status."""
    global _argv
    _argv = argv
    try:
        app(args=argv, prog_name="aitb")
    except Exception as exc:  # noqa: BLE001 - an AitbError, or re-raised below
        # a library that wraps every exception (pydantic's schema build: SchemaError) can
        # carry off the LabInterrupted of a Ctrl-C that landed inside it: a traceback and
        # exit 1 instead of 130 (seen for a SIGINT 0.4 s into `aitb run`)
        real = exc if isinstance(exc, AitbError) else signals.interruption(exc)
        if not isinstance(real, AitbError):
            raise
        report_error(real)
        if "--json" in (sys.argv[1:] if argv is None else argv):
            print_json_error(real)
        sys.exit(real.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
