"""Run records (pure data, no I/O): flows, collectives, bursts, per-rank op timelines, failures.

Every record carries ``schema_version`` (:data:`SCHEMA_VERSION`) and round-trips through
``to_dict``/``from_dict`` (JSON-ready dicts; traffic_gen writes them as JSONL, analysis reads
them). Times are absolute seconds on the host clock (``time.time()``; all namespaces share it),
sizes are bytes, rates bytes or bits per second as their names say.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypeVar

__all__ = ["SCHEMA_VERSION", "TcpInfo", "UdpStats", "FlowRecord", "CollectiveRecord",
           "BurstRecord", "RankOpRecord", "FailureRecord", "busbw_factor", "percentile",
           "RecordError", "skew_summary", "RoundRecord", "SUMMARY", "SUMMARY_KEYS"]

SCHEMA_VERSION = 1
# The flat ``summary`` of a run's metrics.json, in order: key -> where its value is in
# metrics.json, what analysis.metrics.summary_of writes (null when the run has no such data)
# and what a campaign's plots may show. A new summary metric is one line here. The
# where-language (analysis.metrics.summary_of): a dotted path ("fct.fct_s.p50"); "PATH#" a
# count, null rather than 0; "PATH?WHEN" the value only where the count at WHEN is not 0;
# "A|B" the first of A, B that is not null.
SUMMARY: Mapping[str, str] = MappingProxyType({
    "flows": "fct.flows#",
    "fct_s_p50": "fct.fct_s.p50",
    "fct_s_p95": "fct.fct_s.p95",
    "fct_s_p99": "fct.fct_s.p99",
    "fct_s_max": "fct.fct_s.max",
    "slowdown_p50": "fct.slowdown.p50",
    "slowdown_p99": "fct.slowdown.p99",
    "collectives": "cct.collectives#",
    "cct_s_mean": "cct.cct_s.mean",
    "cct_s_p50": "cct.cct_s.p50",
    "cct_s_p99": "cct.cct_s.p99",
    "algbw_Bps_mean": "cct.algbw_Bps.mean",
    "busbw_Bps_mean": "cct.busbw_Bps.mean",
    "iteration_time_s_mean": "cct.main_iteration_time_s_mean",
    "retransmissions": "retransmissions.records.total_retrans"
                       "|retransmissions.captures.retransmissions",
    "queue_drops": "utilization.queue_drops",
    "incast_loss_ratio": "incast.loss_ratio",
    "incast_finish_s_mean": "incast.finish_s_mean",
    "incast_finish_s_max": "incast.worst_burst.finish_s",
    "goodput_bps": "incast.goodput_bps_mean?incast.bursts|fct.goodput_bps_mean",
    "jain_fairness": "fairness.jain_mean",
    "straggler_spread_s_mean": "stragglers.spread_s.mean",
    "straggler_inflation_mean": "stragglers.inflation.mean",
    "rounds": "stragglers.rounds.rounds#",
    "clients_dropped": "stragglers.rounds.clients_dropped?stragglers.rounds.rounds",
    "ttft_s_p50": "requests.ttft_s.p50",
    "ttft_s_p99": "requests.ttft_s.p99",
    "dci_collective_time_s": "dci.collective_time_s",
    "events": "events.events#",
    "events_not_recovered": "events.not_recovered?events.events",
    "event_recovery_s_max": "events.recovery_s_max",
    "event_iteration_inflation_max": "events.iteration_inflation_max",
    "mfu_mean": "energy.mfu_mean",
    "network_wait_s_mean": "energy.network_wait_s_mean",
    "energy_j_mean": "energy.energy_j_mean",
})
SUMMARY_KEYS: tuple[str, ...] = tuple(SUMMARY)
T = TypeVar("T", bound="_Record")


class RecordError(ValueError):
    """A dict is not a record of the expected kind or schema version."""


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_PLAIN = frozenset({int, float, str, bool, type(None)})  # to_dict keeps these as they are


def _field_names(cls: type) -> tuple[str, ...]:
    """The dataclass field names of ``cls`` in order, looked up once per class
    (``dataclasses.fields`` per record was most of the time of writing a run's records:
    tens of thousands of flows at 128 ranks)."""
    got = _FIELD_NAMES.get(cls)
    if got is None:
        got = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return got


_FIELD_SETS: dict[type, frozenset[str]] = {}


def _field_set(cls: type) -> frozenset[str]:
    """:func:`_field_names` as a set (membership tests of from_dict)."""
    got = _FIELD_SETS.get(cls)
    if got is None:
        got = _FIELD_SETS[cls] = frozenset(_field_names(cls))
    return got


class _Record:
    """to_dict/from_dict for flat dataclasses whose nested records are listed in ``_nested``."""

    _nested: ClassVar[Mapping[str, type]] = {}
    kind_name: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``record`` names the kind."""
        out: dict[str, Any] = {"record": self.kind_name} if self.kind_name else {}
        for name in _field_names(type(self)):
            v = getattr(self, name)
            if type(v) not in _PLAIN:
                v = v.to_dict() if isinstance(v, _Record) else (
                    list(v) if isinstance(v, tuple) else v)
            out[name] = v
        return out

    @classmethod
    def from_dict(cls: type[T], d: Mapping[str, Any]) -> T:
        """Inverse of :meth:`to_dict`; raises RecordError on another kind or schema version."""
        if cls.kind_name and d.get("record", cls.kind_name) != cls.kind_name:
            raise RecordError(f"expected a {cls.kind_name} record, got {d.get('record')!r}")
        if d.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise RecordError(f"{cls.__name__}: schema_version {d.get('schema_version')} is not "
                              f"{SCHEMA_VERSION}")
        names = _field_set(cls)
        kw = {}
        for k, v in d.items():
            if k not in names:
                continue
            if k in cls._nested and v is not None:
                v = cls._nested[k].from_dict(v)
            elif isinstance(v, list):
                v = tuple(v)
            kw[k] = v
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class TcpInfo(_Record):
    """TCP_INFO of the sending socket for one transfer (linux/tcp.h ``struct tcp_info``), read
    at the transfer's ack instant: the first reading (polled every 0.5-10 ms) whose
    ``tcpi_bytes_acked`` covers the transfer's last byte. On a persistent connection later
    transfers may already be in flight then (back-to-back sends pipeline).
    ``total_retrans``, ``bytes_retrans``, ``dsack_dups``: counter differences between the
    previous transfer's ack instant (the connection's start for its first) and this one's,
    i.e. retransmissions after the previous transfer was fully acknowledged, which are of this
    transfer's bytes, except that a later transfer's bytes retransmitted before this one is
    acknowledged count here (and this one's retransmitted before the previous one's ack count
    there).
    ``bytes_sent``: the transfer's size (each new byte leaves once) plus ``bytes_retrans``; over
    a connection's transfers they sum to its kernel ``tcpi_bytes_sent``. ``lost``, ``rtt_s``,
    ``rttvar_s``, ``snd_cwnd`` (segments): the values at the ack instant.
    ``min_rtt_s``: the connection's minimum RTT sample (``tcpi_min_rtt``: a windowed minimum
    over ``net.ipv4.tcp_min_rtt_wlen``, 300 s by default, handshake included), i.e. the
    unloaded path RTT with both end hosts' stack time; None in records written before it
    was recorded, or where the kernel reports none (0).
    ``delivery_rate_bps`` (bit/s): the kernel's most recent delivery-rate sample at the ack
    instant (tcp_rate.c: one ACK's delivered data over the longer of its send and ACK
    intervals; an application-limited sample replaces it only if higher), not an average over
    the transfer, and not differenced. A sample can exceed the bottleneck rate when packets
    leave or ACKs return in bursts (e.g. quickstart, 100 Mbit/s links: up to ~140 Mbit/s).
    ``dsack_dups``: retransmitted segments the receiver reported as duplicates (D-SACK,
    RFC 2883), i.e. spurious retransmissions such as tail-loss probes (RFC 8985) fired while
    the data sat in a deep queue; ``total_retrans - dsack_dups`` estimates real losses.
    ``reord_seen``: reordering events the sender detected (``tcpi_reord_seen``, Linux >= 5.6:
    an out-of-order SACK or D-SACK, e.g. from packet spraying over unequal paths), the same
    difference as the retransmission counters; 0 in records written before it was recorded.
    ``delivered_ce``: packets of the connection the receiver reported as CE-marked
    (``tcpi_delivered_ce``: with classic ECN, RFC 3168, the packets acknowledged by ACKs
    carrying ECE; tcp_input.c ``tcp_count_delivered_ce``), the same difference; the
    congestion marks of a bottleneck that marks (ECN) instead of dropping. ``ecn``: whether
    the connection negotiated ECN (``tcpi_options`` TCPI_OPT_ECN); None in records written
    before these two were recorded."""

    total_retrans: int
    bytes_retrans: int
    bytes_sent: int
    lost: int
    rtt_s: float
    rttvar_s: float
    snd_cwnd: int
    delivery_rate_bps: int
    congestion_control: str = ""
    dsack_dups: int = 0
    min_rtt_s: float | None = None
    reord_seen: int = 0
    delivered_ce: int = 0
    ecn: bool | None = None


