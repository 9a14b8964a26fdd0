"""Run a command inside a throwaway VM of this host's filesystem on the stock kernel.

Where the host kernel lacks a qdisc (netem here), the same command runs in a VM booted with
virtme-ng on the distribution's kernel (``make vm`` installs it). KVM is used when a short test
boot works; otherwise software emulation (TCG): nested KVM hangs on the project's machines
(../shared/env/KERNEL.md). The verdict is cached per host boot in ``/run/aitb/vm-accel``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from models.errors import CommandError, LabError
from models.owned import make_owned_dir
from testbed.vm.boot import boot, guest_script, vng_argv
from testbed.vm.image import IMAGE, ImageTree, ensure_image, guest_mount_lines
from testbed.vm.kernel import require_vm, scripts_dir

__all__ = ["VmResult", "run_in_vm", "detect_accel", "cached_accel", "ACCEL_CACHE"]

ACCEL_CACHE = Path("/run/aitb/vm-accel")
# A working KVM boots vng and runs `true` in 1-3 s; a nested KVM that hangs never finishes.
# 20 s leaves room for a loaded host and costs 20 s once per host boot where KVM hangs.
KVM_PROBE_TIMEOUT_S = 20.0
FORWARDED_ENV = ("HOME", "LANG", "LC_ALL", "TERM", "PYTHONPATH", "PYTHONUNBUFFERED")
_said: set[str] = set()  # fallback notices already printed by this process


def _say_once(message: str) -> None:
    """Print a notice to stderr the first time this process meets it."""
    if message not in _said:
        _said.add(message)
        print(f"aitb: {message}", file=sys.stderr, flush=True)


def _python_image() -> list[ImageTree]:
    """The Python image's trees, built if stale; [] (and a notice) when it cannot be built.

    ``$AITB_VM_PYTHON_IMAGE=0`` turns the image off (for measurements).
    """
    if os.environ.get("AITB_VM_PYTHON_IMAGE") == "0":
        return []
    try:
        return ensure_image()
    except (LabError, OSError) as exc:
        _say_once(f"VM: no Python image ({exc}); the guest reads Python over 9p (slower)")
        return []


def _check_image_mount(result_dir: Path) -> None:
    log = result_dir / "image.log"
    if log.exists() and log.read_text(errors="replace").strip():
        _say_once(f"VM: mounting the Python image {IMAGE} failed in the guest "
                  f"({log.read_text(errors='replace').strip()!r}); it read Python over 9p")


@dataclass(frozen=True)
class VmResult:
    """What a command run in the VM returned: its exit status, output and the accelerator."""

    returncode: int
    stdout: str
    stderr: str
    accel: str  # "kvm" or "tcg"


class _Tail:
    """Copies what the guest appended to its stdout/stderr files to ours (for streaming)."""

    def __init__(self, result_dir: Path) -> None:
        self.files = {"stdout": sys.stdout, "stderr": sys.stderr}
        self.offsets = dict.fromkeys(self.files, 0)
        self.result_dir = result_dir

    def __call__(self) -> None:
        for name, out in self.files.items():
            path = self.result_dir / name
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(self.offsets[name])
                chunk = f.read()
            self.offsets[name] += len(chunk)
            if chunk:
                out.write(chunk.decode(errors="replace"))
                out.flush()


def _guest_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k in FORWARDED_ENV or (k.startswith("AITB_") and k != "AITB_IN_VM")}
    env["PATH"] = f"{scripts_dir()}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**env, **(extra or {})}


def _check_rwdirs(rwdirs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    dirs = [Path(d).resolve() for d in rwdirs]
    for d in dirs:
        if not d.is_dir():
            raise LabError(f"VM read-write directory {d} does not exist")
        if "=" in str(d) or "," in str(d):
            raise LabError(f"VM read-write directory {d}: '=' and ',' cannot be passed to vng")
    return dirs


def _read_result(result_dir: Path, argv: Sequence[str], accel: str, vng_status: int) -> VmResult:
    if (result_dir / "modprobe.status").exists():
        log = (result_dir / "modprobe.log").read_text(errors="replace").strip()
        raise LabError(f"loading kernel modules in the VM failed ({log}); the command "
                       f"{' '.join(argv)} was not run; reinstall the kernel: make vm")
    status = result_dir / "status"
    if not status.exists():
        console = (result_dir / "console.log").read_text(errors="replace")[-2000:]
        raise CommandError(argv, None, f"the VM ({accel}) ended (vng exit {vng_status}) "
                           f"without the command's status; console tail: {console.strip()!r}")
    read = lambda name: (result_dir / name).read_text(errors="replace")  # noqa: E731
    return VmResult(int(read("status")), read("stdout"), read("stderr"), accel)


def run_in_vm(argv: Sequence[str], *, rwdirs: Sequence[str | os.PathLike[str]] = (),
              timeout_s: float = 900.0, cwd: str | os.PathLike[str] | None = None,
              env: Mapping[str, str] | None = None, echo: bool = False,
              accel: str | None = None) -> VmResult:
    """Boot the stock kernel, run ``argv`` in ``cwd`` (default: ours), return status and output.

    Args:
        argv: program and arguments, run without a shell (quoted with shlex.join).
        rwdirs: host directories the guest may write to (written back); the rest of the host
            filesystem is read-only in the guest and its writes are discarded.
        timeout_s: seconds for boot plus command; then qemu is killed.
        cwd: directory to run in (default: the current one; the guest sees the same path).
        env: extra environment variables; PATH (with this Python environment first), HOME,
            LANG, PYTHONPATH and AITB_* are forwarded, and AITB_IN_VM is set to the accelerator.
        echo: copy the guest's stdout/stderr to ours while it runs.
        accel: "kvm" or "tcg"; default :func:`detect_accel`.

    Returns:
        VmResult(returncode, stdout, stderr, accel).

    Raises:
        LabError: the VM path is not installed (remedy: ``make vm``) or a rwdir is unusable.
        CommandError: empty argv, timeout (qemu killed), or the VM ended without a status.

    Side effects: boots qemu (2 GiB, 2 CPUs); a temporary result directory, removed afterwards.
    """
    if not argv:
        raise CommandError(argv, None, "nothing to run in the VM (empty argv)")
    if accel not in (None, "kvm", "tcg"):
        raise ValueError(f"accel={accel!r}: expected 'kvm' or 'tcg'")
    vng, kernel = require_vm()
    dirs = _check_rwdirs(rwdirs)
    accel = accel or detect_accel()
    result_dir = make_owned_dir("vm")
    try:
        trees = _python_image()
        setup = guest_mount_lines(trees, str(result_dir / "image.log")) if trees else []
        script = result_dir / "guest.sh"
        script.write_text(guest_script(argv, cwd=Path(cwd or os.getcwd()).resolve(),
                                       result_dir=result_dir, accel=accel, env=_guest_env(env),
                                       setup=setup))
        tail = _Tail(result_dir) if echo else None
        status = boot(vng_argv(vng, kernel, accel=accel, rwdirs=[*dirs, result_dir],
                               script=script, verbose=bool(os.environ.get("AITB_VM_VERBOSE")),
                               disk=IMAGE if trees else None),
                      console_log=result_dir / "console.log", timeout_s=timeout_s,
                      guest_argv=argv, on_poll=tail)
        if tail:
            tail()
        _check_image_mount(result_dir)
        return _read_result(result_dir, argv, accel, status)
    finally:
        shutil.rmtree(result_dir, ignore_errors=True)


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def cached_accel() -> str | None:
    """The accelerator verdict cached for this host boot (``"kvm"``/``"tcg"``), or None."""
    try:
        verdict, boot_id = ACCEL_CACHE.read_text().split()
    except (OSError, ValueError):
        return None
    return verdict if boot_id == _boot_id() and verdict in ("kvm", "tcg") else None


def _kvm_boots() -> bool:
    try:
        return run_in_vm(["true"], accel="kvm", timeout_s=KVM_PROBE_TIMEOUT_S).returncode == 0
    except CommandError:
        return False


def detect_accel() -> str:
    """``"kvm"`` if a short KVM boot of the stock kernel works on this host, else ``"tcg"``.

    ``$AITB_VM_ACCEL`` (kvm|tcg) overrides. Without a usable /dev/kvm the answer is tcg at
    once; otherwise the first call per host boot tries KVM (at most
    :data:`KVM_PROBE_TIMEOUT_S`) and caches the verdict in :data:`ACCEL_CACHE`, under a lock
    so that concurrent callers boot once.

    Raises:
        LabError: ``$AITB_VM_ACCEL`` is neither kvm nor tcg.
    """
    forced = os.environ.get("AITB_VM_ACCEL")
    if forced:
        if forced not in ("kvm", "tcg"):
            raise LabError(f"AITB_VM_ACCEL={forced!r}: expected kvm or tcg")
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    ACCEL_CACHE.parent.mkdir(parents=True, exist_ok=True)
    with open(ACCEL_CACHE.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        verdict = cached_accel()
        if verdict is None:
            verdict = "kvm" if _kvm_boots() else "tcg"
            ACCEL_CACHE.write_text(f"{verdict} {_boot_id()}\n")
    return verdict
