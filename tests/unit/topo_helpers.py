"""Test helpers for topology tests: write a file and load it, and walk a plan's routes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from models.errors import SpecError
from models.paths import PathError, paths
from models.plan import LabPlan
from topologies import load_topology


def write(tmp_path: Path, text: str, name: str = "lab.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, text: str) -> LabPlan:
    return load_topology(write(tmp_path, text))


def issues(tmp_path: Path, text: str) -> list:
    """The issues of a topology that must be invalid."""
    with pytest.raises(SpecError) as info:
        load(tmp_path, text)
    return info.value.issues


def find_issue(found: list, key: str, needle: str):
    """The issue whose key path is ``key`` and whose message contains ``needle``."""
    for issue in found:
        if issue.to_dict()["key"] == key and needle in issue.message:
            return issue
    raise AssertionError(f"no issue at {key!r} containing {needle!r}; got:\n"
                         + "\n".join(map(str, found)))


class Unreachable(AssertionError):
    pass


def walk(plan: LabPlan, src: str, dst: str, version: int = 4) -> list[list[str]]:
    """Every path (the L3 nodes in order) from host ``src`` to host ``dst``'s first address
    (IPv4, or IPv6 with ``version=6``) by the one route walk (models.paths), which also
    refuses a host in transit. Raises Unreachable when a packet would be dropped."""
    addrs = [i.ip for lk in plan.links for ep in (lk.a, lk.b)
             for i in (ep.ipv4 if version == 4 else ep.ipv6,) if i is not None]
    assert len(addrs) == len(set(addrs)), "duplicate addresses in the plan"
    dst_addr = plan.address_of(dst) if version == 4 else next(
        lk.endpoint(dst).ipv6.ip for lk in plan.links_of(dst))
    try:
        found = paths(plan, src, dst_addr)
    except PathError as exc:
        raise Unreachable(str(exc)) from None
    kind = {n.name: n.kind for n in plan.nodes}
    return [[h.node for h in p if kind[h.node] != "switch"] + [dst] for p in found]


def walk_all(plan: LabPlan, pairs=None, version: int = 4) -> None:
    """Every host pair (or ``pairs``) reachable in both directions through routers only."""
    hosts = [h.name for h in plan.hosts()]
    for a, b in pairs or [(a, b) for a in hosts for b in hosts if a != b]:
        assert walk(plan, a, b, version)
