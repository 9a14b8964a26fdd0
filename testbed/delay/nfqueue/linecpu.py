"""A CPU given to the native delay line alone (``Lab(line_cpu=N)``, the experiment's
``delay_line_cpu``, ``aitb topo deploy --delay-line-cpu``).

What "alone" means here, and how each part is obtained:
- the line's helpers run pinned to it (their ``--cpu``), SCHED_FIFO, spinning before every
  release (``--spin-dense``; testbed/delay/nfqueue/aitb_delayline.c says why);
- every lab interface hands its receive processing (RPS) to the other CPUs
  (``net.core.rps_default_mask`` of each namespace, set before its interfaces exist:
  :func:`testbed.ns.sysctl.node_sysctls`);
- every thread of this process, and so everything the lab starts from it (agents, iperf3,
  FRR, tcpdump, OVS daemons), runs on the other CPUs while the lab is up (:func:`keep_off`,
  undone by :func:`restore` at teardown). Not covered: processes other programs start later
  in a deployed lab (``aitb topo exec``: started by another process), docker's containers
  (started by dockerd), kernel threads, and the part of each packet's path the kernel runs
  inside the helper's verdict call (nf_reinject), which is the point of giving it a CPU.
"""

from __future__ import annotations

import os

from models.errors import LabError

__all__ = ["RPS_DEFAULT_MASK_PATH", "check_line_cpu", "keep_off", "restore"]

RPS_DEFAULT_MASK_PATH = "/proc/sys/net/core/rps_default_mask"  # Linux >= 6.2, per namespace


def check_line_cpu(cpu: int, where: str = "delay_line_cpu") -> int:
    """``cpu`` if this process may run on it, at least one other CPU remains for the rest of
    the lab and the kernel can steer receive processing away from it; else LabError (exit
    code 2) naming ``where``, the usable CPUs or the missing sysctl. Reads only."""
    usable = sorted(os.sched_getaffinity(0))
    if cpu not in usable or len(usable) < 2:
        err = LabError(f"{where} {cpu}: this process may run on CPUs {usable}; the delay line "
                       "needs one of them to itself and at least one other for the lab")
        err.exit_code = 2
        raise err
    if not os.path.exists(RPS_DEFAULT_MASK_PATH):
        err = LabError(f"{where} {cpu}: this kernel lacks net.core.rps_default_mask (Linux "
                       ">= 6.2), which keeps the lab's receive processing off that CPU")
        err.exit_code = 2
        raise err
    return cpu


def _threads() -> list[int]:
    return [int(t) for t in os.listdir("/proc/self/task")]


def keep_off(cpu: int) -> dict[int, set[int]]:
    """Move every thread of this process off ``cpu`` (onto the other CPUs it may use);
    threads and processes started afterwards inherit that. Returns each thread's previous
    affinity, for :func:`restore`. A thread that ended meanwhile is skipped."""
    saved: dict[int, set[int]] = {}
    for tid in _threads():
        try:
            before = os.sched_getaffinity(tid)
            if cpu in before and len(before) > 1:
                os.sched_setaffinity(tid, before - {cpu})
            saved[tid] = before
        except ProcessLookupError:
            continue
    return saved


def restore(saved: dict[int, set[int]]) -> None:
    """Give the threads :func:`keep_off` moved their affinity back; threads started since
    (which inherited the narrowed set) get the union of the saved ones."""
    widest = set().union(*saved.values()) if saved else set(os.sched_getaffinity(0))
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, saved.get(tid, widest))
        except ProcessLookupError:
            continue
