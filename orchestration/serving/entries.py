"""Experiment entries ``kind: inference`` and ``kind: background`` (validated with pydantic;
unit strings are checked here and parsed by models.units when the workload is built).

::

    - kind: inference
      clients: [c1, c2]            # users' hosts
      servers: [s1, s2]            # inference servers (instances)
      holders: [k1]                # hosts holding the context / model shards (bootstrap source)
      policy: nearest              # nearest | least_loaded | affinity | cats | oracle
      arrivals: {process: poisson, rate_per_s: 2, duration: 3s}
      #   or {process: trace, requests: [{at: 100ms, client: c1, session: a}, ...]}
      session_requests: 4          # consecutive requests of a client form one session
      #   or session: {length: {dist: exponential, mean: 4}, select: per_session}
      #   (dist fixed | exponential | lognormal (sigma: 1.0); select per_request | per_session)
      prompt: 2KiB
      tokens: 20
      token_size: 16B
      token_rate_per_s: 50
      prefill: 5ms
      bootstrap: {size: 4MiB, layers: [0.25, 0.75]}   # layers: coarse first (optional)
      memory: 8MiB                 # context memory of each server, or {s1: 8MiB, s2: 4MiB}
      context_size: 1MiB           # memory a held context costs (default: the bootstrap size)
      cats_weights: {delay: 1, load: 1, bootstrap: 1, memory: 1}   # policy: cats
      start: with_previous         # run alongside the previous workload (every kind has it)
      transport: {encryption: tls} # this workload's connections over TLS (every kind has it)

    - kind: background
      distribution: websearch      # websearch (DCTCP) | datamining (VL2)
      load: 0.5                    # target offered load on `link`, of its rate
      link: s1-rx                  # a link of the plan that every sender -> receiver path crosses
      senders: [tx1, tx2]
      receivers: [rx]
      duration: 5s                 # flows arrive during this long
      size_scale: 32               # divide flow sizes (scaled emulation of a faster network)
      rate: 100Mbit                # optional: the link's rate when it is not shaped
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from models.specfile import MAX_REPEATS, MAX_TOKENS
from models.unit_fields import Duration, Rate, Size, SpecModel

__all__ = ["StartMode", "WorkloadTransport", "InferenceEntry", "BackgroundEntry",
           "ArrivalsSpec", "TraceRequest", "BootstrapSpec", "SessionSpec", "SessionLengthSpec"]

StartMode = Literal["after_previous", "with_previous"]
_Forbid = ConfigDict(extra="forbid")


class WorkloadTransport(SpecModel):
    """``transport:`` of one workload entry (every kind has it), overriding the experiment's
    ``transport.encryption`` for the connections between this workload's hosts:
    ``encryption: tls`` runs them over TLS 1.3, ``none`` in the clear
    (orchestration/privacy/tls_pairs.py: workloads sharing a pair of hosts must agree, since
    the agents keep one set of connections per pair of hosts)."""

    model_config = ConfigDict(extra="forbid")
    encryption: Literal["none", "tls"]


class TraceRequest(SpecModel):
    """One traced request: ``at`` (duration after the start), ``client``, optional
    ``session``."""

    model_config = _Forbid
    at: Duration
    client: str
    session: str | None = None


class ArrivalsSpec(SpecModel):
    """``poisson``: ``rate_per_s`` requests per second per client during ``duration``;
    ``trace``: the listed ``requests``."""

    model_config = _Forbid
    process: Literal["poisson", "trace"] = "poisson"
    rate_per_s: Annotated[float, Field(gt=0)] | None = None
    duration: Duration | None = None
    requests: list[TraceRequest] | None = None

    @model_validator(mode="after")
    def _complete(self) -> ArrivalsSpec:
        if self.process == "poisson" and (self.rate_per_s is None or self.duration is None):
            raise ValueError("poisson arrivals need rate_per_s and duration")
        if self.process == "trace" and not self.requests:
            raise ValueError("trace arrivals need a non-empty requests list")
        return self


class BootstrapSpec(SpecModel):
    """Bytes fetched from the holders on a session's first request on a server;
    ``layers``: fractions (coarse first) summing to 1."""

    model_config = _Forbid
    size: Size
    layers: list[Annotated[float, Field(gt=0, le=1)]] = Field(default_factory=lambda: [1.0])

    @model_validator(mode="after")
    def _sum_to_one(self) -> BootstrapSpec:
        if abs(sum(self.layers) - 1.0) > 1e-6:
            raise ValueError(f"layers {self.layers} must sum to 1")
        return self


class CatsWeights(SpecModel):
    """``cats_weights:`` how ``policy: cats`` weighs the predicted round trip, queueing,
    bootstrap time and memory pressure of each instance (workloads/inference.py), each >= 0."""

    model_config = _Forbid
    delay: Annotated[float, Field(ge=0)] = 1.0
    load: Annotated[float, Field(ge=0)] = 1.0
    bootstrap: Annotated[float, Field(ge=0)] = 1.0
    memory: Annotated[float, Field(ge=0)] = 1.0


class SessionLengthSpec(SpecModel):
    """``length:`` of a session in requests (workloads.sessions): ``dist`` ``fixed`` (``mean``
    a whole number), ``exponential`` (geometric, mean exactly ``mean``) or ``lognormal``
    (rounded, shape ``sigma``); drawn per client from the experiment seed."""

    model_config = _Forbid
    dist: Literal["fixed", "exponential", "lognormal"] = "fixed"
    mean: Annotated[float, Field(ge=1, le=MAX_REPEATS)]
    sigma: Annotated[float, Field(gt=0, le=4)] = 1.0

    @model_validator(mode="after")
    def _whole_fixed(self) -> SessionLengthSpec:
        if self.dist == "fixed" and self.mean != int(self.mean):
            raise ValueError(f"a fixed session length is a whole number of requests, not "
                             f"{self.mean}")
        return self


class SessionSpec(SpecModel):
    """``session:`` how long sessions are (``length``) and whether the policy chooses per
    request (``per_request``, default) or once per session (``per_session``: a session's later
    requests follow its first; affinity and oracle always do)."""

    model_config = _Forbid
    length: SessionLengthSpec
    select: Literal["per_request", "per_session"] = "per_request"


class InferenceEntry(SpecModel):
    """``kind: inference`` (see the module docstring)."""

    model_config = _Forbid
    kind: Literal["inference"]
    name: str | None = None
    start: StartMode = "after_previous"
    transport: WorkloadTransport | None = None
    clients: Annotated[list[str], Field(min_length=1)]
    servers: Annotated[list[str], Field(min_length=1)]
    holders: list[str] = Field(default_factory=list)
    policy: Literal["nearest", "least_loaded", "affinity", "cats", "oracle"] = "nearest"
    cats_weights: CatsWeights | None = None
    arrivals: ArrivalsSpec
    session_requests: Annotated[int, Field(gt=0, le=MAX_REPEATS)] = 4
    session: SessionSpec | None = None
    prompt: Size = "2KiB"
    tokens: Annotated[int, Field(gt=0, le=MAX_TOKENS)] = 16
    token_size: Size = "16B"
    token_rate_per_s: Annotated[float, Field(gt=0)] = 50.0
    prefill: Duration = "0s"
    bootstrap: BootstrapSpec | None = None
    memory: Size | dict[str, Size] | None = None
    context_size: Size | None = None

    @model_validator(mode="after")
    def _holders_for_bootstrap(self) -> InferenceEntry:
        if self.bootstrap is not None and not self.holders:
            raise ValueError("bootstrap needs holders: the hosts that hold the context")
        if self.session is not None and "session_requests" in self.model_fields_set:
            raise ValueError("give session_requests (a fixed length) or session: {length: ...}"
                             ", not both")
        return self


class BackgroundEntry(SpecModel):
    """``kind: background`` (see the module docstring)."""

    model_config = _Forbid
    kind: Literal["background"]
    name: str | None = None
    start: StartMode = "after_previous"
    transport: WorkloadTransport | None = None
    distribution: Literal["websearch", "datamining"] = "websearch"
    load: Annotated[float, Field(gt=0, le=1)]
    link: str
    senders: Annotated[list[str], Field(min_length=1)]
    receivers: Annotated[list[str], Field(min_length=1)]
    duration: Duration
    size_scale: Annotated[float, Field(ge=1)] = 1.0
    rate: Rate | None = None
