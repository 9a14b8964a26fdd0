"""Where agent processes run: a :class:`Launcher` starts argv on an emulated host.

The controller never cares how: :class:`LocalLauncher` runs in the current (root) namespace,
for loopback tests; :class:`NetnsExecLauncher` wraps argv in ``ip netns exec NS`` (ip(8) execs
the command, so the pid is the agent's); :class:`LabLauncher` adapts a ``testbed.lab.lab.Lab``
(its ``popen(node, argv, **kw)`` registers the process with the lab for teardown).

``popen_host(argv, **kw)`` starts a helper of the controller itself (the burst starters) in
the root namespace from the calling thread, dying with that thread's process from its first
instruction (models.lifeline); a lab launcher also registers it in the lab's registry before it
execs, so ``aitb clean`` ends it by pid.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from models.lifeline import spawn

__all__ = ["Launcher", "LocalLauncher", "NetnsExecLauncher", "LabLauncher"]


class Launcher(Protocol):
    """Starts ``argv`` on emulated host ``node``; returns the Popen (ended by pid)."""

    def popen(self, node: str, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` (a list, never a shell string) on ``node``."""
        ...

    def netns_file(self, node: str) -> str:
        """The network namespace file of ``node`` (``/run/netns/NAME``) for the shared
        traffic engine (engine.py), which enters it itself; KeyError for an unknown node."""
        ...

    def popen_host(self, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` in the root namespace; it dies with this thread's process."""
        ...


def _popen_dying(argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
    """``argv`` through models.lifeline's exec wrapper: PR_SET_PDEATHSIG (SIGKILL) before the
    program's first instruction, no Python code between fork and exec. A ``role`` (what a
    lab's registry records) is dropped here."""
    popen_kwargs.pop("role", None)
    return spawn(argv, pdeathsig=signal.SIGKILL, **popen_kwargs)


class LocalLauncher:
    """Every node is the current namespace (agents then bind loopback addresses)."""

    def popen(self, node: str, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` here."""
        return subprocess.Popen(list(argv), **popen_kwargs)

    def popen_host(self, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` here, dying with this thread's process (PR_SET_PDEATHSIG)."""
        return _popen_dying(argv, **popen_kwargs)

    def netns_file(self, node: str) -> str:
        """"" : every node is the current namespace (the engine enters none)."""
        return ""


class NetnsExecLauncher:
    """``namespaces`` maps node -> named network namespace (``ip netns``); needs root."""

    def __init__(self, namespaces: Mapping[str, str]) -> None:
        self.namespaces = dict(namespaces)

    def popen(self, node: str, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` inside ``node``'s namespace; KeyError names an unknown node."""
        if node not in self.namespaces:
            raise KeyError(f"no namespace for node {node!r}")
        return subprocess.Popen(["ip", "netns", "exec", self.namespaces[node], *argv],
                                **popen_kwargs)

    def popen_host(self, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` in the root namespace, dying with this thread's process."""
        return _popen_dying(argv, **popen_kwargs)

    def netns_file(self, node: str) -> str:
        """``/run/netns/NAME`` of ``node`` (ip-netns(8)); KeyError names an unknown node."""
        if node not in self.namespaces:
            raise KeyError(f"no namespace for node {node!r}")
        return f"/run/netns/{self.namespaces[node]}"


class LabLauncher:
    """Adapter for a running ``testbed.lab.lab.Lab`` (anything with ``popen(node, argv, **kw)``)."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab

    def popen(self, node: str, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` in ``node``'s namespace through the lab (registered for teardown)."""
        return self.lab.popen(node, list(argv), **popen_kwargs)

    def popen_host(self, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` in the root namespace through the lab: registered in its registry
        before it execs and dying with this thread's process (SIGKILL), so neither a
        SIGKILL of the owner nor ``aitb clean`` leaves it behind."""
        role = popen_kwargs.pop("role", "starter")
        return self.lab.popen_host(list(argv), pdeathsig=signal.SIGKILL,
                                   record={"role": role}, **popen_kwargs)

    def netns_file(self, node: str) -> str:
        """``node``'s namespace file through the lab (``Lab.netns_file``)."""
        return str(self.lab.netns_file(node))
