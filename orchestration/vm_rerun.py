"""``aitb --vm ...``: run the same aitb command line inside the stock-kernel VM.

The run directory (``./results``) and, when ``$AITB_STATE_DIR`` names one, the state directory
are shared read-write with the guest; everything else the guest writes is discarded. Inside the
VM (``$AITB_IN_VM`` set) ``--vm`` is ignored.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from testbed.host.capabilities import in_vm
from testbed.vm.run import VmResult, run_in_vm

__all__ = ["strip_vm_flag", "rerun_in_vm", "vm_rwdirs", "cli_in_vm"]


def strip_vm_flag(args: Sequence[str]) -> list[str]:
    """``args`` without the root option ``--vm`` (among the options before the command)."""
    out, leading = [], True
    for arg in args:
        leading = leading and arg.startswith("-")
        if not (leading and arg == "--vm"):
            out.append(arg)
    return out


def vm_rwdirs(cwd: Path | None = None) -> list[Path]:
    """``<cwd>/results`` (created if missing) and ``$AITB_STATE_DIR`` if set (created too)."""
    dirs = [(cwd or Path.cwd()) / "results"]
    if os.environ.get("AITB_STATE_DIR"):
        dirs.append(Path(os.environ["AITB_STATE_DIR"]))
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def rerun_in_vm(args: Sequence[str]) -> int:
    """Run ``aitb <args>`` (``--vm`` removed) in the VM, streaming its output; return its status.

    Raises:
        LabError: the VM path is not installed (remedy: ``make vm``).
        CommandError: the VM timed out or ended without the command's status.
    """
    return cli_in_vm(strip_vm_flag(args), vm_rwdirs(), echo=True).returncode


def cli_in_vm(args: Sequence[str], rwdirs: Sequence[Path], *, echo: bool,
              timeout_s: float | None = None) -> VmResult:
    """``aitb <args>`` (this interpreter, ``-m orchestration.cli``) in the stock-kernel VM
    with ``rwdirs`` (created if missing) shared read-write; ``echo`` streams its output.
    Returns the completed process of :func:`testbed.vm.run.run_in_vm` (``returncode``,
    ``stdout``, ``stderr``); raises as :func:`rerun_in_vm`. ``timeout_s`` None: run_in_vm's."""
    for d in rwdirs:
        Path(d).mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "orchestration.cli", *args]
    extra = {} if timeout_s is None else {"timeout_s": timeout_s}
    return run_in_vm(argv, rwdirs=list(rwdirs), echo=echo, **extra)


def wants_vm(flag: bool) -> bool:
    """Whether ``--vm`` should re-execute: asked for, and not already inside the VM."""
    return flag and in_vm() is None
