"""Where the stock-kernel VM path finds its parts: the kernel, its modules, vng and qemu.

``scripts/setup.sh --vm`` (``make vm``) puts the distribution's stock kernel under
``.vm/kernel/`` of the checkout and its modules under ``/lib/modules/<release>``; virtme-ng
(``vng``) comes from the ``vm`` extra of the Python environment; qemu from Debian.
"""

from __future__ import annotations

import os
import re
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from models.errors import LabError

__all__ = ["StockKernel", "find_stock_kernel", "vm_problems", "vng_path", "scripts_dir",
           "CHECKOUT", "SETUP_REMEDY"]

CHECKOUT = Path(__file__).resolve().parents[2]
"""Root of the checkout this package is installed from (editable install)."""

SETUP_REMEDY = "run `make vm` (scripts/setup.sh --vm) as root"
QEMU = "qemu-system-x86_64"


@dataclass(frozen=True)
class StockKernel:
    """A bootable stock kernel: ``vmlinuz`` image path and its release (``6.1.0-57-amd64``)."""

    vmlinuz: Path
    release: str

    @property
    def modules_dir(self) -> Path:
        """``/lib/modules/<release>``: where the guest (which sees the host's root) loads from."""
        return Path("/lib/modules") / self.release


def _release_key(path: Path) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", path.name)]


def find_stock_kernel() -> StockKernel | None:
    """The newest kernel under ``.vm/kernel/boot`` (or ``$AITB_VM_KERNEL``, a vmlinuz path).

    Returns None when there is none. Does not check the modules (see :func:`vm_problems`).
    """
    override = os.environ.get("AITB_VM_KERNEL")
    if override:
        images = [Path(override)]
    else:
        images = sorted((CHECKOUT / ".vm" / "kernel" / "boot").glob("vmlinuz-*"),
                        key=_release_key)
    if not images or not images[-1].is_file():
        return None
    image = images[-1]
    return StockKernel(vmlinuz=image, release=image.name.removeprefix("vmlinuz-"))


def scripts_dir() -> Path:
    """The Python environment's script directory (``.venv/bin``): vng and virtme-run."""
    return Path(sysconfig.get_path("scripts"))


def vng_path() -> Path | None:
    """Path of the ``vng`` program of this Python environment (else on PATH), or None."""
    local = scripts_dir() / "vng"
    if local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which("vng")
    return Path(found) if found else None


def vm_problems() -> list[str]:
    """What keeps the VM path from working here, one sentence each; empty when it is ready.

    Checks qemu on PATH, vng (and virtme-run beside it), the stock kernel image and its
    modules (``modules.dep`` under ``/lib/modules/<release>``). Boots nothing.
    """
    problems = []
    if shutil.which(QEMU) is None:
        problems.append(f"{QEMU} not on PATH (Debian package qemu-system-x86)")
    vng = vng_path()
    if vng is None:
        problems.append("vng (virtme-ng) not installed (pip install -e '.[vm]')")
    elif not (vng.parent / "virtme-run").exists() and shutil.which("virtme-run") is None:
        problems.append(f"virtme-run not found beside {vng}")
    kernel = find_stock_kernel()
    if kernel is None:
        problems.append(f"no stock kernel under {CHECKOUT / '.vm/kernel/boot'}")
    elif not (kernel.modules_dir / "modules.dep").is_file():
        problems.append(f"modules of {kernel.release} not installed in {kernel.modules_dir}")
    return problems


def require_vm() -> tuple[Path, StockKernel]:
    """``(vng, kernel)`` ready to boot.

    Raises:
        LabError: naming every missing part and the remedy (``make vm``).
    """
    problems = vm_problems()
    if problems:
        raise LabError("the stock-kernel VM is not set up: " + "; ".join(problems)
                       + f"; {SETUP_REMEDY}")
    vng, kernel = vng_path(), find_stock_kernel()
    assert vng is not None and kernel is not None  # vm_problems() checked both
    return vng, kernel
