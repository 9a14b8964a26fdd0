"""Workloads that run at once on one lab: ``start: with_previous`` groups (pure grouping,
and a runner of one group's replays in threads).

Concurrent replays are independent: each has its own controller and Unix control socket
(in its own record directory ``workloads/<i>-<name>/``, or a private temporary directory
named by the run id when that path is too long), its own agent process on every host it
uses (agents bind ephemeral ports on the host's lab address, so two never clash), and its
own records. Only process starts go through one lock (the lab's registry of started
processes is appended to by one thread at a time).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from models.fanout import fan_out
from orchestration.starting import START_LOCK
from traffic_gen.launch import LabLauncher

__all__ = ["start_groups", "SerialLauncher", "run_group", "START_LOCK"]

R = TypeVar("R")
# one process start at a time across the threads of a group (agents and kind: app processes)


def start_groups(entries: Sequence[Any]) -> list[list[int]]:
    """Indices of ``entries`` (experiment workload entries, each with ``start``) in groups
    that run concurrently: an entry with ``start: with_previous`` joins the group of the
    entry before it; groups run one after another."""
    groups: list[list[int]] = []
    for i, entry in enumerate(entries):
        if groups and entry.start == "with_previous":
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


class SerialLauncher(LabLauncher):
    """LabLauncher whose process starts are serialised across threads."""

    _lock = START_LOCK

    def popen(self, node: str, argv: Any, **popen_kwargs: Any) -> Any:
        """Start ``argv`` in ``node`` (see LabLauncher.popen), one start at a time."""
        with self._lock:
            return super().popen(node, argv, **popen_kwargs)

    def popen_host(self, argv: Any, **popen_kwargs: Any) -> Any:
        """Start ``argv`` in the root namespace (see LabLauncher.popen_host), one at a time."""
        with self._lock:
            return super().popen_host(argv, **popen_kwargs)


def run_group(group: Sequence[int], replay_one: Callable[[int], R]) -> dict[int, R]:
    """``replay_one(i)`` for every index of ``group``, concurrently (one thread each; a
    single index runs in the caller's thread). Waits for all; re-raises the first exception
    any of them raised."""
    return dict(zip(group, fan_out(replay_one, list(group), inline_single=True),
                    strict=True))
