"""Checks of a step plan by simulation: matching sends/receives and freedom from deadlock.

The simulation follows the executor's semantics (steps.py): a step may complete once its deps
and the earlier steps of its channel have completed; a receive also needs its matching send
to have started. Rounds count how many dependency levels the plan has (2(n-1) for a ring
all-reduce), a proxy for its latency term (alpha-beta model).
"""

from __future__ import annotations

from collections import defaultdict

from traffic_gen.algorithms.steps import Plan

__all__ = ["PlanCheckError", "check_plan", "bytes_sent"]


class PlanCheckError(ValueError):
    """A plan whose sends and receives do not match, or that cannot complete."""


def bytes_sent(plan: Plan) -> list[int]:
    """Bytes each rank sends in ``plan``."""
    return [sum(s.size_bytes for s in steps if s.kind == "send") for steps in plan]


def _channels(plan: Plan) -> dict[tuple[str, int, int], list[tuple[int, int]]]:
    """(kind, src, dst) -> [(rank, step index)] in channel order."""
    ch: dict[tuple[str, int, int], list[tuple[int, int]]] = defaultdict(list)
    for r, steps in enumerate(plan):
        for i, s in enumerate(steps):
            if not 0 <= s.peer < len(plan) or s.peer == r:
                raise PlanCheckError(f"rank {r} step {i}: bad peer {s.peer}")
            if any(not 0 <= d < i for d in s.deps):
                raise PlanCheckError(f"rank {r} step {i}: deps {s.deps} not earlier steps")
            src, dst = (r, s.peer) if s.kind == "send" else (s.peer, r)
            ch[(s.kind, src, dst)].append((r, i))
    return ch


def _match(plan: Plan, ch) -> dict[tuple[int, int], tuple[int, int]]:
    """recv (rank, i) -> matching send (rank, i); raises on count or size mismatch."""
    match = {}
    for (kind, src, dst), sends in ch.items():
        if kind != "send":
            continue
        recvs = ch.get(("recv", src, dst), [])
        if len(recvs) != len(sends):
            raise PlanCheckError(f"{src}->{dst}: {len(sends)} sends, {len(recvs)} receives")
        for k, (s, r) in enumerate(zip(sends, recvs, strict=True)):
            if plan[s[0]][s[1]].size_bytes != plan[r[0]][r[1]].size_bytes:
                raise PlanCheckError(f"{src}->{dst} message {k}: sizes differ")
            match[r] = s
    for (kind, src, dst), recvs in ch.items():
        if kind == "recv" and ("send", src, dst) not in ch:
            raise PlanCheckError(f"{src}->{dst}: {len(recvs)} receives without sends")
    return match


def check_plan(plan: Plan) -> int:
    """Simulate ``plan``; return its number of rounds (longest dependency chain, channel
    order and send->recv edges included). Raises PlanCheckError on mismatch or deadlock."""
    ch = _channels(plan)
    match = _match(plan, ch)
    prev_on_channel = {}
    for members in ch.values():
        for a, b in zip(members, members[1:], strict=False):
            prev_on_channel[b] = a
    level: dict[tuple[int, int], int] = {}
    pending = [(r, i) for r, steps in enumerate(plan) for i in range(len(steps))]
    while pending:
        left = []
        for node in pending:
            r, i = node
            before = [(r, d) for d in plan[r][i].deps]
            before += [x for x in (prev_on_channel.get(node), match.get(node)) if x]
            if all(b in level for b in before):
                level[node] = 1 + max((level[b] for b in before), default=0) \
                    if node in match else max((level[b] for b in before), default=0)
            else:
                left.append(node)
        if len(left) == len(pending):
            raise PlanCheckError(f"deadlock: {len(left)} steps can never start, e.g. "
                                 f"rank {left[0][0]} step {left[0][1]}")
        pending = left
    return max(level.values(), default=0)
