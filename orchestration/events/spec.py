"""``events:`` of an experiment file: faults and dynamics on a timeline, checked before the lab
exists and expanded to :class:`models.events.EventAction` (played by the scheduler thread of
testbed/live/trace_player.py, recorded in ``events.jsonl``; on a lab over several machines each
machine plays its share, orchestration/events/cluster.py)::

    events:
      - {at: 2s, kind: link_down, link: dci-a}           # at: seconds after the run's start
      - {at: 4s, kind: link_up, link: dci-a}             #   (when its first workload starts)
      - at: {workload: ring, offset: 500ms}               # or after a workload's start
      - {at: {workload: ring, iteration: 3}, kind: link_down, link: dci-b}  # or iteration k
        kind: flap                                        # count x (down, up after `down`),
        link: dci-b                                       #   one every `period`
        period: 1s
        down: 200ms
        count: 3
      - {at: 1s, kind: degrade, link: dci-a, direction: a_to_b,   # direction: both (default)
         rate: 1Gbit, delay: 5ms, jitter: 1ms, loss: 1%, buffer: 100p,
         duration: 2s}                                    # optional: back to the plan's after
      - {at: 3s, kind: node_down, node: dc1-s1}           # every link of the node
      - {at: 5s, kind: node_up, node: dc1-s1}
      - {at: 3s, kind: node_down, node: h3, agent: freeze}  # and its agents SIGSTOPped
      - {at: 4s, kind: node_up, node: h3}                 #   (SIGCONT here); or agent: kill
      - {at: 1s, kind: degrade, link: dci-a, rate: 100Mbit,  # a ramp: 5 steps from the
         ramp_s: 2, ramp_steps: 5}                         #   values at 1s to these by 3s
      - {at: 1s, kind: trace, link: dci-a, direction: a_to_b,  # the direction follows a
         file: traces/dci.csv, format: aitb, loop: true,  #   trace file from 1s (relative
         duration: 10s}                                   #   to this file; loop: duration)
      - {at: 2s, kind: partition, name: split, link: [dci-a, dci-b]}  # all down at once
      - {at: 3s, kind: heal, partition: split}            #   and all up (or: duration)
      - {at: 1s, kind: straggler, workload: ring, rank: 3, factor: 2.5}  # compute x 2.5
      - {at: 1s, kind: corrupt, link: dci-a, corrupt: 0.1%}  # packets with a flipped bit
      - {at: 1s, kind: corrupt, link: dci-a, ber: 1e-7}   #   or a bit error rate

``link`` is a link name or a list of them. Rates and buffers of ``degrade`` are divided by the
experiment's ``scale`` like the topology's (a trace's rate steps too). A bit error rate ``ber``
becomes the share of packets with one flipped bit (netem's and the native line's ``corrupt``)
for packets of the link's MTU: ``corrupt = 1 - (1 - ber)^(8 * mtu)``, the probability that a
packet of ``8 * mtu`` independent bits has at least one error (smaller packets are hit less in
reality, equally here). A straggler's ``factor`` multiplies the rank's compute durations on top
of the workload's ``stragglers:`` (1: back to those). On the native delay line (no netem) a
direction corrupts live only if it corrupted from bring-up (the helper copies whole packets
only then): that, a delay on a direction without a line and the line's memory cap are refused
before the lab exists as for trace files (:func:`line_problems`, called by ``aitb run`` once
the host's delay lines are known). Errors (unknown link, node, workload, rank or partition
names with suggestions, a flap whose down time is not shorter than its period, shaping the
kernel model refuses, a trace file that cannot be read, a ``link_up`` or ``heal`` of a link
that is up at that moment and a ``link_down`` of one already down, where the order of the
events is known before the run: absolute times, or offsets of one workload; not across
workloads or between absolute and anchored times, see :func:`_check_link_states`) name the
file, ``events[i].<key>`` and its line. A straggler's slowdown reaches a workload's agents
once they run (sent then if set before).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag

from models.errors import SpecError, SpecIssue
from models.events import EventAction
from models.plan import LabPlan
from models.shaping import Shaping
from models.specfile import MAX_EVENT_ACTIONS, MAX_REPEATS, with_lines
from models.trace import LinkTrace, planned_changes, read_trace
from models.unit_fields import Duration, SpecModel
from models.units import UnitError, parse_duration_s
from testbed.delay.nfqueue import labline
from topologies.scaling import scale_changes
from topologies.shaping import to_changes
from topologies.spec import Buffer, Pct, Rate
from topologies.spec import Duration as DurationText

__all__ = ["EventEntry", "plan_events", "planned_actions", "line_problems"]

_Forbid = ConfigDict(extra="forbid")
Links = str | Annotated[list[str], Field(min_length=1)]
Direction = Literal["a_to_b", "b_to_a", "both"]


class AtWorkload(SpecModel):
    """``at: {workload: NAME, offset: 500ms}``: ``offset`` after workload NAME's traffic
    starts (its first phase's start instant); with ``iteration: k``, after the start of its
    iteration k (numbered from 0 as in collectives.jsonl; an FL round's phases likewise)."""

    model_config = _Forbid
    workload: str
    iteration: Annotated[int, Field(ge=0)] | None = None
    offset: Duration = "0s"


def _at_tag(value: Any) -> str:
    return "workload" if isinstance(value, Mapping | AtWorkload) else "time"


# tagged: a plain time's error is not followed by "expected a mapping" for the other form
At = Annotated[Annotated[Duration, Tag("time")] | Annotated[AtWorkload, Tag("workload")],
               Discriminator(_at_tag)]


class _Event(SpecModel):
    model_config = _Forbid
    at: At


class LinkDown(_Event):
    """``link`` (one or a list) goes down: one veth end set down, its peer without carrier,
    neither node routing over it (testbed/live/faults.py)."""

    kind: Literal["link_down"]
    link: Links


class LinkUp(_Event):
    """Both ends of ``link`` come back up; the plan's routes through it are restored."""

    kind: Literal["link_up"]
    link: Links


class Flap(_Event):
    """``count`` times: ``link`` down, up again ``down`` later; one cycle every ``period``."""

    kind: Literal["flap"]
    link: Links
    period: Duration
    down: Duration
    count: Annotated[int, Field(gt=0, le=MAX_REPEATS)] = 1


class Degrade(_Event):
    """Change ``direction`` of ``link`` live (set_shaping; the native delay line too): any of
    rate, delay, jitter, loss, buffer; back to the plan's shaping after ``duration``."""

    kind: Literal["degrade"]
    link: Links
    direction: Direction = "both"
    rate: Rate = None
    delay: DurationText = None
    jitter: DurationText = None
    loss: Pct = None
    buffer: Buffer = None
    corrupt: Pct = None
    duration: Duration | None = None
    ramp_s: Annotated[float, Field(gt=0, le=3600)] | None = None
    ramp_steps: Annotated[int, Field(ge=2, le=100)] = 10


class Corrupt(_Event):
    """A share of the packets of ``direction`` of ``link`` get one flipped bit: ``corrupt``
    (percent) or ``ber`` (bit error rate, see the module docstring); back after
    ``duration``."""

    kind: Literal["corrupt"]
    link: Links
    direction: Direction = "both"
    corrupt: Pct = None
    ber: Annotated[float, Field(gt=0, lt=1)] | None = None
    duration: Duration | None = None


class TraceEvent(_Event):
    """From the event on, ``direction`` of ``link`` follows trace ``file`` (models/trace.py
    formats; relative to the experiment file) from its time 0; a looped trace needs
    ``duration``, which also ends a plain one early; the values of its last step stay."""

    kind: Literal["trace"]
    link: str
    direction: Direction = "both"
    file: Annotated[str, Field(min_length=1)]
    format: Literal["aitb", "mahimahi"] = "aitb"
    loop: bool = False
    window: DurationText = None
    duration: Duration | None = None


class Partition(_Event):
    """Every link of ``link`` goes down in one action; up again after ``duration`` or at a
    ``heal`` naming the partition's ``name``."""

    kind: Literal["partition"]
    link: Links
    name: str | None = None
    duration: Duration | None = None


class Heal(_Event):
    """Every link of partition ``partition`` (its ``name``) comes back in one action."""

    kind: Literal["heal"]
    partition: str


class Straggler(_Event):
    """From the event on, rank ``rank`` of ``workload`` computes ``factor`` times as long
    (on top of the workload's ``stragglers:``; 1 undoes an earlier one); ``workload`` may be
    left out when the experiment has one."""

    kind: Literal["straggler"]
    workload: str | None = None
    rank: Annotated[int, Field(ge=0)]
    factor: Annotated[float, Field(gt=0, le=1000)]


class NodeDown(_Event):
    """Every link of ``node`` goes down (the node's own ends set down, its neighbours' ends
    without carrier); ``agent: freeze`` also stops its agents
    (SIGSTOP by pid, SIGCONT at its ``node_up``), ``kill`` kills them (the run then fails with
    the controller's record of the lost agent)."""

    kind: Literal["node_down"]
    node: str
    agent: Literal["freeze", "kill"] | None = None


class NodeUp(_Event):
    """Every link of ``node`` comes back; routes restored."""

    kind: Literal["node_up"]
    node: str


EventEntry = Annotated[LinkDown | LinkUp | Flap | Degrade | NodeDown | NodeUp | TraceEvent
                       | Partition | Heal | Straggler | Corrupt, Field(discriminator="kind")]
_SHAPING_KEYS = ("rate", "delay", "jitter", "loss", "buffer", "corrupt")
_RAMPED = ("rate_bps", "delay_s", "jitter_s", "loss_pct", "corrupt_pct")  # player: interpolated


def _unknown(what: str, name: str, known: Sequence[str], where: str = "the lab") -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    shown = ", ".join(known[:12]) + (f", ... ({len(known)} in all)" if len(known) > 12 else "")
    return f"no {what} {name!r} in {where}{hint} (its {what}s: {shown})"


def _seconds(value: Any) -> float:
    return parse_duration_s(value)


def plan_events(events: Sequence[Any], plan: LabPlan, workloads: Sequence[str], source: str,
                doc: Any, scale: float = 1.0,
                placements: Mapping[str, Mapping[int, str]] | None = None,
                last_iteration: Mapping[str, int] | None = None
                ) -> tuple[EventAction, ...]:
    """The actions of ``events`` (validated entries of ``events:``) for ``plan``, in file
    order; ``workloads`` are the experiment's workload names, ``placements`` (where known)
    each workload's rank -> host (a straggler's rank, an ``agent:`` node are checked against
    them), ``last_iteration`` (where known) each workload's last iteration or FL round (an
    event anchored after it would never happen: refused). Reads the files of ``trace``
    events (relative to ``source``'s directory). Pure otherwise. Raises one
    :class:`SpecError` with an issue per problem, each naming ``source``,
    ``events[i].<key>`` and its line (``doc`` is the ruamel document)."""
    _check_total(events, source, doc)
    links = {lk.name: lk for lk in plan.links}
    nodes = [n.name for n in plan.nodes]
    issues: list[SpecIssue] = []
    out: list[EventAction] = []
    partitions: dict[str, tuple[str, ...]] = {}
    traced = {(t.link, t.direction) for t in plan.traces}
    frozen: set[str] = set()

    def issue(i: int, key: tuple[str | int, ...], message: str) -> None:
        issues.append(SpecIssue(message, file=source, key_path=("events", i, *key)))

    for i, ev in enumerate(events):
        iteration = None
        if isinstance(ev.at, AtWorkload):
            anchor, at_s, iteration = ev.at.workload, _seconds(ev.at.offset), ev.at.iteration
            if anchor not in workloads:
                issue(i, ("at", "workload"), _unknown("workload", anchor, list(workloads),
                                                           "the experiment"))
            elif iteration is not None and last_iteration and anchor in last_iteration and \
                    iteration > last_iteration[anchor]:
                issue(i, ("at", "iteration"), f"workload {anchor} has iterations (or rounds) "
                      f"0..{last_iteration[anchor]}: an event at iteration {iteration} would "
                      "never happen")
        else:
            anchor, at_s = None, _seconds(ev.at)
        if at_s < 0:
            issue(i, ("at",), f"an event time must not be negative, got {at_s:g} s")
        names: list[str] = []
        if hasattr(ev, "link"):
            names = [ev.link] if isinstance(ev.link, str) else list(ev.link)
            for k, name in enumerate(names):
                if name not in links:
                    key = ("link",) if isinstance(ev.link, str) else ("link", k)
                    issue(i, key, _unknown("link", name, list(links)))
        node = getattr(ev, "node", None)
        if node is not None:
            if node not in nodes:
                issue(i, ("node",), _unknown("node", node, nodes))
            names = [lk.name for lk in plan.links_of(node)] if node in nodes else []
        base = dict(event=i, kind=ev.kind, anchor=anchor, iteration=iteration, node=node,
                    links=tuple(names))
        if ev.kind == "node_down" and ev.agent is not None:
            _check_agent_node(ev, i, node, nodes, placements, issue)
            if ev.agent == "freeze":
                frozen.add(node)
            base["agent"] = ev.agent
        if ev.kind == "node_up" and node in frozen:
            base["agent"] = "thaw"
        if ev.kind in ("link_down", "node_down"):
            out.append(EventAction(op="down", t_s=at_s, **base))
        elif ev.kind in ("link_up", "node_up"):
            out.append(EventAction(op="up", t_s=at_s, **base))
        elif ev.kind == "partition":
            if ev.name is not None:
                if ev.name in partitions:
                    issue(i, ("name",), f"a partition named {ev.name!r} comes earlier")
                partitions[ev.name] = tuple(names)
            out.append(EventAction(op="down", t_s=at_s, **base))
            if ev.duration is not None:
                out.append(EventAction(op="up", t_s=at_s + _seconds(ev.duration), step=1,
                                       **base))
        elif ev.kind == "heal":
            if ev.partition not in partitions:
                issue(i, ("partition",), _unknown("partition", ev.partition, list(partitions),
                                                  "the events before this one"))
            out.append(EventAction(op="up", t_s=at_s, **{
                **base, "links": partitions.get(ev.partition, ())}))
        elif ev.kind == "straggler":
            out += _straggler(ev, i, at_s, base, workloads, placements, issue)
        elif ev.kind == "flap":
            period, down = _seconds(ev.period), _seconds(ev.down)
            if not 0 < down < period:
                issue(i, ("down",), f"down {ev.down} must be above 0 and shorter than the "
                                    f"period {ev.period}")
            for k in range(ev.count):
                t = at_s + k * period
                out.append(EventAction(op="down", t_s=t, step=2 * k, **base))
                out.append(EventAction(op="up", t_s=t + down, step=2 * k + 1, **base))
        elif ev.kind == "trace":
            out += _trace(ev, i, at_s, base, links, scale, issue, traced, source)
        else:  # degrade, corrupt
            out += _degrade(ev, i, at_s, base, links, scale, issue, traced)
    if len(out) > MAX_EVENT_ACTIONS:  # the trace files' steps on top of the planned ones
        raise with_lines(SpecError(SpecIssue(
            f"the events expand to {len(out)} actions with their trace files' steps; at most "
            f"{MAX_EVENT_ACTIONS} (MAX_EVENT_ACTIONS)", file=source, key_path=("events",))),
            doc, source)
    _check_link_states(out, events, set(links), issue)
    if issues:
        raise with_lines(SpecError(issues), doc, source)
    return tuple(out)


def planned_actions(ev: Any) -> int:
    """The actions event entry ``ev`` expands to, counted from its keys (nothing is built):
    a flap 2 x ``count``, a degrade or corrupt its ramp's steps (or 1) and 1 more with a
    ``duration``, a partition 2 with a ``duration``, a trace 0 (its steps are counted once its
    file is read, :func:`_trace`), every other kind 1."""
    if ev.kind == "flap":
        return 2 * ev.count
    if ev.kind in ("degrade", "corrupt"):
        ramp = ev.ramp_steps if getattr(ev, "ramp_s", None) is not None else 1
        return ramp + (ev.duration is not None)
    if ev.kind == "partition":
        return 1 + (ev.duration is not None)
    return 0 if ev.kind == "trace" else 1


def _check_total(events: Sequence[Any], source: str, doc: Any) -> None:
    """Refuse a timeline of more than MAX_EVENT_ACTIONS actions before any is built, at the
    event that crosses the bound, naming the total."""
    counts = [planned_actions(ev) for ev in events]
    total = sum(counts)
    if total <= MAX_EVENT_ACTIONS:
        return
    i = max(range(len(counts)), key=counts.__getitem__)
    key = ("count",) if events[i].kind == "flap" else ()
    raise with_lines(SpecError(SpecIssue(
        f"the events expand to {total} actions ({events[i].kind} events[{i}] alone to "
        f"{counts[i]}); at most {MAX_EVENT_ACTIONS} (MAX_EVENT_ACTIONS)", file=source,
        key_path=("events", i, *key))), doc, source)


def _precedes(x: tuple[int, EventAction], y: tuple[int, EventAction]) -> bool:
    """Whether action ``x`` certainly plays before ``y`` (each with its index in the expanded
    list, which is the player's order for ties: testbed/live/trace_player.py pushes equal times in
    file order, and a workload's first-phase anchor before its iteration anchor). Known only
    within one anchor: two absolute times compare directly; two offsets of one workload
    compare as (iteration, offset) pairs, the first-phase anchor as iteration -1, since the
    workload's iterations start one after another (phases run in sequence) at instants not
    known before the run: iteration a + x precedes iteration b + y when a <= b and x <= y.
    Absolute times against a workload's, and offsets of different workloads: unknown
    (False both ways)."""
    (ix, a), (iy, b) = x, y
    if a.anchor != b.anchor:
        return False
    ka = (-1 if a.iteration is None else a.iteration, a.t_s)
    kb = (-1 if b.iteration is None else b.iteration, b.t_s)
    if ka == kb:
        return ix < iy
    return ka[0] <= kb[0] and ka[1] <= kb[1]


def _when(a: EventAction) -> str:
    if a.anchor is None:
        return f"at {a.t_s:g} s"
    start = f"{a.anchor}'s start" if a.iteration is None else \
        f"{a.anchor}'s iteration {a.iteration}"
    return f"{a.t_s:g} s after {start}"


def _check_link_states(out: Sequence[EventAction], events: Sequence[Any], known: set[str],
                       issue: Any) -> None:
    """Refuse a ``link_up`` or ``heal`` of a link that is up at that moment (no event before
    it takes the link down, or one that does is followed by an event that brings it back up
    before this one) and a ``link_down`` of a link that is down at that moment (an event
    before it took it down, and every up that might come between is followed by another
    down before this one). Every down/up action counts (link_down/up, flap, partition and its
    duration, heal, node_down/up on the node's links); links start up. Refused only where
    that holds in every order the run can play the actions in: "before" is
    :func:`_precedes`, so actions whose order is not known before the run (absolute times
    against a workload's offsets, offsets of different workloads, a later iteration at a
    smaller offset) never make a refusal. One issue per event and link, at ``link`` (``link[k]``
    of a list) or a heal's ``partition``, naming the link and the earlier event; links not
    in ``known`` (refused already) are skipped."""
    acts = list(enumerate(out))
    for x in acts:
        a = x[1]
        if (a.kind, a.op) not in (("link_up", "up"), ("heal", "up"), ("link_down", "down")):
            continue
        ev = events[a.event]
        for k, name in enumerate(a.links):
            if name not in known:  # refused already
                continue
            if a.kind == "heal":
                key: tuple[str | int, ...] = ("partition",)
            else:
                key = ("link",) if isinstance(ev.link, str) else ("link", k)
            mine = [y for y in acts if y[0] != x[0] and name in y[1].links]
            downs = [y for y in mine if y[1].op == "down"]
            ups = [y for y in mine if y[1].op == "up"]
            why = _already_up(x, downs, ups) if a.op == "up" else _already_down(x, downs, ups)
            if why is not None:
                issue(a.event, key, f"link {name} is already {'up' if a.op == 'up' else 'down'} "
                                    f"at this {a.kind} ({_when(a)}): {why}")


def _name(y: tuple[int, EventAction]) -> str:
    return f"events[{y[1].event}] ({y[1].kind} {_when(y[1])})"


def _maxima(items: list[tuple[int, EventAction]]) -> list[tuple[int, EventAction]]:
    """The elements of ``items`` no other one certainly follows (:func:`_precedes` is a
    partial order: an element below one of them is below a maximum too)."""
    top: list[tuple[int, EventAction]] = []
    for y in items:
        if not any(_precedes(y, m) for m in top):
            top = [m for m in top if not _precedes(m, y)] + [y]
    return top


def _already_up(x: tuple[int, EventAction], downs: list[tuple[int, EventAction]],
                ups: list[tuple[int, EventAction]]) -> str | None:
    """Why ``x`` (an up) certainly finds its link up, or None when it may not: every down
    certainly comes before or after it, and each before it is followed, certainly before
    ``x``, by an up."""
    if any(not _precedes(x, d) and not _precedes(d, x) for d in downs):
        return None
    before = [d for d in downs if _precedes(d, x)]
    if not before:
        later = f"; {_name(downs[0])} takes it down only after this one" if downs else ""
        return "no event before it takes the link down" + later
    top_ups = _maxima([u for u in ups if _precedes(u, x)])
    found = None
    for d in _maxima(before):
        cover = next((u for u in top_ups if _precedes(d, u)), None)
        if cover is None:
            return None
        found = (d, cover)
    assert found is not None
    return f"{_name(found[1])} brought it back up after {_name(found[0])} took it down"


def _already_down(x: tuple[int, EventAction], downs: list[tuple[int, EventAction]],
                  ups: list[tuple[int, EventAction]]) -> str | None:
    """Why ``x`` (a down) certainly finds its link down, or None when it may not: a down
    certainly comes before it, every up certainly before or after it, and each up before it
    is followed, certainly before ``x``, by a down."""
    top_downs = _maxima([d for d in downs if _precedes(d, x)])
    if not top_downs or any(not _precedes(x, u) and not _precedes(u, x) for u in ups):
        return None
    for u in _maxima([u for u in ups if _precedes(u, x)]):
        if not any(_precedes(u, d) for d in top_downs):
            return None
    return f"{_name(top_downs[-1])} took it down and no event brings it back up before this one"


def _check_agent_node(ev: NodeDown, i: int, node: str, nodes: Sequence[str],
                      placements: Mapping[str, Mapping[int, str]] | None, issue: Any) -> None:
    if placements is None or node not in nodes:
        return
    hosts = sorted({h for p in placements.values() for h in p.values()})
    if node not in hosts:
        issue(i, ("agent",), f"agent: {ev.agent} needs an agent on node {node!r}, and no "
                             f"workload places a rank there (hosts with agents: "
                             f"{', '.join(hosts[:12])})")


def _straggler(ev: Straggler, i: int, at_s: float, base: dict[str, Any],
               workloads: Sequence[str], placements: Mapping[str, Mapping[int, str]] | None,
               issue: Any) -> list[EventAction]:
    name = ev.workload
    if name is None:
        if len(workloads) != 1:
            issue(i, ("workload",), f"the experiment has {len(workloads)} workloads "
                                    f"({', '.join(workloads)}): say which one's rank")
            return []
        name = workloads[0]
    elif name not in workloads:
        issue(i, ("workload",), _unknown("workload", name, list(workloads), "the experiment"))
        return []
    if placements is not None and name not in placements:
        issue(i, ("workload",), f"workload {name} runs no agents (kind: app), so it has no "
                                "compute to slow down")
        return []
    ranks = sorted((placements or {}).get(name, {}))
    if placements is not None and ev.rank not in ranks:
        shown = f"0..{ranks[-1]}" if ranks == list(range(len(ranks))) and ranks else \
            ", ".join(map(str, ranks[:12]))
        issue(i, ("rank",), f"workload {name} has no rank {ev.rank} (its ranks: {shown})")
        return []
    return [EventAction(op="slowdown", t_s=at_s, workload=name, rank=ev.rank,
                        factor=float(ev.factor), **base)]


def _trace(ev: TraceEvent, i: int, at_s: float, base: dict[str, Any], links: dict[str, Any],
           scale: float, issue: Any, traced: set[tuple[str, str]], source: str
           ) -> list[EventAction]:
    """One ``shape`` per step of the trace file (its values absolute: rate, delay, loss as
    the step leaves them over the plan's shaping), up to ``duration``."""
    if ev.link not in links:
        return []
    path = Path(ev.file) if Path(ev.file).is_absolute() else Path(source).parent / ev.file
    window = _seconds(ev.window) if ev.window is not None else None
    if window is not None and ev.format != "mahimahi":
        issue(i, ("window",), "window applies to format: mahimahi only")
        return []
    try:
        steps, period = read_trace(path, ev.format, window)
    except SpecError as exc:
        first = exc.issues[0]
        where = f"{first.file}:{first.line}" if first.line else str(first.file)
        issue(i, ("file",), f"{where}: {first.message}")
        return []
    until = _seconds(ev.duration) if ev.duration is not None else None
    if ev.loop and (until is None or period <= 0):
        issue(i, ("loop",), "a looped trace needs a duration (when the event ends) and a "
                            "trace whose last time is above 0 s")
        return []
    loops = math.floor(until / period) + 1 if ev.loop and until is not None else 1
    if len(steps) * loops > MAX_EVENT_ACTIONS:  # counted before the changes are listed
        issue(i, ("duration",) if ev.loop else ("file",),
              f"the trace's {len(steps)} steps x {loops} loops = {len(steps) * loops} "
              f"actions; at most {MAX_EVENT_ACTIONS} (MAX_EVENT_ACTIONS)")
        return []
    steps = tuple(dataclasses.replace(s, rate_bps=max(1, round(s.rate_bps / scale)))
                  if s.rate_bps is not None else s for s in steps)
    dirs = ("a_to_b", "b_to_a") if ev.direction == "both" else (ev.direction,)
    lk = links[ev.link]
    out: list[EventAction] = []
    for d in dirs:
        if (ev.link, d) in traced:
            issue(i, ("link",), f"{ev.link} {d} follows a trace of the topology already; a "
                                "second trace would fight it")
            continue
        tr = LinkTrace(link=ev.link, direction=d, file=str(path), format=ev.format,
                       loop=ev.loop, period_s=period, steps=steps, window_s=window)
        start = getattr(lk, d)
        try:
            changes = list(planned_changes([tr], {(ev.link, d): start},
                                           until_s=until if until is not None else period))
        except (UnitError, ValueError) as exc:
            issue(i, ("file",), f"{path}: {ev.link} {d}: {exc}")
            continue
        for k, c in enumerate(changes):
            values = {"rate_bps": c.shaping.rate_bps, "delay_s": c.shaping.delay_s,
                      "loss_pct": c.shaping.loss_pct, "loss_gemodel": c.shaping.loss_gemodel}
            out.append(EventAction(op="shape", t_s=at_s + c.t_s, directions=((ev.link, d),),
                                   changes=values, step=k, **{**base, "links": ()}))
    return out


def line_problems(plan: LabPlan, actions: Sequence[EventAction]) -> list[str]:
    """What the native delay lines of ``plan`` (delay lines resolved for this host,
    testbed.delay.nfqueue.choose.resolve_here) could not do of the ``shape`` actions when played
    live: the rules of :func:`testbed.delay.nfqueue.labline.trace_problems` (a delay or impairment
    on a direction that starts without one, the memory cap, refused keys) and corrupt
    switched on or off live. One sentence per event and reason, naming ``events[i]``, its
    kind, link and direction. Pure."""
    links = {lk.name: lk for lk in plan.links}
    seen: set[tuple[int, str, str]] = set()
    out: list[str] = []
    for a in actions:
        if a.op != "shape" or a.restore:
            continue
        for name, d in a.directions:
            lk = links[name]
            if lk.delay_line != "native" or (a.event, name, d) in seen:
                continue
            start: Shaping = getattr(lk, d)
            new = start.with_changes(**a.changes)
            if not new.needs_netem:
                continue
            why = labline.problems(lk, d, new)
            if not start.needs_netem:
                why.append(f"link {name} {d}: it starts without a delay or impairment, so no "
                           "native delay line is made for it at bring-up; give it its first "
                           "delay or impairment in the link itself")
            elif (new.corrupt_pct > 0) != (start.corrupt_pct > 0):
                why.append(f"link {name} {d}: the native delay line cannot switch corrupt on "
                           "or off live (it copies whole packets only when it corrupts from "
                           "bring-up); give the link a corrupt value from the start, or use "
                           "delay_line: netem (on a kernel with netem)")
            if why:
                seen.add((a.event, name, d))
                out.append(f"events[{a.event}] ({a.kind} at {a.t_s:g} s): " + "; ".join(why))
    return out


def _degrade(ev: Degrade | Corrupt, i: int, at_s: float, base: dict[str, Any],
             links: dict[str, Any], scale: float, issue: Any,
             traced: set[tuple[str, str]]) -> list[EventAction]:
    keys = {k: getattr(ev, k) for k in _SHAPING_KEYS if getattr(ev, k, None) is not None}
    dirs = ("a_to_b", "b_to_a") if ev.direction == "both" else (ev.direction,)
    pairs = tuple((name, d) for name in base["links"] if name in links for d in dirs)
    mtu = min((links[name].mtu for name, _ in pairs), default=1500)
    if ev.kind == "corrupt":
        if (ev.corrupt is None) == (ev.ber is None):
            issue(i, (), "a corrupt event sets one of corrupt (percent of packets) or ber "
                         "(bit error rate)")
            return []
        if ev.ber is not None:  # at least one of 8*mtu independent bits flipped
            keys["corrupt"] = f"{100 * -math.expm1(8 * mtu * math.log1p(-ev.ber)):.6g}%"
    if not keys:
        issue(i, (), f"a degrade sets at least one of {', '.join(_SHAPING_KEYS)}")
        return []
    try:
        changes = scale_changes(to_changes(keys), scale, mtu)
    except UnitError as exc:
        issue(i, (), str(exc))
        return []
    for name, d in pairs:
        if (name, d) in traced:
            issue(i, ("link",), f"{name} {d} follows a trace; a {ev.kind} would fight it")
            continue
        try:
            getattr(links[name], d).with_changes(**changes)  # validated as a whole
        except (UnitError, ValueError) as exc:
            issue(i, (), f"{name} {d}: {exc}")
    base = {**base, "links": ()}
    ramp_s = getattr(ev, "ramp_s", None)
    if ramp_s is None:
        out = [EventAction(op="shape", t_s=at_s, directions=pairs, changes=changes, **base)]
    else:  # step k of n at at + k/n * ramp (k = 1..n; the last sets the target)
        n = ev.ramp_steps  # type: ignore[union-attr]
        if ev.duration is not None and _seconds(ev.duration) < ramp_s:
            issue(i, ("duration",), f"duration {ev.duration} ends before the ramp of "
                                    f"{ramp_s:g} s does")
        out = [EventAction(op="shape", t_s=at_s + ramp_s * k / n, directions=pairs,
                           changes=changes, step=k - 1, ramp=(k, n), **base)
               for k in range(1, n + 1)]
    if ev.duration is not None:
        out.append(EventAction(op="shape", t_s=at_s + _seconds(ev.duration), directions=pairs,
                               restore=True, step=len(out), **base))
    return out
