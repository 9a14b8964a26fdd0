"""Federated learning (FedAvg) rounds as a Schedule (pure; seeded, reproducible).

FedAvg (McMahan et al. 2017, "Communication-Efficient Learning of Deep Networks from
Decentralized Data", Algorithm 1): each round the server selects a fraction C of the K
clients, sends them the model, each trains locally, uploads its update, and the server
averages. Rank 0 is the aggregator, ranks 1..N the clients (with ``clusters`` = k > 0, ranks
1..k are cluster aggregators, client c is rank k + c and belongs to cluster (c-1) mod k: a
hierarchical FL round sends the model 0 -> cluster aggregators -> clients and the updates back
the same way, one aggregated update per cluster). Per round: one :class:`Burst` of
model downloads (all start together), per selected client a :class:`Compute` (its local
training) and a :class:`SendRecv` upload to rank 0 (the incast), then the aggregation
:class:`Compute` on rank 0. Uploads are listed in the order the clients are expected to finish
(shortest training first), so the aggregator receives them in that order.

Sizes: the model is ``ceil(parameters x bits_per_parameter / 8)`` bytes (quantisation from 4 to
32 bits); an upload is that divided by ``compression_ratio`` (update compression; the download
is the full model). Over-commitment (Bonawitz et al. 2019, "Towards Federated Learning at
Scale", section 2) selects ``ceil(fraction x N x overcommit)`` clients (at most N) so that
enough finish.

Not expressible in the Schedule model (see the report): a round deadline after which late
clients are dropped. The deadline and the target number of clients are recorded per round in
``meta["rounds"]``; the runtime cannot yet act on them.
"""

from __future__ import annotations

import math
import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from aitb.models.schedule import Burst, Compute, Flow, Op, Schedule, SendRecv

__all__ = ["TrainTime", "FedAvg", "fedavg_schedule"]


class TrainTime(BaseModel):
    """Local training time of one client in one round, seconds: ``constant`` (``seconds``),
    ``uniform`` (``low_s``..``high_s``), ``lognormal`` (median ``seconds``, shape ``sigma``)
    or ``trace`` (``per_client_s[c-1]`` for client c, every round)."""

    model_config = ConfigDict(extra="forbid")

    dist: Literal["constant", "uniform", "lognormal", "trace"] = "constant"
    seconds: float = Field(1.0, gt=0)
    low_s: float = Field(0.5, gt=0)
    high_s: float = Field(1.5, gt=0)
    sigma: float = Field(0.5, ge=0)
    per_client_s: list[float] = Field(default_factory=list)

    def draw(self, rng: random.Random, client: int) -> float:
        """One training time for ``client`` (1-based) from ``rng``."""
        if self.dist == "constant":
            return self.seconds
        if self.dist == "uniform":
            return rng.uniform(self.low_s, self.high_s)
        if self.dist == "lognormal":
            return self.seconds * math.exp(rng.gauss(0.0, self.sigma))
        return self.per_client_s[client - 1]


class FedAvg(BaseModel):
    """FedAvg parameters; ``deadline_s`` None means no deadline."""

    model_config = ConfigDict(extra="forbid")

    clients: PositiveInt
    rounds: PositiveInt = 1
    model_parameters: PositiveInt
    bits_per_parameter: int = Field(32, ge=4, le=32)
    compression_ratio: float = Field(1.0, ge=1.0)
    fraction: float = Field(1.0, gt=0, le=1)
    overcommit: float = Field(1.0, ge=1.0)
    deadline_s: float | None = Field(None, gt=0)
    aggregate_s: float = Field(0.0, ge=0)
    clusters: int = Field(0, ge=0)
    train_time: TrainTime = Field(default_factory=TrainTime)
    seed: int = 0

    @model_validator(mode="after")
    def _trace_covers_clients(self) -> FedAvg:
        t = self.train_time
        if t.dist == "trace" and len(t.per_client_s) != self.clients:
            raise ValueError(f"train_time.per_client_s has {len(t.per_client_s)} values for "
                             f"{self.clients} clients")
        if t.dist == "uniform" and t.low_s > t.high_s:
            raise ValueError(f"train_time.low_s {t.low_s} exceeds high_s {t.high_s}")
        if self.clusters > self.clients:
            raise ValueError(f"clusters ({self.clusters}) exceed clients ({self.clients})")
        return self

    @property
    def first_client(self) -> int:
        """Rank of client 1: after the global aggregator and the cluster aggregators."""
        return 1 + self.clusters

    def aggregator_of(self, client: int) -> int:
        """The rank a client (1-based) uploads to: its cluster's aggregator, or rank 0."""
        return 1 + (client - 1) % self.clusters if self.clusters else 0

    @property
    def model_bytes(self) -> int:
        """Download size: ceil(parameters x bits / 8)."""
        return math.ceil(self.model_parameters * self.bits_per_parameter / 8)

    @property
    def upload_bytes(self) -> int:
        """Upload size: the model size divided by the compression ratio (at least 1 byte)."""
        return max(1, math.ceil(self.model_bytes / self.compression_ratio))

    @property
    def selected_per_round(self) -> int:
        """ceil(fraction x clients x overcommit), at most ``clients``."""
        return min(self.clients, math.ceil(self.fraction * self.clients * self.overcommit))


def fedavg_schedule(p: FedAvg, name: str = "fedavg") -> Schedule:
    """All ``p.rounds`` rounds unrolled into one iteration (selection differs per round).

    ``meta["rounds"]`` lists per round the selected clients, their drawn training seconds,
    the deadline and the target count ``ceil(fraction x clients)``.
    """
    rng = random.Random(p.seed)
    ops: list[Op] = []
    rounds = []
    for r in range(p.rounds):
        chosen = sorted(rng.sample(range(1, p.clients + 1), p.selected_per_round))
        train = {c: p.train_time.draw(rng, c) for c in chosen}
        ops += _round(p, r, chosen, train)
        rounds.append({"round": r, "selected": chosen, "train_s": train,
                       "deadline_s": p.deadline_s,
                       "target": math.ceil(p.fraction * p.clients)})
    meta = {"kind": "fedavg", "aggregator": 0, "model_bytes": p.model_bytes,
            "upload_bytes": p.upload_bytes, "rounds": rounds, "seed": p.seed, "scale": 1.0}
    return Schedule(name=name, world_size=p.first_client + p.clients, groups={}, ops=tuple(ops),
                    source="<fedavg>", meta=meta)


def _round(p: FedAvg, r: int, chosen: list[int], train: dict[int, float]) -> list[Op]:
    rank = {c: p.first_client + c - 1 for c in chosen}
    ops: list[Op] = []
    if p.clusters:  # hierarchical: the global model first reaches the cluster aggregators
        ops.append(Burst(tuple(Flow(0, a, p.model_bytes) for a in range(1, p.first_client)),
                         label=f"round{r}.download.clusters"))
    ops.append(Burst(tuple(Flow(p.aggregator_of(c), rank[c], p.model_bytes) for c in chosen),
                     label=f"round{r}.download"))
    ops += [Compute(train[c], (rank[c],), f"round{r}.train") for c in chosen]
    ops += [SendRecv(rank[c], p.aggregator_of(c), p.upload_bytes, label=f"round{r}.upload")
            for c in sorted(chosen, key=lambda c: (train[c], c))]
    if p.clusters:
        ops += [SendRecv(a, 0, p.upload_bytes, label=f"round{r}.upload.clusters")
                for a in range(1, p.first_client)]
    if p.aggregate_s > 0:
        ops.append(Compute(p.aggregate_s, (0,), f"round{r}.aggregate"))
    return ops
