"""Compile a Schedule and a placement into per-rank programs (pure; checked before traffic).

A program is cut into phases: within one iteration, consecutive ops that are not bursts form a
"free" phase (ranks synchronise through data only), and every Burst is its own phase, started
by the controller at one absolute instant. Every phase starts at an absolute time T0.

Wire form (JSON-ready, sent to agents): for each rank, for each phase, a list of op dicts:
``{"t": "compute", "op", "it", "label", "duration_s", "slowdown"}`` or
``{"t": "xfer", "op", "it", "kind": collective|send_recv|burst, "id", "label", "steps"}``
where each step is a :class:`traffic_gen.wire.Step` (peer a global rank; a JSON list on the
wire);
or ``{"t": "gather", "role": root|src, "op", "it", "id", "label", ...}`` (gather_ops.py).
Consecutive Gather ops of one round and level form one phase of their own, started at one
absolute instant (cluster gathers run together; the global gather after them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from models.errors import SpecError, SpecIssue
from models.schedule import Burst, Collective, Compute, Gather, Schedule, SendRecv, Timed
from models.specfile import MAX_TRANSFERS
from models.stragglers import SlowdownDraw, StragglerSpec
from traffic_gen.algorithms import AlgorithmError, PlanRequest, build_plan, resolve
from traffic_gen.algorithms.rooted import send_recv
from traffic_gen.algorithms.steps import PlanBuilder
from traffic_gen.gather_ops import gather_ops, renumber_phases
from traffic_gen.timed_plan import compile_timed
from traffic_gen.wire import Step

__all__ = ["Program", "Phase", "compile_program", "transfers_of"]


@dataclass(frozen=True, slots=True)
class Phase:
    """Phase ``index`` of iteration ``iteration``; ``burst_id`` set for a burst phase;
    ``after_s``: idle time after the previous phase's end before this one starts (a burst's
    ``after_s``); ``timed``: its ops start at instants counted from the phase start (a burst,
    a gather round, timed messages), so every agent must hold the start before it comes (the
    controller's start margin); a phase that is not timed synchronises through data only and
    starts as each agent receives it. ``round``: the FL round of a gather phase (None
    otherwise; the round is what an experiment's ``events:`` anchor to as its iteration)."""

    index: int
    iteration: int
    burst_id: str | None = None
    after_s: float = 0.0
    timed: bool = False
    round: int | None = None

    @property
    def anchor_iteration(self) -> int:
        """The iteration this phase starts for ``events:`` anchors: its FL round, else its
        iteration."""
        return self.iteration if self.round is None else self.round


@dataclass
class Program:
    """Everything the controller hands out: ``ranks[r]`` = per phase, r's op dicts;
    ``collectives``/``bursts``/``timed``: id -> metadata for records; ``channels``: (src, dst,
    proto)."""

    phases: list[Phase] = field(default_factory=list)
    ranks: dict[int, list[list[dict[str, Any]]]] = field(default_factory=dict)
    collectives: dict[str, dict[str, Any]] = field(default_factory=dict)
    bursts: dict[str, dict[str, Any]] = field(default_factory=dict)
    channels: set[tuple[int, int, str]] = field(default_factory=set)
    timed: dict[str, dict[str, Any]] = field(default_factory=dict)


def _fail(schedule: Schedule, message: str, key: list[str | int] | None = None) -> SpecError:
    return SpecError(SpecIssue(message, file=schedule.source, key_path=key or []))


def _check_placement(schedule: Schedule, placement: Mapping[int, str]) -> list[int]:
    used = sorted({r for op in schedule.ops for r in schedule.ranks_of(op)})
    missing = [r for r in used if r not in placement]
    if missing:
        raise _fail(schedule, f"rank(s) {missing} take part in the schedule but are not placed "
                              f"on any host", ["placement"])
    return used


def _xfer(op_index: int, it: int, kind: str, ident: str, label: str, members: list[int],
          plan, proto: str = "tcp", rate: int | None = None) -> dict[int, dict[str, Any]]:
    out = {}
    for i, steps in enumerate(plan):
        if not steps:
            continue
        out[members[i]] = {"t": "xfer", "op": op_index, "it": it, "kind": kind, "id": ident,
                           "label": label, "steps": [
                               Step(s.kind, members[s.peer], s.size_bytes, list(s.deps), s.tag,
                                    proto, rate) for s in steps]}
    return out


class _Compiler:
    def __init__(self, schedule: Schedule, placement: Mapping[int, str],
                 sites: Mapping[str, str], stragglers: StragglerSpec) -> None:
        self.s, self.placement, self.sites = schedule, placement, sites
        self.draw = SlowdownDraw(stragglers)
        self.prog = Program()
        self.used = _check_placement(schedule, placement)
        self.op_phase: dict[tuple[int, int], int] = {}  # (iteration, op) -> phase index

    def run(self) -> Program:
        for it in range(self.s.iterations):
            self._new_phase(it, None)
            gathering: tuple[int, str] | None = None  # (round, level) of the gather phase
            for i, op in enumerate(self.s.ops):
                now = (op.round, op.level) if isinstance(op, Gather) else None
                if now != gathering:  # a gather phase opens or closes
                    self._new_phase(it, None, None if now is None else now[0])
                    gathering = now
                if isinstance(op, Burst):
                    self._burst(i, it, op)
                    self.op_phase[(it, i)] = len(self.prog.phases) - 1
                    self._new_phase(it, None)
                    continue
                self.op_phase[(it, i)] = len(self.prog.phases) - 1
                if isinstance(op, Gather):
                    self._add(gather_ops(self.s, i, it, op, self.placement, self.draw,
                                         self.op_phase))
                else:
                    self._add(self._op(i, it, op))
        self._drop_empty_phases()
        return self.prog

    def _new_phase(self, it: int, burst_id: str | None, rnd: int | None = None) -> None:
        self.prog.phases.append(Phase(len(self.prog.phases), it, burst_id, round=rnd))
        for r in self.used:
            self.prog.ranks.setdefault(r, []).append([])

    def _add(self, ops: Mapping[int, dict[str, Any]]) -> None:
        for r, d in ops.items():
            self.prog.ranks[r][-1].append(d)
            if d["t"] == "xfer":
                self.prog.channels.update(
                    (r, st.peer, st.proto) for st in d["steps"] if st.kind == "send")

    def _op(self, i: int, it: int, op) -> dict[int, dict[str, Any]]:
        if isinstance(op, Compute):
            return {r: self._compute(i, it, op, r) for r in self.s.ranks_of(op)}
        if isinstance(op, SendRecv):
            if op.src == op.dst:
                raise _fail(self.s, f"send_recv from rank {op.src} to itself", ["ops", i])
            return _xfer(i, it, "send_recv", f"p{it}.{i}", op.label, [op.src, op.dst],
                         send_recv(op.size_bytes))
        if isinstance(op, Timed):
            tid = f"t{it}.{i}"
            self.prog.timed[tid] = {"kind": op.kind, "label": op.label, "info": dict(op.info)}
            return compile_timed(i, it, tid, op)
        return self._collective(i, it, op)

    def _compute(self, i: int, it: int, op: Compute, r: int) -> dict[str, Any]:
        f = self.draw.factor(r)
        return {"t": "compute", "op": i, "it": it, "label": op.label,
                "duration_s": op.duration_s * f, "slowdown": f}

    def _collective(self, i: int, it: int, op: Collective) -> dict[int, dict[str, Any]]:
        group = self.s.groups[op.group]
        members = list(group.ranks)
        sites = tuple(self.sites.get(self.placement[r], self.placement[r]) for r in members)
        try:
            name = resolve(op.op, op.algorithm)
            plan = build_plan(op.op, name, PlanRequest(len(members), op.size_bytes,
                                                       op.chunk_bytes, op.root, sites))
        except AlgorithmError as exc:
            raise _fail(self.s, str(exc), ["ops", i, "algorithm"]) from exc
        cid = f"c{it}.{i}"
        self.prog.collectives[cid] = {
            "op": op.op, "algorithm": name, "group": group.name, "group_kind": group.kind,
            "ranks": members, "hosts": [self.placement[r] for r in members],
            "size_bytes": op.size_bytes, "iteration": it, "op_index": i,
            "chunk_bytes": op.chunk_bytes, "label": op.label}
        return _xfer(i, it, "collective", cid, op.label, members, plan)

    def _burst(self, i: int, it: int, op: Burst) -> None:
        bid = f"b{it}.{i}"
        self._new_phase(it, bid)
        self.prog.phases[-1] = Phase(len(self.prog.phases) - 1, it, bid, after_s=op.after_s)
        self.prog.bursts[bid] = {"label": op.label, "iteration": it, "op_index": i}
        members = sorted({r for f in op.flows for r in (f.src, f.dst)})
        idx = {r: k for k, r in enumerate(members)}
        b = PlanBuilder(len(members))
        protos = {}
        for f in op.flows:
            if f.src == f.dst:
                raise _fail(self.s, f"burst flow from rank {f.src} to itself", ["ops", i])
            if f.protocol == "udp" and not f.rate_bps:
                raise _fail(self.s, "a UDP flow needs rate_bps (pacing)", ["ops", i])
            protos[(idx[f.src], len(b.steps[idx[f.src]]))] = (f.protocol, f.rate_bps)
            b.send(idx[f.src], idx[f.dst], f.size_bytes, (), "flow")
            protos[(idx[f.dst], len(b.steps[idx[f.dst]]))] = (f.protocol, f.rate_bps)
            b.recv(idx[f.dst], idx[f.src], f.size_bytes, (), "flow")
        ops = _xfer(i, it, "burst", bid, op.label, members, b.plan())
        for r, d in ops.items():
            for k, st in enumerate(d["steps"]):
                proto, rate = protos[(idx[r], k)]
                d["steps"][k] = st._replace(proto=proto, rate_bps=rate)
        self._add(ops)

    def _timed(self, k: int) -> bool:
        """Whether phase ``k`` holds a burst, a gather round or timed messages."""
        ops = [d for r in self.prog.ranks for d in self.prog.ranks[r][k]]
        return self.prog.phases[k].burst_id is not None or any(
            d["t"] == "gather" or d.get("kind") == "timed" for d in ops)

    def _drop_empty_phases(self) -> None:
        keep = [k for k, ph in enumerate(self.prog.phases)
                if any(self.prog.ranks[r][k] for r in self.prog.ranks)]
        self.prog.phases = [replace(self.prog.phases[k], index=n, timed=self._timed(k))
                            for n, k in enumerate(keep)]
        for r in self.prog.ranks:
            self.prog.ranks[r] = [self.prog.ranks[r][k] for k in keep]
        renumber_phases(self.prog.ranks, keep)


# sends per rank of one collective over g ranks, before chunking (upper bounds: the ring
# all-reduce's 2(g-1) is exact, trees' and halving-doubling's logarithmic counts rounded up)
_SENDS_PER_RANK = {
    ("all_reduce", "ring"): lambda g: 2 * (g - 1),
    ("all_reduce", "double_binary_tree"): lambda g: 6,
    ("all_reduce", "halving_doubling"): lambda g: 2 * (math.ceil(math.log2(g)) + 2),
    ("broadcast", "ring"): lambda g: 1, ("reduce", "ring"): lambda g: 1,
    ("broadcast", "binomial_tree"): lambda g: 1, ("reduce", "binomial_tree"): lambda g: 1,
    ("gather", "linear"): lambda g: 1, ("scatter", "linear"): lambda g: 1,
}


def _collective_sends(op: Collective, g: int) -> int:
    if g < 2:
        return 0
    try:
        name = resolve(op.op, op.algorithm)
    except AlgorithmError:
        return 0  # refused by the compiler, naming the op
    # the others (rings, all-to-all, hierarchical, torus): at most the ring all-reduce's
    per = _SENDS_PER_RANK.get((op.op, name), lambda g: 2 * (g - 1))
    sends = g * per(g)
    if op.chunk_bytes:  # pieces of at most chunk_bytes: no rank sends more than about 2 x size
        sends += math.ceil(2 * g * op.size_bytes / op.chunk_bytes)
    return sends


def transfers_of(schedule: Schedule) -> int:
    """About how many transfers (a send and its receive) :func:`compile_program` makes of
    ``schedule``, from the ops' sizes alone (nothing is compiled): every iteration of every
    collective (per-algorithm counts, an upper bound; pieces of ``chunk_bytes``), flow of a
    burst, send_recv, gather source (download and upload) and timed message. Pure."""
    per_iteration = 0
    for op in schedule.ops:
        if isinstance(op, Collective):
            group = schedule.groups.get(op.group)
            per_iteration += _collective_sends(op, len(group.ranks) if group else 0)
        elif isinstance(op, Burst):
            per_iteration += len(op.flows)
        elif isinstance(op, SendRecv):
            per_iteration += 1
        elif isinstance(op, Gather):
            per_iteration += 2 * len(op.srcs)
        elif isinstance(op, Timed):
            per_iteration += len(op.messages)
    return per_iteration * schedule.iterations


def compile_program(schedule: Schedule, placement: Mapping[int, str],
                    sites: Mapping[str, str] | None = None,
                    stragglers: StragglerSpec | None = None) -> Program:
    """Per-rank programs of ``schedule`` placed by ``placement`` (rank -> host). ``sites``
    maps host -> sub-group label for hierarchical algorithms (default: the host itself).

    Raises SpecError (naming the schedule source and op index) for an unplaced rank, an
    unknown algorithm (listing the known ones), a self-transfer or a UDP flow without a rate,
    and, before anything is compiled, for more than :data:`~models.specfile.MAX_TRANSFERS`
    transfers (:func:`transfers_of`). Pure: nothing is started.
    """
    total = transfers_of(schedule)
    if total > MAX_TRANSFERS:
        it = schedule.iterations
        raise _fail(schedule, f"compiles to about {total} transfers"
                              f"{f' ({it} iterations)' if it > 1 else ''}; at most "
                              f"{MAX_TRANSFERS} (MAX_TRANSFERS): fewer iterations, ranks or "
                              "repeats, or a larger chunk", [])
    return _Compiler(schedule, placement, sites or {}, stragglers or StragglerSpec()).run()
