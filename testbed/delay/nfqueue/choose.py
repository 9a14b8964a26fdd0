"""Which delay line each link direction gets, and whether this host offers the native one.

``delay_line`` (models.plan.DelayLine) per link: ``netem`` and ``native`` are taken as asked;
``auto`` is netem where the kernel has it (sch_netem and IFB), else native. The choice is made
when the lab is brought up (the probes need root) and recorded per link direction.
"""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import subprocess
import threading

from models.plan import LabPlan
from testbed.ns import netns

__all__ = ["resolve", "resolve_here", "lines_of", "native_available", "native_problem",
           "NATIVE_FEATURE"]

NATIVE_FEATURE = "nfqueue"  # what missing_kernel_features names when the native line is absent
_lock = threading.Lock()
_cached: list[str | None] = []


def resolve(plan: LabPlan, has_netem: bool, has_native: bool = True) -> LabPlan:
    """``plan`` with every link's ``auto`` delay line replaced: ``netem`` if ``has_netem``,
    else ``native`` if ``has_native``, else ``netem`` (its absence is then reported as
    missing netem: the VM has it). Pure."""
    line = "netem" if has_netem or not has_native else "native"
    links = tuple(dataclasses.replace(lk, delay_line=line) if lk.delay_line == "auto" else lk
                  for lk in plan.links)
    return dataclasses.replace(plan, links=links)


def resolve_here(plan: LabPlan) -> LabPlan:
    """:func:`resolve` with this kernel's netem/IFB and this host's native line (probed once
    per process; needs root). A plan with nothing to resolve is returned unprobed."""
    if all(lk.delay_line != "auto" for lk in plan.links):
        return plan
    from testbed.host import kernel
    has_netem = not kernel.missing_features({"netem", "ifb"})
    return resolve(plan, has_netem, has_netem or native_available())


def lines_of(plan: LabPlan) -> dict[str, str]:
    """``"<link>/<direction>"`` -> the delay line of every direction that has delay or an
    impairment (``auto`` when unresolved), for plan.json readers and the manifest."""
    return {f"{lk.name}/{d}": lk.delay_line for lk in plan.links
            for d in ("a_to_b", "b_to_a") if getattr(lk, d).needs_netem}


def _probe_rule() -> str | None:
    """In a throwaway namespace (this thread unshares it), add an NFQUEUE rule."""
    if ctypes.CDLL(None, use_errno=True).unshare(netns.CLONE_NEWNET) != 0:
        return f"unshare(CLONE_NEWNET) failed (errno {ctypes.get_errno()}; needs root)"
    for tool in ("iptables", "ip6tables"):
        argv = [tool, "-w", "-t", "mangle", "-A", "PREROUTING", "-i", "lo", "-j", "NFQUEUE",
                "--queue-num", "0"]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{' '.join(argv)}: {exc}"
        if r.returncode != 0:
            return f"{' '.join(argv)} failed: {r.stderr.strip()}"
    return None


def _probe() -> str | None:
    for tool in ("iptables", "ip6tables", "iptables-restore", "ip6tables-restore"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package iptables)"
    from testbed.delay.nfqueue.build import BuildError, helper_path
    try:
        helper_path()
    except (BuildError, OSError) as exc:
        return f"the delay-line helper cannot be built: {exc}"
    box: list[str | None] = []
    t = threading.Thread(target=lambda: box.append(_probe_rule()), name="aitb-nfq-probe")
    t.start()
    t.join()  # the thread (and the namespace it unshared) ends here
    return box[0] if box else "the NFQUEUE probe thread failed"


def native_problem() -> str | None:
    """Why this host cannot run the native delay line (iptables NFQUEUE inside a namespace
    and the compiled helper, built on first use), or None when it can. Probed once per
    process (needs root)."""
    with _lock:
        if not _cached:
            _cached.append(_probe())
        return _cached[0]


def native_available() -> bool:
    """True when this host offers the native delay line (:func:`native_problem`)."""
    return native_problem() is None
