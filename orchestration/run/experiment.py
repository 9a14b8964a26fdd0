"""Experiment files: topology + workloads + transport, validated before anything is created.

An experiment file (YAML)::

    name: ring-allreduce               # [a-z0-9-], names the results folder
    seed: 1
    scale: 1                           # divide rates, sizes and buffers by this (keep delays)
    topology: {file: ../topologies/examples/single_switch.yaml}   # or {generator: NAME,
                                       #   params: {...}}, or the topology mapping inline
    transport: {tcp_congestion_control: cubic, nodelay: true, sndbuf: 4MiB,
                rto_min: 50ms, ecn: true}   # the last two: on every host
    backend: mininet                   # optional: native (default) or mininet (Mininet's
                                       #   nodes and links, aitb's shaping and records)
    workloads:
      - kind: collective               # collective | incast | one_to_many | permutation |
        op: all_reduce                 # all_pairs | training | aicb | fedavg |
                                       # hierarchical | gossip
        algorithm: ring
        size: 16MiB
        hosts: [h1, h2, h3, h4]        # rank i on hosts[i]; or placement: {policy: packed}
        iterations: 3
        compute: 10ms                  # compute time before each collective (per rank)
        stragglers: {fixed: {3: 2.0}}  # rank 3 computes twice as slowly
    capture: {interfaces: bottleneck, snaplen: 128, rotate_size: 100MB, files: 4}
                                       # or interfaces: all | [s1:rx, ...]; enabled: false
    counters: {interval: 10ms, tcp: true}   # qdisc/link/TCP_INFO samples; enabled: false
    events:                            # faults and dynamics (orchestration/events/spec.py)
      - {at: 2s, kind: link_down, link: dci-a}
        start: after_previous          # or with_previous: run concurrently with the workload
                                       # before it (every kind; see runner.py)
    delay_line_cpu: 1                  # optional: a CPU for the native delay line alone
                                       #   (accurate at ~1 Gbit/s of MTU packets; costs it)
    cluster:                           # optional: the lab over these machines, over SSH
      machines:                        #   (orchestration/cluster/spec.py; placed by site)
        - {name: m1, ssh: 10.0.0.1, user: root, key: ~/.ssh/aitb, site: dc1}
        - {name: m2, ssh: 10.0.0.2, user: root, key: ~/.ssh/aitb, site: dc2}

Each workload kind (its keys and its builder) is one module of orchestration/run/kinds/:
``kind: inference`` and ``kind: background`` take the keys of
orchestration/serving/entries.py, ``kind: app`` (a real application on several nodes) those
of orchestration/apps/entries.py.

Relative paths are relative to the experiment file. Errors name the file, key path and line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    model_validator,
)

from models.energy import EnergySelection, check_selection
from models.errors import SpecError, SpecIssue
from models.events import EVENT_KINDS
from models.specfile import MAX_CONNS_PER_PEER, issues_from_validation, with_lines
from models.unit_fields import Duration, Seed, Size, SpecModel
from models.units import DurationS
from orchestration.cluster.spec import ClusterSpec
from orchestration.events.spec import EventEntry
from orchestration.run.kinds import KIND_NAMES, WorkloadEntry
from topologies.loader import read_yaml

__all__ = ["ExperimentSpec", "load_experiment", "parse_experiment", "NAME_PATTERN",
           "EXPERIMENT_TOP"]

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
EXPERIMENT_TOP = "an experiment: a mapping with name, topology and workloads"
_KINDS = KIND_NAMES  # the workload kinds, each a module of orchestration.run.kinds
_Forbid = ConfigDict(extra="forbid")
_AT_TAGS = ("time", "workload")  # orchestration/events/spec.py: At


class TopologyRef(SpecModel):
    """Where the lab comes from: a topology ``file``, a ``generator`` with ``params``, or an
    ``inline`` topology mapping (the topology file format)."""

    model_config = _Forbid
    file: str | None = None
    generator: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    inline: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> TopologyRef:
        given = [k for k in ("file", "generator", "inline") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of file, generator, inline (got {given or 'none'})")
        if self.params and self.generator is None:
            raise ValueError("params go with generator")
        return self


RTO_MIN_MAX_S = 120.0  # TCP_RTO_MAX, include/net/tcp.h: a larger minimum means nothing


def _rto_min_ok(value: DurationS) -> DurationS:
    if not 0.001 <= value <= RTO_MIN_MAX_S:
        raise ValueError(f"rto_min '{value}' must lie in 1ms..{RTO_MIN_MAX_S:g}s (the kernel "
                         "keeps whole milliseconds, at most TCP_RTO_MAX)")
    return value


class TransportSpec(SpecModel):
    """TCP knobs of every workload socket: congestion control (what the kernel offers),
    socket buffers (unit strings; None = autotuning), TCP_NODELAY, connections per peer; and
    of every host: ``rto_min`` (a duration; a locked route metric on all its routes) and
    ``ecn`` (net.ipv4.tcp_ecn: true 1, false 0, "server" 2 = accept but never request);
    ``encryption`` ``tls``: every workload TCP connection (persistent and FL gathers') runs
    TLS 1.3 with a per-run self-signed certificate (traffic_gen/tls.py; the kernel here has
    no kTLS, ESP or WireGuard, so encryption is the agents' own, in user space); with
    ``encrypt_between`` (pairs of sites, unordered; [a, a]: inside site a) only the
    connections between hosts of a listed site pair. UDP flows cannot be encrypted (DTLS is
    not in Python's ssl): a UDP flow that would need it is refused before the run."""

    model_config = _Forbid
    tcp_congestion_control: str | None = None
    sndbuf: Size | None = None
    rcvbuf: Size | None = None
    nodelay: bool = True
    conns_per_peer: Annotated[int, Field(gt=0, le=MAX_CONNS_PER_PEER)] = 1
    rto_min: Annotated[Duration, AfterValidator(_rto_min_ok)] | None = None
    ecn: StrictBool | Literal["server"] | None = None
    encryption: Literal["none", "tls"] = "none"
    encrypt_between: list[Annotated[list[str], Field(min_length=2, max_length=2)]] | None = None

    @model_validator(mode="after")
    def _pairs_need_tls(self) -> TransportSpec:
        if self.encrypt_between is not None and self.encryption != "tls":
            raise ValueError("encrypt_between names the site pairs that run TLS: it needs "
                             "encryption: tls")
        return self


class TimeoutSpec(SpecModel):
    """Longest a transfer (after its first byte) and a phase may take, and how long the
    agents may take to start and connect (``agent_start``; more agents on a slow machine, e.g.
    inside the TCG VM, need more) (duration strings). ``start_margin``: how far ahead the
    controller hands out the start instant of a timed phase (a burst, an FL round, timed
    requests); unset: measured from control round trips (phases.json records it); the margin
    is idle time, not counted in iteration times nor between bursts' gaps. A transfer larger
    than its path's narrowest rate carries within ``transfer`` is refused before the lab
    exists (orchestration/run/size_check.py)."""

    model_config = _Forbid
    transfer: Duration = "60s"
    phase: Duration = "600s"
    agent_start: Duration = "20s"
    start_margin: Duration | None = None


MIN_SNAPLEN = 64  # Ethernet 14 + IPv4 20 + TCP 20 bytes fit; 128 also keeps IPv6 + options
MAX_SNAPLEN = 262144  # libpcap's MAXIMUM_SNAPLEN
MIN_INTERVAL_S = 0.001  # below this the sampler can only fall behind (bench/counter_sampler.py)


def _interval_ok(value: DurationS) -> DurationS:
    if not MIN_INTERVAL_S <= value <= 60:
        raise ValueError(f"interval '{value}' must lie in 1ms..60s")
    return value


def _refresh_ok(value: DurationS) -> DurationS:
    if not 0.05 <= value <= 60:
        raise ValueError(f"refresh '{value}' must lie in 50ms..60s")
    return value


class CaptureSpecModel(SpecModel):
    """``capture:`` packet capture during the run (testbed/capture/tcpdump.py): ``interfaces``
    ``bottleneck`` (testbed.capture.points), ``all`` or a list of ``node:ifname``; ``snaplen``
    bytes kept per packet; ``rotate_size`` (a size) per file, ``files`` in the ring."""

    model_config = _Forbid
    enabled: StrictBool = True
    interfaces: Literal["bottleneck", "all"] | list[str] = "bottleneck"
    snaplen: Annotated[StrictInt, Field(ge=MIN_SNAPLEN, le=MAX_SNAPLEN)] = 128
    rotate_size: Size = "100MB"
    files: Annotated[StrictInt, Field(ge=1, le=1000)] = 4


class CountersSpecModel(SpecModel):
    """``counters:`` counter sampling during the run (models/counter_columns.py): every
    ``interval`` (a duration), qdisc and interface counters of every node, and TCP_INFO of
    the hosts' sockets unless ``tcp: false``."""

    model_config = _Forbid
    enabled: StrictBool = True
    interval: Annotated[Duration, AfterValidator(_interval_ok)] = "10ms"
    tcp: StrictBool = True


class AltoSpecModel(SpecModel):
    """``alto:`` the lab's ALTO maps (models.alto; always written to ``alto/`` of the run):
    ``pids`` one PID per ``site`` or per ``rack``; ``metric`` the cost that ``placement:
    {policy: cost_map}``, ``ring_order: cost_map`` and ``hierarchy: cost_map`` minimise;
    ``serve`` also serves them over HTTP from
    ``node``'s namespace (default: the first host) on ``port`` (orchestration.alto.serve);
    ``live`` refreshes the ``bw-available`` and ``delay-ow`` maps from the counters every
    ``refresh`` during the run (orchestration.alto.live; needs ``counters``)."""

    model_config = _Forbid
    pids: Literal["site", "rack"] = "site"
    metric: Literal["hopcount", "routingcost", "delay-ow"] = "routingcost"
    serve: StrictBool = False
    node: str | None = None
    port: Annotated[StrictInt, Field(ge=1, le=65535)] = 8181
    live: StrictBool = False
    refresh: Annotated[Duration, AfterValidator(_refresh_ok)] = "500ms"


class ExperimentSpec(SpecModel):
    """One experiment (see the module docstring)."""

    model_config = _Forbid
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    description: str = ""
    seed: Seed = 0
    scale: Annotated[float, Field(ge=1)] = 1.0
    topology: TopologyRef
    workloads: Annotated[list[WorkloadEntry], Field(min_length=1)]
    transport: TransportSpec = Field(default_factory=TransportSpec)
    timeouts: TimeoutSpec = Field(default_factory=TimeoutSpec)
    backend: Literal["native", "mininet"] | None = None  # None: the topology's, else native
    capture: CaptureSpecModel = Field(default_factory=CaptureSpecModel)
    counters: CountersSpecModel = Field(default_factory=CountersSpecModel)
    alto: AltoSpecModel = Field(default_factory=AltoSpecModel)
    events: list[EventEntry] = Field(default_factory=list)  # orchestration/events/spec.py
    cluster: ClusterSpec | None = None  # the lab over these machines (orchestration/cluster/)
    # a CPU for the native delay line alone (testbed.lab.lab.Lab line_cpu); None: shared
    delay_line_cpu: Annotated[int, Field(ge=0)] | None = None
    # the accelerator and network energy profiles analysis uses (models/energy.py)
    energy: EnergySelection = Field(default_factory=EnergySelection)


def parse_experiment(data: Mapping[str, Any], source: str) -> ExperimentSpec:
    """Validate an experiment mapping. Raises :class:`SpecError` with one issue per problem,
    each with ``source``, the key path and (for ruamel documents) the line."""
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        issues = [_drop_tag(i) for i in issues_from_validation(exc, ExperimentSpec, source)]
        raise with_lines(SpecError(issues), data, source) from None
    issues = check_selection(spec.energy, source=source)
    if issues:
        raise with_lines(SpecError(issues), data, source)
    return spec


def _drop_tag(issue: SpecIssue) -> SpecIssue:
    """pydantic puts the union member's tag in the location (workloads.0.collective.size,
    events.1.flap.link); users wrote workloads[0].size."""
    path = issue.key_path
    if len(path) > 2 and ((path[0] == "workloads" and path[2] in _KINDS)
                          or (path[0] == "events" and path[2] in EVENT_KINDS)):
        path = (*path[:2], *path[3:])
    if len(path) > 3 and path[0] == "events" and path[2] == "at" and path[3] in _AT_TAGS:
        path = (*path[:3], *path[4:])  # the tag of at's two forms
    return SpecIssue(issue.message, file=issue.file, key_path=path, line=issue.line)


def load_experiment(path: str | Path) -> tuple[ExperimentSpec, Any]:
    """Read and validate the experiment file ``path``; returns the spec and the ruamel
    document (for line numbers in later errors). Raises :class:`SpecError` naming the file."""
    doc, dups = read_yaml(path, EXPERIMENT_TOP)
    if dups:
        raise SpecError(dups)
    return parse_experiment(doc, str(path)), doc


def spec_issue(source: str, doc: Any, key_path: tuple[str | int, ...], message: str) -> SpecError:
    """A :class:`SpecError` for one problem found after parsing, with its line in ``doc``."""
    return with_lines(SpecError(SpecIssue(message, file=source, key_path=key_path)), doc, source)
