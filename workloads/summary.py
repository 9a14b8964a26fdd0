"""Summaries of a Schedule for people and tests: what one iteration moves, per collective kind.

Counts are per communicator: a TP all-reduce that every one of 16 TP groups runs once counts
1 with ``instances`` 16, as AICB's own tables count it (one row, written from one rank's point
of view). ``total_bytes`` is the sum of ``size_bytes`` (nccl-tests' convention, see
aitb.schedule) of one communicator's calls; multiply by ``instances`` for the whole
job. Point-to-point transfers are listed as op ``send_recv`` on their group (``pp``...), their
count per pipeline; bursts as op ``burst``, group ``flows``, with the bytes of all their flows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from aitb.schedule import Burst, Collective, Compute, Gather, Schedule, SendRecv

__all__ = ["summarise", "collective_table"]


def collective_table(s: Schedule) -> list[dict[str, Any]]:
    """Per (op, group kind, group size): ``count`` and ``total_bytes`` per communicator per
    iteration, ``instances`` (communicators of that kind taking part) and the distinct
    ``sizes_bytes``. Sorted by group kind, then op."""
    acc: dict[tuple[str, str, int], dict[str, Any]] = {}
    for op in s.ops:
        key, name = _key(s, op)
        if key is None:
            continue
        row = acc.setdefault(key, {"ops": 0, "bytes": 0, "names": set(), "sizes": set()})
        size = _size(op)
        row["ops"] += 1
        row["bytes"] += size
        row["names"].add(name)
        row["sizes"].add(size)
    out = []
    for (op_name, kind, gsize), row in sorted(acc.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        n = len(row["names"])
        out.append({"op": op_name, "group": kind, "group_size": gsize, "instances": n,
                    "count": row["ops"] // n, "total_bytes": row["bytes"] // n,
                    "sizes_bytes": sorted(row["sizes"])})
    return out


def _key(s: Schedule, op: object) -> tuple[tuple[str, str, int] | None, str]:
    if isinstance(op, Collective):
        g = s.groups[op.group]
        return (op.op, g.kind, len(g.ranks)), g.name
    if isinstance(op, SendRecv):
        g = s.groups.get(op.group) if op.group else None
        kind = g.kind if g else "p2p"
        return ("send_recv", kind, len(g.ranks) if g else 2), g.name if g else "p2p"
    if isinstance(op, Burst):
        return ("burst", "flows", len(s.ranks_of(op))), "flows"
    if isinstance(op, Gather):  # a deadline-bounded FL round: model down, updates up
        return ("gather", op.level, len(op.srcs) + 1), f"{op.level}.{op.root}"
    return None, ""


def _size(op: object) -> int:
    if isinstance(op, Burst):
        return sum(f.size_bytes for f in op.flows)
    if isinstance(op, Gather):
        return (op.down_bytes + op.size_bytes) * len(op.srcs)
    return op.size_bytes  # type: ignore[attr-defined]


def compute_per_rank_s(s: Schedule) -> list[float]:
    """Seconds of Compute each rank runs in one iteration, ``(world_size,)``."""
    per = [0.0] * s.world_size
    for op in s.ops:
        if isinstance(op, Compute):
            for r in s.ranks_of(op):
                per[r] += op.duration_s
    return per


def summarise(s: Schedule) -> dict[str, Any]:
    """A JSON-ready summary of ``s``: name, source, world size, iterations, groups per kind,
    the busiest rank's compute seconds per iteration, the collective table and ``meta``."""
    kinds: dict[str, int] = defaultdict(int)
    for g in s.groups.values():
        kinds[g.kind] += 1
    per = compute_per_rank_s(s)
    return {"name": s.name, "source": s.source, "world_size": s.world_size,
            "iterations": s.iterations, "ops_per_iteration": len(s.ops),
            "groups": dict(sorted(kinds.items())),
            "compute_s_per_iteration": max(per) if per else 0.0,
            "collectives": collective_table(s), "meta": dict(s.meta)}