@dataclass(frozen=True, slots=True)
class UdpStats(_Record):
    """Sequence-number accounting of one UDP transfer: ``reordered`` counts packets that
    arrived after a higher sequence number."""

    packets_sent: int
    packets_received: int
    lost: int
    reordered: int
    payload_bytes: int


@dataclass(frozen=True, slots=True)
class FlowRecord(_Record):
    """One transfer between two ranks. ``t_start``: the sender began (host clock, s);
    ``t_first_byte``/``t_end``: first and last byte at the receiver; ``fct_s`` = t_end -
    t_start. ``collective_id`` or ``burst_id`` ties it to its operation; ``background``: a
    flow of background traffic (not of the AI workload under study). ``send_cpu_s`` and
    ``recv_cpu_s``: CPU seconds of the sending and receiving threads during the transfer
    (time.thread_time; with TLS, encryption and decryption included); ``tls_cipher`` and
    ``tls_handshake_s``: the connection's TLS 1.3 cipher suite and handshake time, None
    without TLS (traffic_gen/tls.py)."""

    kind_name: ClassVar[str] = "flow"
    _nested: ClassVar[Mapping[str, type]] = {"tcp": TcpInfo, "udp": UdpStats}

    run_id: str
    kind: Literal["tcp", "udp"]
    src_node: str
    dst_node: str
    src_rank: int
    dst_rank: int
    src_ip: str
    dst_ip: str
    sport: int
    dport: int
    size_bytes: int
    t_start: float
    t_first_byte: float | None
    t_end: float | None
    fct_s: float | None
    iteration: int = 0
    op_index: int = 0
    step: str = ""
    collective_id: str | None = None
    burst_id: str | None = None
    tcp: TcpInfo | None = None
    udp: UdpStats | None = None
    background: bool = False
    send_cpu_s: float | None = None
    recv_cpu_s: float | None = None
    tls_cipher: str | None = None
    tls_handshake_s: float | None = None
    schema_version: int = SCHEMA_VERSION


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor (nccl-tests doc/PERFORMANCE.md): all_reduce 2(n-1)/n;
    all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce 1; gather and scatter are
    given (n-1)/n like all_gather (the root moves (n-1)/n of the buffer); barrier 0."""
    if n <= 1 or op == "barrier":
        return 0.0 if op == "barrier" else 1.0
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True, slots=True)
class CollectiveRecord(_Record):
    """One collective instance. ``rank_t_start``/``rank_t_end`` are aligned with ``ranks``
    (global ranks, group order); ``cct_s`` = max end - min start; ``algbw_Bps`` = size_bytes /
    cct_s; ``busbw_Bps`` = algbw x :func:`busbw_factor` (nccl-tests doc/PERFORMANCE.md)."""

    kind_name: ClassVar[str] = "collective"

    run_id: str
    collective_id: str
    op: str
    algorithm: str
    group: str
    group_kind: str
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    size_bytes: int
    iteration: int
    op_index: int
    rank_t_start: tuple[float, ...]
    rank_t_end: tuple[float, ...]
    cct_s: float
    algbw_Bps: float  # noqa: N815 - unit in the name (bytes per second)
    busbw_Bps: float  # noqa: N815
    busbw_factor: float
    chunk_bytes: int | None = None
    label: str = ""
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def build(cls, *, rank_t_start: Sequence[float], rank_t_end: Sequence[float], op: str,
              size_bytes: int, ranks: Sequence[int], **kw: Any) -> CollectiveRecord:
        """Compute cct_s, algbw, busbw from per-rank times (seconds) and size (bytes)."""
        cct = max(rank_t_end) - min(rank_t_start)
        algbw = size_bytes / cct if cct > 0 else 0.0
        factor = busbw_factor(op, len(ranks))
        return cls(rank_t_start=tuple(rank_t_start), rank_t_end=tuple(rank_t_end), op=op,
                   size_bytes=size_bytes, ranks=tuple(ranks), cct_s=cct, algbw_Bps=algbw,
                   busbw_Bps=algbw * factor, busbw_factor=factor, **kw)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between closest ranks
    (numpy's default "linear" method); NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class BurstRecord(_Record):
    """A synchronized burst: ``planned_start`` (host clock, s) and, per sending flow (aligned
    lists), its rank and actual start; ``skew_s`` = actual - planned (s)."""

    kind_name: ClassVar[str] = "burst"

    run_id: str
    burst_id: str
    label: str
    iteration: int
    op_index: int
    planned_start: float
    sender_ranks: tuple[int, ...]
    actual_start: tuple[float, ...]
    skew_s: tuple[float, ...]
    skew_p50_s: float
    skew_p99_s: float
    skew_max_s: float
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def build(cls, *, planned_start: float, sender_ranks: Sequence[int],
              actual_start: Sequence[float], **kw: Any) -> BurstRecord:
        """Compute the skews and their p50/p99/max from the actual starts."""
        skew = [a - planned_start for a in actual_start]
        return cls(planned_start=planned_start, sender_ranks=tuple(sender_ranks),
                   actual_start=tuple(actual_start), skew_s=tuple(skew),
                   skew_p50_s=percentile(skew, 50), skew_p99_s=percentile(skew, 99),
                   skew_max_s=max(skew, default=math.nan), **kw)


@dataclass(frozen=True, slots=True)
class RankOpRecord(_Record):
    """What one rank did for one op (a per-rank timeline row): ``kind`` compute, collective,
    send_recv or burst; ``slowdown`` the straggler factor applied to compute."""

    kind_name: ClassVar[str] = "rank_op"

    run_id: str
    rank: int
    node: str
    iteration: int
    op_index: int
    kind: str
    label: str
    t_start: float
    t_end: float
    slowdown: float = 1.0
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True, slots=True)
class FailureRecord(_Record):
    """Why a run failed: the node, rank, peer and op involved where known, and what happened."""

    kind_name: ClassVar[str] = "failure"

    run_id: str
    node: str
    detail: str
    rank: int | None = None
    peer: int | None = None
    op: str | None = None
    t: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True, slots=True)
class RoundRecord(_Record):
    """One federated-learning round at one aggregator (models/records.py).

    ``t_start``: the round's start instant (host clock, s); ``t_end``: when the aggregator
    stopped waiting (all selected finished, the quorum reached, or the deadline);
    ``round_time_s`` = t_end - t_start. ``clients_selected``/``clients_finished``: counts;
    ``clients_dropped``: host names of the selected clients whose model download or update
    upload was cut off (``drop_reasons`` host -> "deadline" | "quorum"). ``bytes_down``:
    model bytes the aggregator's sends had delivered (acknowledged) to clients; ``bytes_up``:
    update bytes it received (partial transfers included). ``level``: "global", "cluster"
    (hierarchical FL) or "gossip" (decentralised: ``aggregator`` is then the node merging its
    peers' models)."""

    kind_name: ClassVar[str] = "round"

    run_id: str
    round: int
    t_start: float
    t_end: float
    round_time_s: float
    clients_selected: int
    clients_finished: int
    clients_dropped: tuple[str, ...]
    deadline_s: float | None
    bytes_down: int
    bytes_up: int
    aggregator: str
    level: Literal["global", "cluster", "gossip"]
    iteration: int = 0
    op_index: int = 0
    quorum: int | None = None
    selected_hosts: tuple[str, ...] = ()
    finished_hosts: tuple[str, ...] = ()
    drop_reasons: Mapping[str, str] = field(default_factory=dict)
    label: str = ""
    schema_version: int = SCHEMA_VERSION


def skew_summary(bursts: Sequence[BurstRecord]) -> dict[str, float]:
    """Start skew over every sender of every burst (seconds): p50, p99, max, and count."""
    skew = [s for b in bursts for s in b.skew_s]
    return {"count": float(len(skew)), "p50_s": percentile(skew, 50),
            "p99_s": percentile(skew, 99), "max_s": max(skew, default=math.nan)}
