"""Placement: which emulated host runs each rank (pure).

Hosts come grouped by site (data centre, edge cluster) in a fixed order, e.g. from a
:class:`~models.plan.LabPlan` via :func:`sites_of_plan`. Policies:

* ``packed``: fill each site's hosts (``slots`` ranks per host) before the next site. With
  Megatron's layout (TP innermost, workloads.layout) a TP group stays inside one site and
  DP/PP groups cross sites once a site is full: the usual multi-DC deployment.
* ``spread``: deal blocks of ``block`` consecutive ranks round-robin over the sites, so
  neighbouring blocks land in different sites (with ``block = tp`` TP groups stay whole and
  every DP group spans all sites; with ``block = 1`` even TP crosses sites).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from models.errors import SpecError, SpecIssue
from models.plan import LabPlan

__all__ = ["PlacementPolicy", "place", "sites_of_plan"]

PlacementPolicy = Literal["packed", "spread"]


def sites_of_plan(plan: LabPlan, label: str = "site") -> dict[str, list[str]]:
    """The plan's hosts grouped by ``labels[label]``, else ``group``, else one site ``""``;
    sites and hosts in plan order."""
    sites: dict[str, list[str]] = {}
    for n in plan.hosts():
        sites.setdefault(n.labels.get(label, n.group or ""), []).append(n.name)
    return sites


def place(world_size: int, sites: Mapping[str, Sequence[str]],
          policy: PlacementPolicy = "packed", *, slots: int = 1, block: int = 1,
          key: str = "placement") -> dict[int, str]:
    """Map ranks ``0..world_size-1`` to host names.

    Args: ``sites`` site name -> host names (order kept); ``slots`` ranks per host (>= 1);
    ``block`` ranks kept together by ``spread`` (>= 1); ``key`` the spec key named in errors.
    Returns ``{rank: host}``. Raises :class:`SpecError` naming ``key`` when there are fewer
    host slots than ranks (stating both numbers), for an unknown policy or a bad number.
    """
    if slots < 1 or block < 1:
        raise SpecError(SpecIssue(f"slots ({slots}) and block ({block}) must be at least 1",
                                  key_path=(key,)))
    capacity = sum(len(h) for h in sites.values()) * slots
    if capacity < world_size:
        raise SpecError(SpecIssue(
            f"{world_size} ranks need {world_size} host slots, but the {len(sites)} site(s) "
            f"have {sum(len(h) for h in sites.values())} host(s) x {slots} slot(s) = "
            f"{capacity}", key_path=(key,)))
    slot_lists = {s: [h for h in hosts for _ in range(slots)] for s, hosts in sites.items()}
    if policy == "packed":
        order = [h for hosts in slot_lists.values() for h in hosts]
        return {r: order[r] for r in range(world_size)}
    if policy == "spread":
        return _spread(world_size, slot_lists, block, key)
    raise SpecError(SpecIssue(f"unknown placement policy {policy!r}; known: packed, spread",
                              key_path=(key, "policy")))


def _spread(world: int, slot_lists: Mapping[str, list[str]], block: int,
            key: str) -> dict[int, str]:
    free = {s: list(h) for s, h in slot_lists.items() if h}
    out: dict[int, str] = {}
    names = list(free)
    i = 0
    for start in range(0, world, block):
        size = min(block, world - start)
        for _ in range(len(names)):  # next site (round-robin) with room for the block
            site = names[i % len(names)]
            i += 1
            if len(free[site]) >= size:
                break
        else:
            raise SpecError(SpecIssue(f"no site has {size} free host slots left for ranks "
                                      f"{start}..{start + size - 1} (block {block})",
                                      key_path=(key, "block")))
        for r in range(start, start + size):
            out[r] = free[site].pop(0)
    return out
