"""Workloads that read the network's ALTO cost map (pure): placement, ring order, hierarchy.

The cost map (models.alto) gives a cost for every ordered pair of PIDs (sites or racks);
``pids`` maps each host to its PID. Three uses:

* :func:`order_rings` (``ring_order: cost_map``): the ranks of every communicator are
  reordered so that the ranks of one PID are consecutive and the PIDs follow the cheapest
  cycle, so a ring over the group crosses each inter-PID link (a DCI) the fewest times: once
  per PID boundary instead of once per neighbour pair that happens to straddle sites. A
  group with a rooted collective (broadcast, reduce, gather, scatter) keeps its order: its
  ``root`` is a group-local index whose meaning would change.
* :func:`cost_map_placement` (``placement: {policy: cost_map}``): ranks onto host slots
  minimising sum over rank pairs of bytes(r, s) x cost(PID(r), PID(s)), starting from the
  packed placement and swapping ranks between PIDs while a swap lowers the sum (a local
  search: a local minimum, not a proven optimum). Bytes per pair come from
  :func:`traffic_matrix`.
* ``hierarchy: cost_map``: the hierarchical algorithms group ranks by PID (the host -> PID map
  itself is the ``sites`` map traffic_gen takes).

:func:`ring_crossings` counts the ring edges of a group that join two PIDs (the number the
experiment examples/alto_ring_order.yaml compares).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import permutations

from models.errors import SpecError, SpecIssue
from models.schedule import Burst, Collective, Group, Schedule, SendRecv

__all__ = ["order_rings", "ring_crossings", "traffic_matrix", "placement_cost",
           "cost_map_placement", "ROOTED"]

ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
BRUTE_FORCE_PIDS = 8  # 7! = 5040 cycles to try; above, the nearest-neighbour cycle
Costs = Mapping[tuple[str, str], float]


def _cost(costs: Costs, a: str, b: str) -> float:
    return 0.0 if a == b else costs.get((a, b), float("inf"))


def _cycle(pids: Sequence[str], costs: Costs) -> list[str]:
    """The PIDs in the order of the cheapest cycle that starts at ``pids[0]``."""
    first, rest = pids[0], list(pids[1:])
    if len(pids) <= BRUTE_FORCE_PIDS:
        def total(order: Sequence[str]) -> float:
            ring = [first, *order]
            return sum(_cost(costs, ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring)))
        return [first, *min(permutations(rest), key=total)] if rest else [first]
    order = [first]
    while rest:
        nxt = min(rest, key=lambda p: _cost(costs, order[-1], p))
        order.append(nxt)
        rest.remove(nxt)
    return order


def _ordered(ranks: Sequence[int], placement: Mapping[int, str], pids: Mapping[str, str],
             costs: Costs) -> tuple[int, ...]:
    by_pid: dict[str, list[int]] = {}
    for r in ranks:
        by_pid.setdefault(pids[placement[r]], []).append(r)
    return tuple(r for p in _cycle(list(by_pid), costs) for r in by_pid[p])


def order_rings(schedule: Schedule, placement: Mapping[int, str], pids: Mapping[str, str],
                costs: Costs) -> Schedule:
    """``schedule`` with every group's ranks in cost-map ring order (module docstring);
    ``placement`` rank -> host, ``pids`` host -> PID, ``costs`` (src PID, dst PID) -> cost.
    The group's first rank stays first; inside a PID ranks keep ascending order. Raises
    KeyError naming a rank without a host or a host without a PID."""
    rooted = {op.group for op in schedule.ops if isinstance(op, Collective) and op.op in ROOTED}
    groups = {name: g if name in rooted else
              Group(g.name, g.kind, _ordered(g.ranks, placement, pids, costs))
              for name, g in schedule.groups.items()}
    return dataclasses.replace(schedule, groups=groups)


def ring_crossings(ranks: Sequence[int], placement: Mapping[int, str],
                   pids: Mapping[str, str]) -> int:
    """Ring edges (rank i to rank i+1, the last back to the first) of the communicator order
    ``ranks`` whose two ends lie in different PIDs; 0 for fewer than 2 ranks."""
    if len(ranks) < 2:
        return 0
    p = [pids[placement[r]] for r in ranks]
    return sum(p[i] != p[(i + 1) % len(p)] for i in range(len(p)))


def _collective_pairs(op: Collective, ranks: Sequence[int]) -> list[tuple[int, int, float]]:
    """(src, dst, bytes) of a collective under the ring model: every rank sends to its ring
    successor (n-1)/n x size for reduce_scatter and all_gather, twice that for all_reduce
    (Patarasuk and Yuan 2009; nccl-tests' busbw factors), size for a pipelined broadcast or
    reduce; an all_to_all sends size/n to every other rank (nccl-tests doc/PERFORMANCE.md)."""
    n = len(ranks)
    if n < 2:
        return []
    if op.op == "all_to_all":
        return [(a, b, op.size_bytes / n) for a in ranks for b in ranks if a != b]
    factor = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
              "all_gather": (n - 1) / n}.get(op.op, 1.0 if op.op in ROOTED else 1 / n)
    return [(ranks[i], ranks[(i + 1) % n], op.size_bytes * factor) for i in range(n)]


def traffic_matrix(schedule: Schedule) -> dict[tuple[int, int], float]:
    """(src rank, dst rank) -> bytes of one iteration of ``schedule``: collectives by the ring
    model of their group's order (:func:`_collective_pairs`), send/recv and burst flows by
    their sizes; other ops carry no traffic between ranks here."""
    out: dict[tuple[int, int], float] = defaultdict(float)
    for op in schedule.ops:
        if isinstance(op, Collective):
            for a, b, size in _collective_pairs(op, schedule.groups[op.group].ranks):
                out[(a, b)] += size
        elif isinstance(op, SendRecv):
            out[(op.src, op.dst)] += op.size_bytes
        elif isinstance(op, Burst):
            for f in op.flows:
                out[(f.src, f.dst)] += f.size_bytes
    return dict(out)


def placement_cost(traffic: Mapping[tuple[int, int], float], placement: Mapping[int, str],
                   pids: Mapping[str, str], costs: Costs) -> float:
    """Sum over rank pairs of bytes x cost(PID of src host, PID of dst host) (bytes x cost
    unit of the cost map)."""
    return sum(b * _cost(costs, pids[placement[s]], pids[placement[d]])
               for (s, d), b in traffic.items())


def cost_map_placement(schedule: Schedule, hosts: Sequence[str], pids: Mapping[str, str],
                       costs: Costs, *, slots: int = 1, key: str = "placement",
                       max_passes: int = 20) -> dict[int, str]:
    """Ranks of ``schedule`` onto ``hosts`` (plan order, ``slots`` ranks each) minimising
    :func:`placement_cost` (module docstring: packed start, then improving swaps between
    PIDs, at most ``max_passes`` sweeps). Returns ``{rank: host}``. Raises SpecError naming
    ``key`` when there are fewer slots than ranks."""
    world = schedule.world_size
    slot_hosts = [h for h in hosts for _ in range(slots)]
    if len(slot_hosts) < world:
        raise SpecError(SpecIssue(f"{world} ranks need {world} host slots, but there are "
                                  f"{len(hosts)} host(s) x {slots} slot(s) = "
                                  f"{len(slot_hosts)}", key_path=(key,)))
    place = {r: slot_hosts[r] for r in range(world)}
    spare = slot_hosts[world:]
    traffic = traffic_matrix(schedule)
    peers: dict[int, list[tuple[int, float, bool]]] = defaultdict(list)
    for (s, d), b in traffic.items():
        peers[s].append((d, b, True))
        peers[d].append((s, b, False))

    def local(r: int, host: str, other: int | None = None, other_host: str = "") -> float:
        total = 0.0
        for q, b, out in peers[r]:
            qh = other_host if q == other else place[q]
            a, z = (host, qh) if out else (qh, host)
            total += b * _cost(costs, pids[a], pids[z])
        return total

    for _ in range(max_passes):
        improved = False
        for r in range(world):
            for s in range(r + 1, world):
                hr, hs = place[r], place[s]
                if pids[hr] == pids[hs]:
                    continue
                before = local(r, hr) + local(s, hs)
                after = local(r, hs, s, hr) + local(s, hr, r, hs)
                if after < before - 1e-9:
                    place[r], place[s] = hs, hr
                    improved = True
            for i, h in enumerate(spare):  # an unused slot elsewhere may be cheaper
                if pids[h] != pids[place[r]] and local(r, h) < local(r, place[r]) - 1e-9:
                    spare[i], place[r] = place[r], h
                    improved = True
        if not improved:
            break
    return place
