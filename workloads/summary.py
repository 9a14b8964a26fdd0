"""Summaries of a Schedule for people and tests: what one iteration moves, per collective kind.

Counts are per communicator: a TP all-reduce that every one of 16 TP groups runs once counts
1 with ``instances`` 16, as AICB's own tables count it (one row, written from one rank's point
of view). ``total_bytes`` is the sum of ``size_bytes`` (nccl-tests' convention, see
models.schedule) of one communicator's calls; multiply by ``instances`` for the whole
job. Point-to-point transfers are listed as op ``send_recv`` on their group (``pp``...), their
count per pipeline; bursts as op ``burst``, group ``flows``, with the bytes of all their flows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from models.schedule import Burst, Collective, Compute, Gather, Schedule, SendRecv

__all__ = ["summarise", "collective_table", "stage_table"]


def collective_table(s: Schedule) -> list[dict[str, Any]]:
    """Per (op, group kind, group size): ``count`` and ``total_bytes`` per communicator per
    iteration, ``instances`` (communicators of that kind taking part) and the distinct
    ``sizes_bytes``. Sorted by group kind, then op."""
    return _table(s, None)


def stage_table(s: Schedule) -> list[dict[str, Any]]:
    """:func:`collective_table` split by pipeline stage: each row has ``stage``, the stage
    index of its ranks (``"S->T"`` for hand-offs from stage S to T, ``"S,T"`` for a group
    over stages S and T, ``"all"`` over every stage). Stages are ``meta["pp"]`` blocks of
    consecutive ranks (Megatron's layout, workloads/layout.py); ``[]`` when pp is 1."""
    pp = int(s.meta.get("pp", 1) or 1)  # type: ignore[call-overload]
    if pp <= 1 or s.world_size % pp:
        return []
    return _table(s, s.world_size // pp)


def _stage_of(s: Schedule, op: object, per_stage: int) -> str:
    if isinstance(op, SendRecv):
        return f"{op.src // per_stage}->{op.dst // per_stage}"
    stages = sorted({r // per_stage for r in s.ranks_of(op)})  # type: ignore[arg-type]
    if len(stages) == s.world_size // per_stage and len(stages) > 2:
        return "all"
    return ",".join(map(str, stages))


def _table(s: Schedule, per_stage: int | None) -> list[dict[str, Any]]:
    acc: dict[tuple, dict[str, Any]] = {}
    for op in s.ops:
        key, name = _key(s, op)
        if key is None:
            continue
        if per_stage is not None:
            key = (*key, _stage_of(s, op, per_stage))
        row = acc.setdefault(key, {"ops": 0, "bytes": 0, "names": set(), "sizes": set()})
        size = _size(op)
        row["ops"] += 1
        row["bytes"] += size
        row["names"].add(name)
        row["sizes"].add(size)
    out = []
    for key, row in sorted(acc.items(), key=lambda kv: (kv[0][3:], kv[0][1], kv[0][0])):
        n = len(row["names"])
        out.append({"op": key[0], "group": key[1], "group_size": key[2], "instances": n,
                    "count": row["ops"] // n, "total_bytes": row["bytes"] // n,
                    "sizes_bytes": sorted(row["sizes"]), **({"stage": key[3]} if key[3:] else {})})
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
    the busiest rank's compute seconds per iteration, the collective table, the per-stage
    table (:func:`stage_table`, empty without pipeline stages) and ``meta``."""
    kinds: dict[str, int] = defaultdict(int)
    for g in s.groups.values():
        kinds[g.kind] += 1
    per = compute_per_rank_s(s)
    return {"name": s.name, "source": s.source, "world_size": s.world_size,
            "iterations": s.iterations, "ops_per_iteration": len(s.ops),
            "groups": dict(sorted(kinds.items())),
            "compute_s_per_iteration": max(per) if per else 0.0,
            "collectives": collective_table(s), "stages": stage_table(s),
            "meta": dict(s.meta)}
