"""Federated learning (FedAvg) rounds as a Schedule (pure; seeded, reproducible).

FedAvg (McMahan et al. 2017, "Communication-Efficient Learning of Deep Networks from
Decentralized Data", Algorithm 1): each round the server selects a fraction C of the K
clients, sends them the model, each trains locally, uploads its update, and the server
averages. Rank 0 is the aggregator, ranks 1..N the clients. One round is one
:class:`~models.schedule.Gather` (model download, local training, upload: the incast at
the aggregator, bounded by the round deadline and, with over-commitment, a quorum), then the
aggregation :class:`Compute` on rank 0. The traffic generator cuts late clients off and
writes one RoundRecord per round.

Hierarchical FL (``clusters`` = k > 0; Liu et al. 2020, "Client-Edge-Cloud Hierarchical
Federated Learning", ICC): ranks 1..k are cluster aggregators, client c is rank k + c and
belongs to cluster (c-1) mod k. A round sends the model 0 -> cluster aggregators (a
:class:`Burst`), then every cluster runs its own deadline-bounded Gather (level "cluster"),
then the cluster aggregators upload their aggregate to rank 0 (a Gather, level "global",
whose round starts with the burst).

Sizes: the model is ``ceil(parameters x bits_per_parameter / 8)`` bytes (quantisation from 4 to
32 bits); an upload is that divided by ``compression_ratio`` (update compression; the download
is the full model). Over-commitment (Bonawitz et al. 2019, "Towards Federated Learning at
Scale", section 2.2) selects ``ceil(fraction x N x overcommit)`` clients (at most N) and stops
the round once the target ``ceil(fraction x N)`` have reported.
"""

from __future__ import annotations

import math
import random
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from models.schedule import Burst, Compute, Flow, Gather, Op, Schedule
from models.specfile import MAX_FLOWS, MAX_ITERATIONS, MAX_RANKS
from models.unit_fields import Seed, SpecModel

__all__ = ["TrainTime", "FlBase", "FedAvg", "fedavg_schedule"]


class TrainTime(SpecModel):
    """Local training time of one client in one round, seconds: ``constant`` (``seconds``),
    ``uniform`` (``low_s``..``high_s``), ``lognormal`` (median ``seconds``, shape ``sigma``)
    or ``trace`` (``per_client_s[c-1]`` for client c, every round)."""

    model_config = ConfigDict(extra="forbid")

    dist: Literal["constant", "uniform", "lognormal", "trace"] = "constant"
    seconds: float = Field(1.0, gt=0)
    low_s: float = Field(0.5, gt=0)
    high_s: float = Field(1.5, gt=0)
    # a shape above 10 spreads the median by e^10 either way per standard deviation (and
    # exp() of a draw of 1e300 overflows): no training time is that spread
    sigma: float = Field(0.5, ge=0, le=10)
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


class FlBase(SpecModel):
    """Parameters every FL variant shares: ``deadline_s`` (seconds from the round start; None:
    no deadline), model size and quantisation, update compression, training time, seed."""

    model_config = ConfigDict(extra="forbid")

    clients: int = Field(ge=1, le=MAX_RANKS, strict=True)
    rounds: int = Field(1, ge=1, le=MAX_ITERATIONS, strict=True)
    model_parameters: int = Field(ge=1, le=10**13, strict=True)
    bits_per_parameter: int = Field(32, ge=4, le=32, strict=True)
    compression_ratio: float = Field(1.0, ge=1.0, le=1e9, strict=True, allow_inf_nan=False)
    deadline_s: float | None = Field(None, gt=0, strict=True, allow_inf_nan=False)
    train_time: TrainTime = Field(default_factory=TrainTime)
    seed: Seed = 0

    @model_validator(mode="after")
    def _trace_covers_clients(self) -> FlBase:
        t = self.train_time
        if t.dist == "trace" and len(t.per_client_s) != self.clients:
            raise ValueError(f"train_time.per_client_s has {len(t.per_client_s)} values for "
                             f"{self.clients} clients")
        if t.dist == "uniform" and t.low_s > t.high_s:
            raise ValueError(f"train_time.low_s {t.low_s} exceeds high_s {t.high_s}")
        return self

    @property
    def model_bytes(self) -> int:
        """Download size: ceil(parameters x bits / 8)."""
        return math.ceil(self.model_parameters * self.bits_per_parameter / 8)

    @property
    def upload_bytes(self) -> int:
        """Upload size: the model size divided by the compression ratio (at least 1 byte)."""
        return max(1, math.ceil(self.model_bytes / self.compression_ratio))


