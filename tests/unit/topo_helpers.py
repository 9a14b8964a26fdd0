"""Test helpers for topology tests: write a file and load it, and walk a plan's routes."""

from __future__ import annotations

import ipaddress
import textwrap
from pathlib import Path

import pytest

from aitb.models.errors import SpecError
from aitb.models.plan import LabPlan
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


class _Walker:
    """Follows a plan's connected subnets and routes hop by hop, over every ECMP branch."""

    def __init__(self, plan: LabPlan, version: int = 4) -> None:
        self.plan = plan
        self.version = version
        self.owner: dict[ipaddress.IPv4Address, str] = {}
        self.ifaces: dict[str, dict[str, ipaddress.IPv4Interface]] = {}
        for lk in plan.links:
            for ep in (lk.a, lk.b):
                addr = ep.ipv4 if version == 4 else ep.ipv6
                if addr is not None:
                    assert addr.ip not in self.owner, f"duplicate address {addr.ip}"
                    self.owner[addr.ip] = ep.node
                    self.ifaces.setdefault(ep.node, {})[ep.ifname] = addr
        self.kind = {n.name: n.kind for n in plan.nodes}
        self.routes = {n.name: n.routes for n in plan.nodes}

    def next_nodes(self, node: str, dst: ipaddress.IPv4Address) -> list[str]:
        """The nodes ``node`` hands a packet for ``dst`` to (the owner when on-link)."""
        for iface in self.ifaces.get(node, {}).values():
            if dst in iface.network:
                if dst not in self.owner:
                    raise Unreachable(f"{node}: {dst} is on-link but nobody has it")
                return [self.owner[dst]]
        match = [r for r in self.routes[node] if r.dst.version == self.version and dst in r.dst]
        if not match:
            raise Unreachable(f"{node} has no route to {dst}")
        best = max(match, key=lambda r: r.dst.prefixlen)
        out = []
        for hop in best.nexthops:
            iface = self.ifaces[node][hop.ifname]
            assert hop.via in iface.network, f"{node}: gateway {hop.via} not on {hop.ifname}"
            out.append(self.owner[hop.via])
        return out

    def paths(self, src: str, dst: ipaddress.IPv4Address, limit: int = 32) -> list[list[str]]:
        """Every path (list of nodes) a packet from ``src`` to ``dst`` can take."""
        done, frontier = [], [[src]]
        while frontier:
            path = frontier.pop()
            if len(path) > limit:
                raise Unreachable(f"routing loop from {src} to {dst}: {path}")
            for nxt in self.next_nodes(path[-1], dst):
                if self.owner.get(dst) == nxt:
                    done.append([*path, nxt])
                else:
                    frontier.append([*path, nxt])
        return done


def walk(plan: LabPlan, src: str, dst: str, version: int = 4) -> list[list[str]]:
    """Every path from host ``src`` to host ``dst``'s first address (IPv4, or IPv6 with
    ``version=6``), checking that only routers are transit nodes. Raises Unreachable when a
    packet would be dropped."""
    walker = _Walker(plan, version)
    dst_addr = plan.address_of(dst) if version == 4 else next(
        lk.endpoint(dst).ipv6.ip for lk in plan.links_of(dst))
    paths = walker.paths(src, dst_addr)
    for path in paths:
        assert path[-1] == dst
        transit = [n for n in path[1:-1] if walker.kind[n] != "router"]
        assert not transit, f"non-router transit nodes {transit} on {path}"
    return paths


def walk_all(plan: LabPlan, pairs=None, version: int = 4) -> None:
    """Every host pair (or ``pairs``) reachable in both directions through routers only."""
    hosts = [h.name for h in plan.hosts()]
    for a, b in pairs or [(a, b) for a in hosts for b in hosts if a != b]:
        assert walk(plan, a, b, version)
