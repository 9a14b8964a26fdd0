"""One boot of the stock-kernel VM: the guest script, the ``vng`` argv, the process and its end.

The guest sees the host's filesystem read-only with overlays; only ``--rwdir`` directories are
written back. The guest's exit status does not come back through vng and its console output is
unreliable (../shared/env/KERNEL.md), so the guest script writes ``stdout``, ``stderr`` and
``status`` into a result directory that is itself shared read-write.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from models.errors import CommandError
from testbed.tc import qdiscs
from testbed.vm.kernel import StockKernel, scripts_dir

__all__ = ["GUEST_MODULES", "guest_script", "vng_argv", "boot"]

# Loaded at guest start (modprobe of a built-in module is a no-op). All are in Debian's stock
# kernel, so a failure means a broken kernel or module tree: the command is not run and
# run_in_vm raises with <result>/modprobe.log. The disciplines aitb builds name their own
# modules (testbed.tc.qdiscs); the other qdiscs and classifiers are for experiments by hand.
GUEST_MODULES = (
    "veth", "bridge", "ifb", "dummy", "macvlan", "vxlan", "8021q",
    *qdiscs.kernel_modules(),
    "sch_fq", "sch_codel", "sch_prio", "sch_sfq", "cls_bpf", "cls_fw",
    "openvswitch", "tcp_dctcp", "tcp_bbr", "nf_tables", "nft_numgen",
)
GUEST_MEMORY = "2G"   # of a 24 GiB host; several helpers may boot VMs at once
GUEST_CPUS = "2"      # the host has 2 cores
# Under TCG the guest kernel picks the emulated HPET as clock source: every clock read is
# emulated and clock_gettime cannot use the vDSO (a `import orchestration.cli.app` made 7317
# such system calls). The TSC of TCG follows the host's clock; trusting it took 8 parallel
# imports of pyroute2, pydantic, typer and rich from 53 s to 27 s here (one A/B pair on the
# shared, loaded 2-core machine: noisy). KVM guests keep kvm-clock.
TCG_KERNEL_ARGS = "clocksource=tsc tsc=reliable"
KILL_GRACE_S = 5.0


def _command_words(argv: Sequence[str]) -> str:
    """``shlex.join(argv)``, with argv[0] always quoted: a quoted word is never taken by the
    shell as a reserved word (``if``) or a variable assignment (``A=b``)."""
    first = "'" + argv[0].replace("'", "'\"'\"'") + "'"
    return " ".join([first, *map(shlex.quote, argv[1:])])


def guest_script(argv: Sequence[str], *, cwd: Path, result_dir: Path, accel: str,
                 env: Mapping[str, str], setup: Sequence[str] = ()) -> str:
    """The /bin/sh script the guest runs: load modules, set env, cd, run argv, write status.

    Args:
        argv: the command; quoted with :func:`shlex.join`, never interpreted as shell text.
        cwd: host directory to run in (the guest sees the same path).
        result_dir: shared read-write directory receiving stdout, stderr, status, modprobe.log.
        accel: "kvm" or "tcg", exported as ``AITB_IN_VM``.
        env: further environment variables for the command.
        setup: shell lines run after loading modules, before the command (e.g. the Python
            image mounts of testbed.vm.image); they must handle their own failures.
    """
    r = shlex.quote(str(result_dir))
    exports = {**env, "AITB_IN_VM": accel}
    bad = [k for k in exports if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
    if bad:
        raise ValueError(f"environment names not usable in the VM: {bad}")
    lines = [
        "#!/bin/sh",
        # one modprobe for all: under TCG 26 separate calls took 7.3 s, one call 1.2 s
        f"modprobe -a {' '.join(GUEST_MODULES)} >{r}/modprobe.log 2>&1 "
        f"|| {{ echo 125 >{r}/modprobe.status; exit 0; }}",
        *setup,
        *(f"export {k}={shlex.quote(v)}" for k, v in sorted(exports.items())),
        f"cd {shlex.quote(str(cwd))} || {{ echo {shlex.quote(f'cannot cd to {cwd}')} "
        f">{r}/stderr; echo 126 >{r}/status; exit 0; }}",
        f"{_command_words(argv)} >{r}/stdout 2>{r}/stderr </dev/null",
        f"echo $? >{r}/status.tmp && mv {r}/status.tmp {r}/status",
    ]
    return "\n".join(lines) + "\n"


def vng_argv(vng: Path, kernel: StockKernel, *, accel: str, rwdirs: Sequence[Path],
             script: Path, verbose: bool = False, disk: Path | None = None) -> list[str]:
    """The ``vng`` command line booting ``kernel`` to run ``sh script`` (KVM or TCG).

    ``disk``: a raw image attached read-only as the guest's first virtio disk (``/dev/vda``);
    its path must not contain blanks or commas (qemu option syntax, vng's shell).
    """
    argv = [str(vng), "-r", str(kernel.vmlinuz), "-m", GUEST_MEMORY, "-p", GUEST_CPUS]
    if accel == "tcg":
        argv += ["--disable-kvm", "--append", TCG_KERNEL_ARGS]
    if verbose:
        argv.append("-v")
    for d in rwdirs:
        argv += ["--rwdir", str(d)]
    if disk is not None:
        argv.append(f"--qemu-opts=-drive file={disk},if=virtio,format=raw,readonly=on")
    return argv + ["--exec", shlex.join(["sh", str(script)])]


def _group_members(pgid: int) -> dict[int, str]:
    """Live (non-zombie) processes of process group ``pgid``: {pid: comm}, read from /proc."""
    members = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        close = stat.rindex(")")  # comm may contain spaces and parentheses
        comm, fields = stat[stat.index("(") + 1:close], stat[close + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members[int(entry.name)] = comm
    return members


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether vng exited, without reaping it: its pid, the group id, stays reserved."""
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _end_group(proc: subprocess.Popen[bytes]) -> list[str]:
    """End what is left of the process group we started (vng, its shell, qemu), then reap vng.

    Sends TERM, then KILL after :data:`KILL_GRACE_S`; returns ``"comm pid"`` of each process
    that had to be signalled.
    """
    signalled = [f"{comm} {pid}" for pid, comm in _group_members(proc.pid).items()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _group_members(proc.pid):
            break
        os.killpg(proc.pid, sig)
        deadline = time.monotonic() + KILL_GRACE_S
        while _group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    proc.wait()
    return signalled


def boot(argv: Sequence[str], *, console_log: Path, timeout_s: float, guest_argv: Sequence[str],
         on_poll: Callable[[], None] | None = None, poll_s: float = 0.2) -> int:
    """Run ``vng`` (``argv``) in its own process group until it exits; return its status.

    Console output goes to ``console_log``. ``on_poll`` is called every ``poll_s`` seconds
    while the VM runs (used to stream the guest's output files). Whatever is left of the
    process group afterwards (or on timeout, error, interrupt) is killed, by group id.

    Raises:
        CommandError: the VM ran longer than ``timeout_s`` seconds; its process group (vng,
            qemu) has been killed. The error names ``guest_argv`` and the killed processes.
    """
    env = {**os.environ, "PATH": f"{scripts_dir()}{os.pathsep}{os.environ.get('PATH', '')}"}
    deadline = time.monotonic() + timeout_s
    with open(console_log, "wb") as log:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while not _exited(proc):
            if time.monotonic() > deadline:
                killed = _end_group(proc)
                raise CommandError(guest_argv, None, f"timed out after {timeout_s:g} s in the "
                                   f"VM; killed {', '.join(killed) or 'nothing (gone)'}")
            if on_poll:
                on_poll()
            time.sleep(poll_s)
    except BaseException:
        if proc.returncode is None:
            _end_group(proc)
        raise
    _end_group(proc)  # vng has exited; make sure no qemu of ours is left behind
    return proc.returncode
