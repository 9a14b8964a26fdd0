"""Hierarchical (two-level) all-reduce over sub-groups such as data centres.

``sites`` gives each group rank its sub-group label (for example the data centre of its host);
sub-groups are ordered by their first rank. Two variants:

* ``hierarchical`` (per local index, as in Horovod's hierarchical all-reduce and the 2D
  all-reduce of Ying et al., "Image classification at supercomputer scale", arXiv:1811.06992,
  2018): ring reduce-scatter inside each sub-group (S/m pieces over m local ranks), then a ring
  all-reduce across sub-groups among the ranks with the same local index (each on its S/m
  piece), then a ring all-gather inside each sub-group. Needs equal sub-group sizes. Bytes on
  the inter-site ring per rank: 2(g-1)/g x S/m, g sub-groups.
* ``hierarchical_leader`` (NCCL's tree-of-rings idea, and MPICH's SMP-aware collectives,
  Thakur et al. 2005): pipelined ring reduce to each sub-group's leader (its first rank), ring
  all-reduce of S among the leaders, pipelined ring broadcast from each leader.
"""

from __future__ import annotations

from collections.abc import Sequence

from traffic_gen.algorithms.ring import (
    ring_all_gather,
    ring_all_reduce,
    ring_broadcast,
    ring_reduce,
    ring_reduce_scatter,
)
from traffic_gen.algorithms.steps import Plan, lift, sequence, split_bytes

__all__ = ["subgroups", "hierarchical_all_reduce", "hierarchical_leader_all_reduce"]


class HierarchyError(ValueError):
    """The sub-group partition does not fit the algorithm."""


def subgroups(sites: Sequence[str]) -> list[list[int]]:
    """Group ranks by site label, sub-groups ordered by their first rank."""
    out: dict[str, list[int]] = {}
    for r, site in enumerate(sites):
        out.setdefault(site, []).append(r)
    return list(out.values())


def _in_each(n: int, groups: list[list[int]], make) -> Plan:
    """One phase: ``make(len(group))`` run inside every group at once."""
    merged: list[tuple] = [() for _ in range(n)]
    for g in groups:
        sub = lift(make(len(g)), g, n)
        for r in g:
            merged[r] = sub[r]
    return tuple(merged)


def hierarchical_all_reduce(n: int, size_bytes: int, chunk_bytes: int | None,
                            sites: Sequence[str]) -> Plan:
    """Per-local-index two-level all-reduce (see module docstring); raises HierarchyError when
    sub-groups differ in size."""
    groups = subgroups(sites)
    m = len(groups[0])
    if any(len(g) != m for g in groups):
        raise HierarchyError(
            f"hierarchical all_reduce needs equal sub-groups, got sizes "
            f"{[len(g) for g in groups]}; use hierarchical_leader")
    piece = split_bytes(size_bytes, m)
    cross = [[g[i] for g in groups] for i in range(m)]
    phases = [
        _in_each(n, groups, lambda k: ring_reduce_scatter(k, size_bytes, chunk_bytes)),
        _in_each_sized(n, cross, piece, chunk_bytes),
        _in_each(n, groups, lambda k: ring_all_gather(k, size_bytes, chunk_bytes)),
    ]
    return sequence(n, phases)


def _in_each_sized(n: int, cross: list[list[int]], piece: list[int],
                   chunk_bytes: int | None) -> Plan:
    """Ring all-reduce of local index i's piece among the ranks of ``cross[i]``."""
    merged: list[tuple] = [() for _ in range(n)]
    for i, members in enumerate(cross):
        # after the ring reduce-scatter, local rank i holds chunk (i + 1) mod m (ring.py)
        held = piece[(i + 1) % len(piece)]
        sub = lift(ring_all_reduce(len(members), held, chunk_bytes), members, n)
        for r in members:
            merged[r] = sub[r]
    return tuple(merged)


def hierarchical_leader_all_reduce(n: int, size_bytes: int, chunk_bytes: int | None,
                                   sites: Sequence[str]) -> Plan:
    """Leader-based two-level all-reduce (see module docstring); any sub-group sizes."""
    groups = subgroups(sites)
    leaders = [g[0] for g in groups]
    phases = [
        _in_each(n, groups, lambda k: ring_reduce(k, size_bytes, chunk_bytes, 0)),
        lift(ring_all_reduce(len(leaders), size_bytes, chunk_bytes), leaders, n),
        _in_each(n, groups, lambda k: ring_broadcast(k, size_bytes, chunk_bytes, 0)),
    ]
    return sequence(n, phases)
