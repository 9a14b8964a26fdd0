"""Compile a :class:`~models.schedule.Timed` op into per-rank wire ops (pure).

Every rank that sends or receives a message gets one op ``{"t": "xfer", "kind": "timed", ...}``
whose steps list, in message order, a send step for each message it sends and a recv step for
each it receives (:class:`traffic_gen.wire.TimedStep`), ``deps`` being indices of this rank's
own earlier steps (the messages named in ``after``). All steps are handed to the connection
workers at once (traffic_gen.timed), and each connection carries its messages in message order
on both ends, so a message waits only for lower-numbered ones: the replay cannot deadlock.
"""

from __future__ import annotations

from typing import Any

from models.schedule import Timed
from traffic_gen.wire import TimedStep

__all__ = ["compile_timed"]


def compile_timed(op_index: int, it: int, ident: str, op: Timed) -> dict[int, dict[str, Any]]:
    """Rank -> wire op of ``op`` (op ``op_index`` of iteration ``it``, id ``ident``).

    Assumes ``op`` passed Schedule validation (dependencies point to earlier messages that
    its sender takes part in). Pure."""
    steps: dict[int, list[TimedStep]] = {}
    local: dict[tuple[int, int], int] = {}  # (rank, message index) -> that rank's step index
    for k, m in enumerate(op.messages):
        deps = [local[(m.src, d)] for d in m.after]
        for rank, kind, peer in ((m.src, "send", m.dst), (m.dst, "recv", m.src)):
            mine = steps.setdefault(rank, [])
            local[(rank, k)] = len(mine)
            mine.append(TimedStep(kind, peer, m.size_bytes, deps if kind == "send" else [],
                                  m.tag, "tcp", None, m.at_s, m.gap_s, m.flow))
    return {r: {"t": "xfer", "op": op_index, "it": it, "kind": "timed", "id": ident,
                "label": op.label, "background": op.kind == "background", "steps": s}
            for r, s in steps.items()}
