"""Step plans: what each rank of a collective sends and receives, in order (pure data).

A :data:`Plan` holds, for every group-local rank ``0..n-1``, an ordered tuple of
:class:`Step`. Semantics shared by the builders, the checker and the agents:

* the k-th ``send`` from rank a to rank b is matched by the k-th ``recv`` at b from a
  (one FIFO channel per ordered pair, like a TCP connection);
* a step starts once every step named in its ``deps`` (indices into the same rank's list) has
  completed, and after the earlier steps of its own channel (same kind, same peer);
* a send that forwards data (a reduced chunk, a broadcast block) depends on the receive that
  brought that data, so a slow link delays every later step that needs its data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["Step", "Plan", "PlanBuilder", "split_bytes", "pieces", "lift", "sequence"]

StepKind = Literal["send", "recv"]


@dataclass(frozen=True, slots=True)
class Step:
    """One transfer endpoint of a rank: ``kind`` send or recv of ``size_bytes`` to/from group
    rank ``peer``; ``deps`` are indices of earlier steps of the same rank; ``tag`` names the
    algorithm phase (``"rs1"``, ``"ag0"``, ``"up"``...) for records and debugging."""

    kind: StepKind
    peer: int
    size_bytes: int
    deps: tuple[int, ...] = ()
    tag: str = ""


Plan = tuple[tuple[Step, ...], ...]


class PlanBuilder:
    """Accumulates steps per rank; :meth:`send`/:meth:`recv` return the new step's index."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.steps: list[list[Step]] = [[] for _ in range(n)]

    def add(self, rank: int, kind: StepKind, peer: int, size_bytes: int,
            deps: Sequence[int | None] = (), tag: str = "") -> int:
        """Append a step to ``rank``; ``None`` entries in ``deps`` are ignored."""
        clean = tuple(sorted({d for d in deps if d is not None}))
        self.steps[rank].append(Step(kind, peer, size_bytes, clean, tag))
        return len(self.steps[rank]) - 1

    def send(self, rank: int, peer: int, size_bytes: int, deps: Sequence[int | None] = (),
             tag: str = "") -> int:
        """Append a send of ``size_bytes`` from ``rank`` to ``peer``."""
        return self.add(rank, "send", peer, size_bytes, deps, tag)

    def recv(self, rank: int, peer: int, size_bytes: int, deps: Sequence[int | None] = (),
             tag: str = "") -> int:
        """Append a receive of ``size_bytes`` at ``rank`` from ``peer``."""
        return self.add(rank, "recv", peer, size_bytes, deps, tag)

    def plan(self) -> Plan:
        """The immutable plan."""
        return tuple(tuple(s) for s in self.steps)


def split_bytes(size_bytes: int, parts: int) -> list[int]:
    """Split ``size_bytes`` into ``parts`` near-equal integers (the first ``size % parts`` get
    one byte more), summing exactly to ``size_bytes``."""
    base, extra = divmod(size_bytes, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def pieces(size_bytes: int, chunk_bytes: int | None) -> list[int]:
    """Cut a segment into pipeline pieces of at most ``chunk_bytes`` (None: one piece)."""
    if chunk_bytes is None or size_bytes <= chunk_bytes:
        return [size_bytes]
    full, rest = divmod(size_bytes, chunk_bytes)
    return [chunk_bytes] * full + ([rest] if rest else [])


def lift(sub: Plan, members: Sequence[int], n: int) -> Plan:
    """Embed ``sub`` (a plan over ``len(members)`` ranks) into a group of ``n`` ranks: sub-rank
    i becomes ``members[i]``; ranks outside ``members`` get no steps."""
    out: list[tuple[Step, ...]] = [() for _ in range(n)]
    for i, steps in enumerate(sub):
        out[members[i]] = tuple(replace(s, peer=members[s.peer]) for s in steps)
    return tuple(out)


def sequence(n: int, phases: Sequence[Plan]) -> Plan:
    """Concatenate phases per rank: a step of phase k without deps inside its phase waits for
    every step the same rank did in earlier phases (its data comes from them)."""
    out: list[list[Step]] = [[] for _ in range(n)]
    for phase in phases:
        for r in range(n):
            offset, before = len(out[r]), _sinks(out[r])
            for s in phase[r]:
                deps = tuple(d + offset for d in s.deps) if s.deps else before
                out[r].append(replace(s, deps=deps))
    return tuple(tuple(s) for s in out)


def _sinks(steps: Sequence[Step]) -> tuple[int, ...]:
    """Indices of steps no later step depends on: waiting for them waits for all."""
    used = {d for s in steps for d in s.deps}
    return tuple(i for i in range(len(steps)) if i not in used)
