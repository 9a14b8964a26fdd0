"""Compile a :class:`~models.schedule.Gather` into per-rank wire ops (pure).

Root: ``{"t": "gather", "role": "root", "op", "it", "id", "label", "kind": "gather", "srcs",
"hosts" (rank -> host of every source), "down_bytes", "up_bytes", "deadline_s", "quorum",
"round", "level", "start_phase", "down_before" (bytes the round's opening burst
already sent the sources)}``. Source: ``{"t": "gather", "role": "src", ..., "root",
"down_bytes", "up_bytes", "compute_s" (training seconds x straggler slowdown), "slowdown"}``.
``start_phase`` is the phase whose start instant is the round start (the deadline's origin).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from models.schedule import Burst, Gather, Schedule
from models.stragglers import SlowdownDraw

__all__ = ["gather_ops", "renumber_phases"]


def gather_ops(s: Schedule, i: int, it: int, op: Gather, placement: Mapping[int, str],
               draw: SlowdownDraw, op_phase: Mapping[tuple[int, int], int]
               ) -> dict[int, dict[str, Any]]:
    """Wire ops of gather ``op`` (schedule op ``i``, iteration ``it``) per rank.
    ``op_phase`` maps (iteration, op index) to the phase index already assigned (it must hold
    ``(it, i)`` and, if set, ``(it, op.round_start_op)``)."""
    start = op_phase[(it, op.round_start_op if op.round_start_op is not None else i)]
    common = {"t": "gather", "op": i, "it": it, "id": f"g{it}.{i}", "label": op.label,
              "kind": "gather", "down_bytes": op.down_bytes, "up_bytes": op.size_bytes,
              "deadline_s": op.deadline_s, "round": op.round, "level": op.level,
              "start_phase": start, "root": op.root}
    out: dict[int, dict[str, Any]] = {op.root: {
        **common, "role": "root", "srcs": list(op.srcs), "quorum": op.quorum,
        "hosts": {str(r): placement[r] for r in op.srcs},
        "down_before": _down_before(s, op)}}
    for k, src in enumerate(op.srcs):
        f = draw.factor(src)
        train = op.compute_s[k] if op.compute_s else 0.0
        out[src] = {**common, "role": "src", "compute_s": train * f,
                    "slowdown": f}
    return out


def _down_before(s: Schedule, op: Gather) -> int:
    """Bytes the root already sent its sources in the burst that started the round
    (hierarchical FL: the model to the cluster aggregators), counted in the round record."""
    first = s.ops[op.round_start_op] if op.round_start_op is not None else None
    if not isinstance(first, Burst):
        return 0
    return sum(f.size_bytes for f in first.flows if f.src == op.root and f.dst in op.srcs)


def renumber_phases(ranks: MutableMapping[int, list[list[dict[str, Any]]]],
                    keep: list[int]) -> None:
    """After empty phases are dropped (``keep``: old indices kept, in order), point every
    gather's ``start_phase`` at the new index of its phase."""
    new = {old: n for n, old in enumerate(keep)}
    for prog in ranks.values():
        for phase in prog:
            for op in phase:
                if op["t"] == "gather":
                    op["start_phase"] = new[op["start_phase"]]
