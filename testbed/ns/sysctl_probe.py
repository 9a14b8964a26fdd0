"""Node sysctls this kernel refuses inside a network namespace, found before a lab exists by
writing each one in a fresh anonymous namespace (nothing is left behind).

The static rule (``net.*`` keys only, triples in order) is :mod:`models.sysctl_keys`, checked
when a plan is made. What remains depends on the kernel: a ``net.*`` key may be global (the
kernel then leaves it out of a non-initial namespace, e.g. ``net.core.netdev_max_backlog``
on 6.18, or makes it read-only there, e.g. ``net.core.rmem_max``), absent, or refuse the
value (an unknown congestion control; one not in tcp_allowed_congestion_control). A helper
thread unshares a new network namespace, tries every (key, value) the plan's nodes set
there, and returns to its own namespace, so the probe namespace vanishes with the thread,
also when the process is killed (the pattern of :mod:`testbed.host.kernel`). Needs root.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from collections.abc import Iterable

from models.errors import LabError
from models.plan import LabPlan, NodePlan
from testbed.ns import netns
from testbed.ns.sysctl import sysctl_path

__all__ = ["CC_SYSCTL", "node_keys", "namespace_problems", "check_plan"]

CC_SYSCTL = "net.ipv4.tcp_congestion_control"
_IFACE_KEY = re.compile(r"net\.ipv[46]\.(conf|neigh)\.(?!(all|default|lo)\.)[^.]+\..+")
_GLOBAL = ("it is global, one value for the whole machine, so a node cannot set it; set it "
           "on the host yourself if you mean that")
_cache: dict[tuple[str, str], str | None] = {}  # per process, i.e. per run


def node_keys(node: NodePlan) -> dict[str, str]:
    """The sysctls ``node``'s own settings ask for: its sysctls and its
    tcp_congestion_control (the sysctls win, as in :func:`testbed.ns.sysctl.node_sysctls`)."""
    cc = {CC_SYSCTL: node.tcp_congestion_control} if node.tcp_congestion_control else {}
    return {**cc, **{k: str(v) for k, v in node.sysctls.items()}}


def namespace_problems(plan: LabPlan) -> list[str]:
    """One message per (key, value) of the plan's nodes (:func:`node_keys`) that a fresh
    network namespace on this kernel lacks, keeps read-only or refuses, naming the nodes,
    the key and why; empty when all would apply (or when not root: nothing is probed).

    Side effects: unshares one anonymous network namespace in a helper thread (gone when it
    returns) and writes the values there; results are cached per process.

    Raises:
        LabError: unshare failed other than for lack of privilege.
    """
    nodes: dict[tuple[str, str, str], list[str]] = {}
    for n in plan.nodes:
        for key, value in node_keys(n).items():
            what = (f"sysctl {key}={value}" if key in n.sysctls
                    else f"tcp_congestion_control {value} ({key})")
            nodes.setdefault((what, key, value), []).append(n.name)
    todo = sorted({(key, value) for _, key, value in nodes} - _cache.keys())
    if todo:
        _cache.update(netns.run_in(None, _probe, todo))
    out = []
    for (what, key, value), names in nodes.items():
        why = _cache.get((key, value))
        if why is not None:
            who = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
            out.append(f"node{'s' if len(names) > 1 else ''} {who}: {what}: {why}")
    return out


def check_plan(plan: LabPlan) -> None:
    """Raise LabError (exit code 2, bad input) listing :func:`namespace_problems` of
    ``plan``, prefixed with its source file; nothing is created. Needs root to probe."""
    problems = namespace_problems(plan)
    if problems:
        err = LabError("\n".join(f"{plan.source}: {p}" for p in problems))
        err.exit_code = 2
        raise err


def _probe(items: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    items = list(items)
    in_caller = {k: os.path.exists(sysctl_path(k)) for k, _ in items}
    if ctypes.CDLL(None, use_errno=True).unshare(netns.CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        if code == errno.EPERM:
            return {}  # not root: the lab's own namespaces are refused anyway
        raise LabError(f"unshare(CLONE_NEWNET) for the sysctl probe: {os.strerror(code)}")
    return {(k, v): _try(k, v, in_caller[k]) for k, v in items}


def _try(key: str, value: str, in_caller: bool) -> str | None:
    path = sysctl_path(key)
    if not os.path.exists(path):
        if _IFACE_KEY.fullmatch(key):
            return ("not present in a fresh network namespace: an interface's keys "
                    "(conf.<ifname>, neigh.<ifname>) do not exist yet when aitb applies a "
                    "node's sysctls (before its links); use conf.all or conf.default")
        if in_caller:
            return ("not present in a network namespace on this kernel (only the initial "
                    f"namespace has it): {_GLOBAL}")
        return "this kernel has no such sysctl, neither here nor in a network namespace"
    if not os.access(path, os.W_OK):
        return f"read-only inside a network namespace on this kernel: {_GLOBAL}"
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as exc:
        return _refused(key, value, exc)
    return None


def _read(key: str) -> str:
    try:
        with open(sysctl_path(key)) as f:
            return ", ".join(f.read().split())
    except OSError:
        return "?"


def _refused(key: str, value: str, exc: OSError) -> str:
    if key == CC_SYSCTL and exc.errno == errno.ENOENT:
        return (f"congestion control {value!r} is not available in this kernel (nor loadable "
                f"as a module); available: {_read('net.ipv4.tcp_available_congestion_control')}")
    if key == CC_SYSCTL and exc.errno == errno.EPERM:
        return (f"a namespace's default congestion control may only be one the host allows "
                f"(net.ipv4.tcp_allowed_congestion_control: "
                f"{_read('net.ipv4.tcp_allowed_congestion_control')}); root can still pick "
                "any available one per socket (transport.tcp_congestion_control, iperf3 -C)")
    return f"the kernel refuses this value in a network namespace: {exc.strerror}"
