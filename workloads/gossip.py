"""Decentralised (gossip) federated learning as a Schedule (pure; seeded, reproducible).

No server: every round each of the N nodes trains locally and exchanges its (compressed,
quantised) model with its ``peers`` neighbours on a peer-to-peer overlay, then averages what
it received (gossip averaging, Boyd et al. 2006, "Randomized Gossip Algorithms", IEEE Trans.
Inf. Theory 52(6); decentralised SGD as in Lian et al. 2017, "Can Decentralized Algorithms
Outperform Centralized Algorithms?", NeurIPS). Ranks 0..N-1 are the nodes. One round is one
phase of :class:`~models.schedule.Gather` ops, one per node (level "gossip"): the node
is the root and its neighbours upload to it after their training; the round deadline cuts off
late neighbours, and every node writes its own RoundRecord.

Overlays: ``ring`` (each node's neighbours are the ``peers/2`` nearest on each side of a
ring; ``peers`` even, fixed every round) or ``random`` (each round every node picks ``peers``
distinct others, seeded; an exchange goes both ways, so a node can have more than ``peers``
neighbours).
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field, model_validator

from models.schedule import Gather, Op, Schedule
from models.specfile import MAX_FLOWS
from workloads.federated import FlBase

__all__ = ["Gossip", "gossip_schedule", "neighbours"]


class Gossip(FlBase):
    """Gossip parameters (FlBase's, with ``clients`` the number of nodes): ``peers`` per node
    and the ``overlay``."""

    peers: int = Field(2, ge=1)
    overlay: Literal["ring", "random"] = "ring"

    @model_validator(mode="after")
    def _peers_fit(self) -> Gossip:
        if self.peers >= self.clients:
            raise ValueError(f"peers ({self.peers}) must be fewer than the nodes "
                             f"({self.clients})")
        if self.overlay == "ring" and self.peers % 2:
            raise ValueError(f"peers ({self.peers}) must be even on a ring overlay (half on "
                             "each side)")
        # a random overlay's exchanges go both ways: up to 2 x peers neighbours per node
        per_node = self.peers if self.overlay == "ring" else 2 * self.peers
        uploads = self.rounds * self.clients * per_node
        if uploads > MAX_FLOWS:
            raise ValueError(f"rounds x nodes x neighbours = {self.rounds} x {self.clients} x "
                             f"{per_node} = {uploads} uploads; at most {MAX_FLOWS} (MAX_FLOWS): "
                             "fewer rounds, nodes or peers")
        return self


def neighbours(p: Gossip, rng: random.Random) -> dict[int, list[int]]:
    """Each node's neighbours for one round (sorted)."""
    n = p.clients
    edges: set[tuple[int, int]] = set()
    for i in range(n):
        if p.overlay == "ring":
            peers = [(i + d) % n for d in range(1, p.peers // 2 + 1)]
        else:
            peers = rng.sample([j for j in range(n) if j != i], p.peers)
        edges |= {(min(i, j), max(i, j)) for j in peers}
    out: dict[int, list[int]] = {i: [] for i in range(n)}
    for a, b in sorted(edges):
        out[a].append(b)
        out[b].append(a)
    return {i: sorted(v) for i, v in out.items()}


def gossip_schedule(p: Gossip, name: str = "gossip") -> Schedule:
    """All ``p.rounds`` rounds unrolled into one iteration; ``meta["rounds"]`` lists each
    round's neighbours and drawn training seconds."""
    rng = random.Random(p.seed)
    ops: list[Op] = []
    rounds = []
    for r in range(p.rounds):
        nb = neighbours(p, rng)
        train = {i: p.train_time.draw(rng, i + 1) for i in range(p.clients)}
        ops += [Gather(i, tuple(nb[i]), p.upload_bytes, 0, tuple(train[j] for j in nb[i]),
                       p.deadline_s, None, "gossip", r, label=f"round{r}.node{i}")
                for i in range(p.clients)]
        rounds.append({"round": r, "neighbours": nb, "train_s": train,
                       "deadline_s": p.deadline_s})
    meta = {"kind": "gossip", "model_bytes": p.model_bytes, "upload_bytes": p.upload_bytes,
            "rounds": rounds, "seed": p.seed, "scale": 1.0}
    return Schedule(name=name, world_size=p.clients, groups={}, ops=tuple(ops),
                    source="<gossip>", meta=meta)
