"""Collective algorithms as pure step plans, behind one explicit registry.

``build_plan(op, algorithm, request)`` returns a :data:`~traffic_gen.algorithms.steps.Plan`
(per group rank, the ordered send/recv steps with their data dependencies). Adding an algorithm
means one builder function in a family module and one line in :data:`REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from traffic_gen.algorithms import (
    alltoall,
    halving_doubling,
    hierarchical,
    ring,
    rooted,
    torus,
    trees,
)
from traffic_gen.algorithms.steps import Plan, Step

__all__ = ["AlgorithmError", "PlanRequest", "REGISTRY", "DEFAULTS", "build_plan",
           "known_algorithms", "Plan", "Step"]


class AlgorithmError(ValueError):
    """Unknown algorithm for an op, or a request the algorithm cannot serve."""


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What a builder needs: group size ``n``, ``size_bytes`` (nccl-tests convention, see
    models.schedule), ``chunk_bytes`` (None: no pipelining), group-local ``root``, and
    ``sites`` (per group rank, its sub-group label; hierarchical algorithms only)."""

    n: int
    size_bytes: int
    chunk_bytes: int | None = None
    root: int = 0
    sites: tuple[str, ...] | None = None


Builder = Callable[[PlanRequest], Plan]

REGISTRY: dict[str, dict[str, Builder]] = {
    "all_reduce": {
        "ring": lambda q: ring.ring_all_reduce(q.n, q.size_bytes, q.chunk_bytes),
        "double_binary_tree": lambda q: trees.double_binary_tree_all_reduce(
            q.n, q.size_bytes, q.chunk_bytes),
        "halving_doubling": lambda q: halving_doubling.halving_doubling_all_reduce(
            q.n, q.size_bytes, q.chunk_bytes),
        "hierarchical": lambda q: hierarchical.hierarchical_all_reduce(
            q.n, q.size_bytes, q.chunk_bytes, _sites(q)),
        "hierarchical_leader": lambda q: hierarchical.hierarchical_leader_all_reduce(
            q.n, q.size_bytes, q.chunk_bytes, _sites(q)),
        "torus_2d": lambda q: torus.torus_2d_all_reduce(q.n, q.size_bytes, q.chunk_bytes,
                                                        _sites(q)),
    },
    "all_gather": {"ring": lambda q: ring.ring_all_gather(q.n, q.size_bytes, q.chunk_bytes)},
    "reduce_scatter": {
        "ring": lambda q: ring.ring_reduce_scatter(q.n, q.size_bytes, q.chunk_bytes)},
    "all_to_all": {
        "direct": lambda q: alltoall.direct_all_to_all(q.n, q.size_bytes, q.chunk_bytes),
        "pairwise": lambda q: alltoall.pairwise_all_to_all(q.n, q.size_bytes, q.chunk_bytes),
    },
    "broadcast": {
        "ring": lambda q: ring.ring_broadcast(q.n, q.size_bytes, q.chunk_bytes, q.root),
        "binomial_tree": lambda q: trees.binomial_broadcast(
            q.n, q.size_bytes, q.chunk_bytes, q.root),
    },
    "reduce": {
        "ring": lambda q: ring.ring_reduce(q.n, q.size_bytes, q.chunk_bytes, q.root),
        "binomial_tree": lambda q: trees.binomial_reduce(q.n, q.size_bytes, q.chunk_bytes,
                                                         q.root),
    },
    "gather": {"linear": lambda q: rooted.linear_gather(q.n, q.size_bytes, q.chunk_bytes,
                                                        q.root)},
    "scatter": {"linear": lambda q: rooted.linear_scatter(q.n, q.size_bytes, q.chunk_bytes,
                                                          q.root)},
    "barrier": {"dissemination": lambda q: rooted.dissemination_barrier(q.n)},
}

DEFAULTS: dict[str, str] = {
    "all_reduce": "ring", "all_gather": "ring", "reduce_scatter": "ring",
    "all_to_all": "pairwise", "broadcast": "ring", "reduce": "ring", "gather": "linear",
    "scatter": "linear", "barrier": "dissemination",
}


def _sites(q: PlanRequest) -> tuple[str, ...]:
    if q.sites is None or len(q.sites) != q.n:
        raise AlgorithmError("hierarchical algorithms need a site label for every group rank")
    return q.sites


def known_algorithms(op: str) -> tuple[str, ...]:
    """Names of the algorithms registered for ``op`` (empty for an unknown op)."""
    return tuple(REGISTRY.get(op, {}))


def resolve(op: str, algorithm: str | None) -> str:
    """The algorithm name to use: ``algorithm`` or the default for ``op``; raises
    AlgorithmError naming the known ops or algorithms when either is unknown."""
    if op not in REGISTRY:
        raise AlgorithmError(f"unknown collective {op!r}; known: {', '.join(REGISTRY)}")
    name = algorithm or DEFAULTS[op]
    if name not in REGISTRY[op]:
        raise AlgorithmError(f"unknown algorithm {name!r} for {op}; known for {op}: "
                             f"{', '.join(REGISTRY[op])}")
    return name


def build_plan(op: str, algorithm: str | None, request: PlanRequest) -> Plan:
    """The step plan of ``op`` with ``algorithm`` (None: the default); raises AlgorithmError
    for an unknown op or algorithm (listing the known ones), n < 1 or a hierarchy that does
    not fit."""
    name = resolve(op, algorithm)
    if request.n < 1:
        raise AlgorithmError(f"{op}/{name}: a group needs at least one rank")
    try:
        return REGISTRY[op][name](request)
    except hierarchical.HierarchyError as exc:
        raise AlgorithmError(f"{op}/{name}: {exc}") from exc
