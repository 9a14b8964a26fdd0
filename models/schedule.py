"""A workload's schedule: what every rank does, in program order (pure data, no I/O).

Produced by workloads/ (from model parameters or an imported AICB file) and replayed by
traffic_gen/ over real sockets. Like an SPMD program (and like AICB's workload tables), the
schedule is ONE ordered list of operations; every rank walks it in order and takes part in the
operations that name it. A collective or send/recv step waits for the data it depends on, so
ranks synchronise through data, not through a global barrier.

Sizes follow nccl-tests' convention (nccl-tests doc/PERFORMANCE.md): ``size_bytes`` of an
all_reduce, broadcast and reduce is the buffer each rank holds; of an all_gather, gather,
reduce_scatter and scatter the full (gathered) buffer; of an all_to_all the send buffer of one
rank (size_bytes / n to each peer).

Placement (rank -> host) is separate: the same schedule can be placed on many labs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

__all__ = [
    "CollectiveKind", "COLLECTIVES", "Protocol", "Group", "Collective", "SendRecv", "Compute",
    "Flow", "Burst", "Message", "Timed", "Op", "Schedule", "ScheduleError", "Placement",
    "Gather", "GATHER_LEVELS",
]

CollectiveKind = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
    "gather", "scatter", "barrier",
]
COLLECTIVES: tuple[str, ...] = get_args(CollectiveKind)  # the one list of collective ops
Protocol = Literal["tcp", "udp"]


class ScheduleError(ValueError):
    """A schedule is inconsistent (unknown group, rank out of range, negative size...)."""


@dataclass(frozen=True, slots=True)
class Group:
    """A communicator: ``name`` unique in the schedule (e.g. ``"tp3"``), ``kind`` the
    parallelism it serves (``dp``, ``tp``, ``pp``, ``ep``, or a file's own name), ``ranks`` in
    communicator order (rank i of the group is ``ranks[i]``)."""

    name: str
    kind: str
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Collective:
    """A collective on ``group``: ``algorithm`` None means the traffic generator's default for
    ``op``; ``chunk_bytes`` None means no chunking beyond the algorithm's own steps; ``root`` is
    a group-local index for rooted ops (broadcast, reduce, gather, scatter)."""

    op: CollectiveKind
    group: str
    size_bytes: int
    algorithm: str | None = None
    chunk_bytes: int | None = None
    root: int = 0
    label: str = ""


@dataclass(frozen=True, slots=True)
class SendRecv:
    """A point-to-point transfer from rank ``src`` to rank ``dst`` (e.g. a pipeline hand-off)."""

    src: int
    dst: int
    size_bytes: int
    group: str | None = None
    label: str = ""


@dataclass(frozen=True, slots=True)
class Compute:
    """Compute time (no traffic) on ``ranks`` (None: every rank), in seconds before any
    per-rank slowdown the run applies (stragglers)."""

    duration_s: float
    ranks: tuple[int, ...] | None = None
    label: str = ""


@dataclass(frozen=True, slots=True)
class Flow:
    """One transfer of a burst: ``src`` rank sends ``size_bytes`` to ``dst`` rank; UDP flows
    are paced at ``rate_bps`` and carry sequence numbers."""

    src: int
    dst: int
    size_bytes: int
    protocol: Protocol = "tcp"
    rate_bps: int | None = None


@dataclass(frozen=True, slots=True)
class Burst:
    """Flows that start together at one absolute instant (incast, permutation, all-pairs...).

    ``after_s``: idle time between the end of the previous phase (its last byte received or
    op finished) and this burst's instant, e.g. the gap between incast rounds; 0: as soon as
    the controller can hand the instant out (its measured start margin)."""

    flows: tuple[Flow, ...]
    label: str = ""
    after_s: float = 0.0


GATHER_LEVELS: tuple[str, ...] = ("global", "cluster", "gossip")


@dataclass(frozen=True, slots=True)
class Gather:
    """A deadline-bounded gather (one federated-learning round at one aggregator).

    Consecutive Gather ops form one phase that starts at one absolute instant T (the round
    start; with ``round_start_op`` = i, the start of the phase holding op i instead). For each
    source: ``root`` sends ``down_bytes`` (the model; 0: none), the source computes for
    ``compute_s[k]`` seconds (its local training; ``()``: none), then uploads ``size_bytes``.
    ``root`` accepts uploads until T + ``deadline_s`` (None: no deadline) or until ``quorum``
    sources finished (over-commitment; None: all); then every unfinished transfer is cut off
    and its source counted as dropped. ``level`` and ``round`` go into the round record.
    """

    root: int
    srcs: tuple[int, ...]
    size_bytes: int
    down_bytes: int = 0
    compute_s: tuple[float, ...] = ()
    deadline_s: float | None = None
    quorum: int | None = None
    level: str = "global"
    round: int = 0
    round_start_op: int | None = None
    label: str = ""


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a :class:`Timed` op: ``src`` rank sends ``size_bytes`` to ``dst`` rank
    (TCP). It leaves no earlier than ``at_s`` seconds after the op's start (None: as soon as
    it may), and only after the messages listed in ``after`` (indices into the op's messages,
    all lower than its own) are complete at ``src``: received there, or sent by ``src``;
    then it waits ``gap_s`` more seconds (e.g. a token interval). ``flow`` False: a small
    control or token message that gets no FlowRecord. ``tag`` names it in the records."""

    src: int
    dst: int
    size_bytes: int
    at_s: float | None = None
    after: tuple[int, ...] = ()
    gap_s: float = 0.0
    tag: str = ""
    flow: bool = True


@dataclass(frozen=True, slots=True)
class Timed:
    """Open-loop timed messages (inference requests and token streams, background flows):
    unlike a Burst, messages start at their own instants and may depend on each other, and
    many are in flight at once. ``kind`` ("inference", "background", ...) and ``info``
    (JSON-ready metadata, e.g. the requests) travel to the records; background flows get
    FlowRecords with ``background`` true."""

    messages: tuple[Message, ...]
    label: str = ""
    kind: str = ""
    info: Mapping[str, object] = field(default_factory=dict, compare=False, hash=False)


Op = Collective | SendRecv | Compute | Burst | Gather | Timed
Placement = Mapping[int, str]  # rank -> host node name


@dataclass(frozen=True, slots=True)
class Schedule:
    """``iterations`` repetitions of ``ops`` over ``world_size`` ranks with ``groups``.

    Raises :class:`ScheduleError` on construction when an op names an unknown group, a rank
    outside ``range(world_size)``, a negative size or duration, or an unknown collective.
    """

    name: str
    world_size: int
    groups: Mapping[str, Group]
    ops: tuple[Op, ...]
    iterations: int = 1
    source: str = "<generated>"
    meta: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ScheduleError(f"{self.name}: world_size must be at least 1")
        if self.iterations < 1:
            raise ScheduleError(f"{self.name}: iterations must be at least 1")
        for g in self.groups.values():
            self._check_ranks(g.ranks, f"group {g.name}")
            if len(set(g.ranks)) != len(g.ranks):
                raise ScheduleError(f"{self.name}: group {g.name} repeats a rank")
        for i, op in enumerate(self.ops):
            self._check_op(i, op)

    def _check_ranks(self, ranks: tuple[int, ...], what: str) -> None:
        bad = [r for r in ranks if not 0 <= r < self.world_size]
        if bad:
            raise ScheduleError(f"{self.name}: {what} names rank(s) {bad} outside "
                                f"0..{self.world_size - 1}")

    def _check_op(self, i: int, op: Op) -> None:
        where = f"op {i} ({type(op).__name__}{' ' + op.label if op.label else ''})"
        if isinstance(op, Collective):
            if op.op not in COLLECTIVES:
                raise ScheduleError(f"{self.name}: {where}: unknown collective {op.op!r}; "
                                    f"known: {', '.join(COLLECTIVES)}")
            if op.group not in self.groups:
                raise ScheduleError(f"{self.name}: {where}: unknown group {op.group!r}")
            if not 0 <= op.root < len(self.groups[op.group].ranks):
                raise ScheduleError(f"{self.name}: {where}: root {op.root} outside the group")
            _nonneg(self.name, where, op.size_bytes, "size_bytes")
            if op.chunk_bytes is not None and op.chunk_bytes <= 0:
                raise ScheduleError(f"{self.name}: {where}: chunk_bytes must be positive")
        elif isinstance(op, SendRecv):
            self._check_ranks((op.src, op.dst), where)
            _nonneg(self.name, where, op.size_bytes, "size_bytes")
        elif isinstance(op, Compute):
            _nonneg(self.name, where, op.duration_s, "duration_s")
            if op.ranks is not None:
                self._check_ranks(op.ranks, where)
        elif isinstance(op, Burst):
            _nonneg(self.name, where, op.after_s, "after_s")
            for f in op.flows:
                self._check_ranks((f.src, f.dst), where)
                _nonneg(self.name, where, f.size_bytes, "size_bytes")
        elif isinstance(op, Gather):
            self._check_gather(i, where, op)

        elif isinstance(op, Timed):
            for k, m in enumerate(op.messages):
                self._check_message(f"{where} message {k}", k, m, op.messages)
        else:
            raise ScheduleError(f"{self.name}: {where}: not a schedule operation")

    def _check_gather(self, i: int, where: str, op: Gather) -> None:
        self._check_ranks((op.root, *op.srcs), where)
        if op.root in op.srcs or len(set(op.srcs)) != len(op.srcs):
            raise ScheduleError(f"{self.name}: {where}: srcs repeat a rank or hold the root")
        for key in ("size_bytes", "down_bytes"):
            _nonneg(self.name, where, getattr(op, key), key)
        if op.compute_s and len(op.compute_s) != len(op.srcs):
            raise ScheduleError(f"{self.name}: {where}: compute_s needs one value per source")
        for c in op.compute_s:
            _nonneg(self.name, where, c, "compute_s")
        if op.deadline_s is not None:
            _nonneg(self.name, where, op.deadline_s, "deadline_s")
        if op.quorum is not None and not 1 <= op.quorum <= len(op.srcs):
            raise ScheduleError(f"{self.name}: {where}: quorum {op.quorum} outside "
                                f"1..{len(op.srcs)}")
        if op.level not in GATHER_LEVELS:
            raise ScheduleError(f"{self.name}: {where}: unknown level {op.level!r}; known: "
                                f"{', '.join(GATHER_LEVELS)}")
        if op.round_start_op is not None and not 0 <= op.round_start_op <= i:
            raise ScheduleError(f"{self.name}: {where}: round_start_op {op.round_start_op} "
                                f"is not an earlier op")


    def _check_message(self, where: str, k: int, m: Message, msgs: tuple[Message, ...]) -> None:
        self._check_ranks((m.src, m.dst), where)
        _nonneg(self.name, where, m.size_bytes, "size_bytes")
        _nonneg(self.name, where, m.gap_s, "gap_s")
        if m.at_s is not None:
            _nonneg(self.name, where, m.at_s, "at_s")
        if m.src == m.dst:
            raise ScheduleError(f"{self.name}: {where}: rank {m.src} sends to itself")
        for d in m.after:
            if not 0 <= d < k:
                raise ScheduleError(f"{self.name}: {where}: after {d} is not an earlier message")
            if m.src not in (msgs[d].src, msgs[d].dst):
                raise ScheduleError(f"{self.name}: {where}: after {d}: rank {m.src} neither "
                                    "sends nor receives that message, so cannot wait for it")

    def ranks_of(self, op: Op) -> tuple[int, ...]:
        """The ranks that take part in ``op``, in ascending order."""
        if isinstance(op, Collective):
            return tuple(sorted(self.groups[op.group].ranks))
        if isinstance(op, SendRecv):
            return tuple(sorted({op.src, op.dst}))
        if isinstance(op, Compute):
            return tuple(range(self.world_size)) if op.ranks is None else tuple(sorted(op.ranks))
        if isinstance(op, Gather):
            return tuple(sorted((op.root, *op.srcs)))
        if isinstance(op, Timed):
            return tuple(sorted({r for m in op.messages for r in (m.src, m.dst)}))
        return tuple(sorted({r for f in op.flows for r in (f.src, f.dst)}))


def _nonneg(name: str, where: str, value: float, key: str) -> None:
    if value < 0:
        raise ScheduleError(f"{name}: {where}: {key} {value} is negative")
