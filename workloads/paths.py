"""Routed paths between hosts of a resolved lab plan, and their configured delays (pure).

Built on the one route walk, models.paths (longest prefix match, every ECMP path, L2
switches crossed). Where a route has several equal-cost next hops, these functions take the
walk's **first path**: the one through every route's first next hop (the kernel may hash a
given flow onto another one, whose configured delays can differ). Used by the inference
workload's ``nearest`` policy and to check that background flows cross the link they should
load.
"""

from __future__ import annotations

from models.paths import PathError, paths
from models.plan import LabPlan, LinkPlan

__all__ = ["PathError", "path_hops", "path_delay_s", "rtt_delay_s"]


def path_hops(plan: LabPlan, src: str, dst: str) -> list[tuple[LinkPlan, str]]:
    """The (link, sending node) hops from node ``src`` to node ``dst``'s first IPv4 address
    (:meth:`LabPlan.address_of`) along the first ECMP path (module docstring); ``[]`` when
    ``src == dst``. Raises PathError for a node without IPv4 address, an unknown node, no
    route, a host in transit, or a routing loop."""
    addr = plan.address_of(dst)
    if addr is None:
        raise PathError(f"node {dst} has no IPv4 address")
    link = {lk.name: lk for lk in plan.links}
    return [(link[h.link], h.node) for h in paths(plan, src, addr)[0]]


def path_delay_s(plan: LabPlan, src: str, dst: str) -> float:
    """Configured one-way delay (s) from ``src`` to ``dst``: the sum of the delay_s of every
    link direction on the path of :func:`path_hops` (propagation only; no serialization or
    queueing). Raises PathError as :func:`path_hops` does."""
    return sum(lk.egress(sender).delay_s for lk, sender in path_hops(plan, src, dst))


def rtt_delay_s(plan: LabPlan, a: str, b: str) -> float:
    """Configured round-trip delay (s) between ``a`` and ``b``: both directions' paths (each
    as :func:`path_delay_s`). Raises PathError as :func:`path_hops` does."""
    return path_delay_s(plan, a, b) + path_delay_s(plan, b, a)