class FedAvg(FlBase):
    """FedAvg parameters: selection ``fraction`` in (0, 1], ``overcommit`` >= 1, aggregation
    seconds, and ``clusters`` > 0 for hierarchical FL (``cluster_aggregate_s`` per cluster)."""

    fraction: float = Field(1.0, gt=0, le=1, strict=True)
    overcommit: float = Field(1.0, ge=1.0, le=1e6, strict=True, allow_inf_nan=False)
    aggregate_s: float = Field(0.0, ge=0)
    cluster_aggregate_s: float = Field(0.0, ge=0)
    clusters: int = Field(0, ge=0, le=MAX_RANKS)

    @model_validator(mode="after")
    def _clusters_fit(self) -> FedAvg:
        if self.clusters > self.clients:
            raise ValueError(f"clusters ({self.clusters}) exceed clients ({self.clients})")
        uploads = self.rounds * (self.selected_per_round + self.clusters)
        if uploads > MAX_FLOWS:
            raise ValueError(f"rounds x selected clients = {self.rounds} x "
                             f"{self.selected_per_round + self.clusters} = {uploads} uploads; "
                             f"at most {MAX_FLOWS} (MAX_FLOWS): fewer rounds, clients or a "
                             "smaller fraction")
        return self

    @property
    def first_client(self) -> int:
        """Rank of client 1: after the global aggregator and the cluster aggregators."""
        return 1 + self.clusters

    def aggregator_of(self, client: int) -> int:
        """The rank a client (1-based) uploads to: its cluster's aggregator, or rank 0."""
        return 1 + (client - 1) % self.clusters if self.clusters else 0

    @property
    def target_per_round(self) -> int:
        """ceil(fraction x clients): the updates a round needs."""
        return math.ceil(self.fraction * self.clients)

    @property
    def quorum(self) -> int | None:
        """With over-commitment the round stops after the target; else None (wait for all)."""
        return self.target_per_round if self.overcommit > 1 else None

    @property
    def selected_per_round(self) -> int:
        """ceil(fraction x clients x overcommit), at most ``clients``."""
        return min(self.clients,
                   math.ceil(min(self.fraction * self.clients * self.overcommit, self.clients)))


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
        ops += _hier_round(p, r, chosen, train, len(ops)) if p.clusters else \
            _round(p, r, chosen, train)
        rounds.append({"round": r, "selected": chosen, "train_s": train,
                       "deadline_s": p.deadline_s, "target": p.target_per_round})
    kind = "hierarchical" if p.clusters else "fedavg"
    meta = {"kind": kind, "aggregator": 0, "clusters": p.clusters, "model_bytes": p.model_bytes,
            "upload_bytes": p.upload_bytes, "rounds": rounds, "seed": p.seed, "scale": 1.0}
    return Schedule(name=name, world_size=p.first_client + p.clients, groups={}, ops=tuple(ops),
                    source="<fedavg>", meta=meta)


def _round(p: FedAvg, r: int, chosen: list[int], train: dict[int, float]) -> list[Op]:
    ops: list[Op] = [Gather(0, tuple(chosen), p.upload_bytes, p.model_bytes,
                            tuple(train[c] for c in chosen), p.deadline_s, p.quorum,
                            "global", r, label=f"round{r}")]
    if p.aggregate_s > 0:
        ops.append(Compute(p.aggregate_s, (0,), f"round{r}.aggregate"))
    return ops


def _hier_round(p: FedAvg, r: int, chosen: list[int], train: dict[int, float],
                first_op: int) -> list[Op]:
    aggs = tuple(range(1, p.first_client))
    ops: list[Op] = [Burst(tuple(Flow(0, a, p.model_bytes) for a in aggs),
                           label=f"round{r}.download.clusters")]
    for a in aggs:
        mine = [c for c in chosen if p.aggregator_of(c) == a]
        if not mine:
            continue
        quorum = math.ceil(len(mine) / p.overcommit) if p.overcommit > 1 else None
        ops.append(Gather(a, tuple(p.first_client + c - 1 for c in mine), p.upload_bytes,
                          p.model_bytes, tuple(train[c] for c in mine), p.deadline_s, quorum,
                          "cluster", r, first_op, label=f"round{r}.cluster{a}"))
    ops.append(Gather(0, aggs, p.upload_bytes, 0, (p.cluster_aggregate_s,) * len(aggs),
                      None, None, "global", r, first_op, label=f"round{r}"))
    if p.aggregate_s > 0:
        ops.append(Compute(p.aggregate_s, (0,), f"round{r}.aggregate"))
    return ops
