"""Merge the per-stage sections of a pipeline-parallel AICB file into one Schedule order (pure).

AICB writes a pipeline-parallel job as one section per stage, each the program of that
stage's ranks (see workloads/aicb/csv_reader.py). aitb's Schedule is one ordered list that
every rank walks in order (models/schedule.py), so the sections are merged into one order that
keeps every stage's own order:

- a TP/DP/EP row of stage S runs on the groups of that kind inside stage S only;
- a pp-group (or world) collective is one collective over every pipeline: the k-th such row
  of every stage is the same call;
- an ``isend send_next`` of stage S and the matching ``irecv recv_prev`` of stage S+1 are one
  hand-off (the k-th of that channel on both sides, first in, first out, as NCCL orders p2p
  on a communicator); ``send_prev``/``recv_next`` likewise from S to S-1. Each becomes one
  :class:`SendRecv` per pipeline, from the sender's rank to the receiver's in that pipeline;
- consecutive isend/irecv rows of a stage form one batch (Megatron's p2p_communication posts
  them with ``batch_isend_irecv``), so within a batch the hand-offs may happen in any order.

A shared row is placed once every stage that writes it has reached it (embedding-group rows,
which AICB writes in the last stage only, are placed where that stage has them). When no
stage can go on, the file's sections do not fit together: :class:`SpecError` names the stage
and line each is waiting at.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from models.errors import SpecError, SpecIssue
from models.schedule import Collective, Compute, Group, Op, SendRecv
from workloads.aicb.rows import AicbFile, AicbRow, AicbStage
from workloads.layout import Layout

__all__ = ["merge_stages", "STAGE_LOCAL_KINDS"]

STAGE_LOCAL_KINDS = ("tp", "dp", "ep", "ep_tp", "ep_dp")
_CHANNEL = {("send", "next"): 1, ("recv", "prev"): -1, ("send", "prev"): -1,
            ("recv", "next"): 1}


@dataclass(slots=True)
class _Event:
    ops: list[Op]
    key: tuple | None  # None: this stage's own; else shared with every stage holding the key
    p2p: bool
    line: int
    what: str
    done: bool = False


def merge_stages(f: AicbFile, full: Layout, layout: Layout,
                 rows_of: dict[int, list[AicbRow]], groups: dict[str, Group],
                 size_of) -> list[Op]:
    """One op order for the stages of ``f`` (``rows_of[S]``: the selected rows of stage S).

    ``full``: the file's layout (its stage rank lists are checked against it); ``layout``:
    the one replayed (fewer DP replicas with ``dp_replicas``), whose groups are ``groups``.
    ``groups``: every group of the kinds the rows use (names as :meth:`Layout.groups`);
    ``size_of(row)``: the row's size in bytes after scaling. Raises :class:`SpecError` naming
    file and line when a stage's ranks are not the layout's, a hand-off has no partner or
    partners disagree on the size, or the sections cannot be merged without a deadlock.
    """
    for st in f.stages:
        if st.ranks != full.stage_ranks(st.index):
            raise _err(f, f"pp_stage{st.index} lists ranks {_span(st.ranks)}, but the layout "
                          f"(tp={full.tp}, dp={full.dp}, pp={full.pp}) puts ranks "
                          f"{_span(full.stage_ranks(st.index))} in that stage", st.line)
    events = {st.index: _events(f, st, layout, rows_of[st.index], groups, size_of)
              for st in f.stages}
    holders = _holders(f, events)
    return _merge(f, events, holders)


def _span(ranks: tuple[int, ...]) -> str:
    return f"{ranks[0]}..{ranks[-1]}" if ranks == tuple(range(ranks[0], ranks[-1] + 1)) \
        else str(list(ranks))


def _err(f: AicbFile, msg: str, line: int | None = None) -> SpecError:
    return SpecError(SpecIssue(msg, file=f.path, line=line))


def _events(f: AicbFile, st: AicbStage, layout: Layout, rows: list[AicbRow],
            groups: dict[str, Group], size_of) -> list[_Event]:
    stage_set = set(layout.stage_ranks(st.index))
    by_kind: dict[str, list[Group]] = defaultdict(list)
    for g in groups.values():
        if g.kind not in STAGE_LOCAL_KINDS or set(g.ranks) <= stage_set:
            by_kind[g.kind].append(g)
    counters: dict[tuple, int] = defaultdict(int)
    out = []
    for r in rows:
        size = size_of(r)
        if r.op == "compute":
            if r.compute_s > 0:
                out.append(_Event([Compute(r.compute_s, tuple(sorted(stage_set)), r.stage)],
                                  None, False, r.line, "compute"))
        elif r.op in ("send", "recv"):
            out.append(_p2p(f, st, layout, r, by_kind["pp"], size, counters))
        elif r.group in STAGE_LOCAL_KINDS:
            ops: list[Op] = [Collective(r.op, g.name, size, label=r.stage)  # type: ignore[arg-type]
                             for g in by_kind[r.group]]
            out.append(_Event(ops, None, False, r.line, f"{r.op} {r.group}"))
        else:  # pp, world, embedding: groups across stages
            n = counters[("coll", r.group)]
            counters[("coll", r.group)] += 1
            ops = [Collective(r.op, g.name, size, label=r.stage)  # type: ignore[arg-type]
                   for g in by_kind[r.group or ""]]
            out.append(_Event(ops, ("coll", r.group, n), False, r.line,
                              f"{r.op} {r.group} #{n + 1} ({size} B)"))
    return out


def _p2p(f: AicbFile, st: AicbStage, layout: Layout, r: AicbRow, pipelines: list[Group],
         size: int, counters: dict[tuple, int]) -> _Event:
    step = _CHANNEL.get((r.op, r.direction))
    if step is None:
        raise _err(f, f"pp_stage{st.index}: {r.op} without send_next/recv_prev/send_prev/"
                      "recv_next in 'additional'", r.line)
    peer = st.index + step
    if not 0 <= peer < layout.pp:
        raise _err(f, f"pp_stage{st.index}: {r.op}_{r.direction} leads to stage {peer}, "
                      f"outside 0..{layout.pp - 1}", r.line)
    src, dst = (st.index, peer) if r.op == "send" else (peer, st.index)
    n = counters[("p2p", src, dst)]
    counters[("p2p", src, dst)] += 1
    ops: list[Op] = [SendRecv(g.ranks[src], g.ranks[dst], size, g.name, r.stage)
                     for g in pipelines]
    return _Event(ops, ("p2p", src, dst, n), True, r.line,
                  f"{r.op}_{r.direction} #{n + 1} (stage {src} -> {dst}, {size} B)")


def _holders(f: AicbFile, events: dict[int, list[_Event]]) -> dict[tuple, dict[int, _Event]]:
    holders: dict[tuple, dict[int, _Event]] = defaultdict(dict)
    for s, evs in events.items():
        for e in evs:
            if e.key is not None:
                holders[e.key][s] = e
    writers: dict[str, set[int]] = defaultdict(set)
    for key, by_stage in holders.items():
        if key[0] == "coll":
            writers[key[1]].update(by_stage)
    for key, by_stage in holders.items():
        first = next(iter(by_stage.values()))
        if key[0] == "p2p" and len(by_stage) != 2:
            (s, e), = by_stage.items()
            other = key[2] if s == key[1] else key[1]
            raise _err(f, f"pp_stage{s}: {e.what} has no matching row in pp_stage{other}", e.line)
        if key[0] == "coll" and set(by_stage) != writers[key[1]]:
            lacking = sorted(writers[key[1]] - set(by_stage))
            raise _err(f, f"{first.what}: pp_stage{lacking[0]} has fewer {key[1]}-group rows "
                          "than the other stages that write them", first.line)
        shapes = {(type(e.ops[0]).__name__, getattr(e.ops[0], "op", ""), e.ops[0].size_bytes)
                  for e in by_stage.values() if e.ops}  # type: ignore[union-attr]
        if len(shapes) > 1:
            where = ", ".join(f"pp_stage{s} line {e.line}" for s, e in by_stage.items())
            raise _err(f, f"{first.what}: the stages disagree on the op or size ({where})",
                       first.line)
    return holders


def _merge(f: AicbFile, events: dict[int, list[_Event]],
           holders: dict[tuple, dict[int, _Event]]) -> list[Op]:
    pos = dict.fromkeys(events, 0)
    out: list[Op] = []
    while True:
        progressed = False
        for s, evs in events.items():
            while pos[s] < len(evs) and (evs[pos[s]].done or evs[pos[s]].key is None):
                if not evs[pos[s]].done:
                    out.extend(evs[pos[s]].ops)
                    evs[pos[s]].done = True
                pos[s] += 1
                progressed = True
        ready = {s: _front(evs, pos[s]) for s, evs in events.items()}
        for s in events:
            for e in ready[s]:
                by_stage = holders[e.key]  # type: ignore[index]
                if not e.done and all(o in ready[t] for t, o in by_stage.items()):
                    out.extend(e.ops)
                    for o in by_stage.values():
                        o.done = True
                    progressed = True
        if all(p >= len(events[s]) for s, p in pos.items()):
            return out
        if not progressed:
            raise _stuck(f, events, pos)


def _front(evs: list[_Event], i: int) -> list[_Event]:
    """The shared events stage can take part in now: its next one, or its whole batch of
    consecutive hand-offs."""
    out: list[_Event] = []
    while i < len(evs):
        e = evs[i]
        if not e.done:
            if not e.p2p:
                return out or [e]
            out.append(e)
        i += 1
    return out


def _stuck(f: AicbFile, events: dict[int, list[_Event]], pos: dict[int, int]) -> SpecError:
    waits = [f"pp_stage{s} line {events[s][p].line} ({events[s][p].what})"
             for s, p in pos.items() if p < len(events[s])]
    return SpecError(SpecIssue("the pipeline stages' sections cannot be merged without a "
                               "deadlock; stages wait at: " + "; ".join(waits), file=f.path))
