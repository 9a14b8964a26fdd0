"""``events:`` of an experiment file: faults and dynamics on a timeline, checked before the lab
exists and expanded to :class:`aitb.events.EventAction` (played by the scheduler thread of
testbed/trace_player.py, recorded in ``events.jsonl``)::

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

``link`` is a link name or a list of them. Rates and buffers of ``degrade`` are divided by
the experiment's ``scale`` like the topology's. Errors (unknown link, node or workload names
with suggestions, a flap whose down time is not shorter than its period, shaping the kernel
model refuses) name the file, ``events[i].<key>`` and its line.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, PositiveInt, Tag

from aitb.errors import SpecError, SpecIssue
from aitb.events import EventAction
from aitb.plan import LabPlan
from aitb.specfile import with_lines
from aitb.unit_fields import Duration, SpecModel
from aitb.units import UnitError, parse_duration_s
from topologies.scaling import scale_changes
from topologies.shaping import to_changes
from topologies.spec import Buffer, Pct, Rate
from topologies.spec import Duration as DurationText

__all__ = ["EventEntry", "plan_events"]

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
    """Both ends of ``link`` (one or a list) go down."""

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
    count: PositiveInt = 1


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
    duration: Duration | None = None


class NodeDown(_Event):
    """Every link of ``node`` goes down (both ends)."""

    kind: Literal["node_down"]
    node: str


class NodeUp(_Event):
    """Every link of ``node`` comes back; routes restored."""

    kind: Literal["node_up"]
    node: str


EventEntry = Annotated[LinkDown | LinkUp | Flap | Degrade | NodeDown | NodeUp,
                       Field(discriminator="kind")]
_SHAPING_KEYS = ("rate", "delay", "jitter", "loss", "buffer")


def _unknown(what: str, name: str, known: Sequence[str], where: str = "the lab") -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    shown = ", ".join(known[:12]) + (f", ... ({len(known)} in all)" if len(known) > 12 else "")
    return f"no {what} {name!r} in {where}{hint} (its {what}s: {shown})"


def _seconds(value: Any) -> float:
    return parse_duration_s(value)


def plan_events(events: Sequence[Any], plan: LabPlan, workloads: Sequence[str], source: str,
                doc: Any, scale: float = 1.0) -> tuple[EventAction, ...]:
    """The actions of ``events`` (validated entries of ``events:``) for ``plan``, in file
    order; ``workloads`` are the experiment's workload names. Pure. Raises one
    :class:`SpecError` with an issue per problem, each naming ``source``, ``events[i].<key>``
    and its line (``doc`` is the ruamel document)."""
    links = {lk.name: lk for lk in plan.links}
    nodes = [n.name for n in plan.nodes]
    issues: list[SpecIssue] = []
    out: list[EventAction] = []

    def issue(i: int, key: tuple[str | int, ...], message: str) -> None:
        issues.append(SpecIssue(message, file=source, key_path=("events", i, *key)))

    for i, ev in enumerate(events):
        iteration = None
        if isinstance(ev.at, AtWorkload):
            anchor, at_s, iteration = ev.at.workload, _seconds(ev.at.offset), ev.at.iteration
            if anchor not in workloads:
                issue(i, ("at", "workload"), _unknown("workload", anchor, list(workloads),
                                                           "the experiment"))
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
        if ev.kind in ("link_down", "node_down"):
            out.append(EventAction(op="down", t_s=at_s, **base))
        elif ev.kind in ("link_up", "node_up"):
            out.append(EventAction(op="up", t_s=at_s, **base))
        elif ev.kind == "flap":
            period, down = _seconds(ev.period), _seconds(ev.down)
            if not 0 < down < period:
                issue(i, ("down",), f"down {ev.down} must be above 0 and shorter than the "
                                    f"period {ev.period}")
            for k in range(ev.count):
                t = at_s + k * period
                out.append(EventAction(op="down", t_s=t, step=2 * k, **base))
                out.append(EventAction(op="up", t_s=t + down, step=2 * k + 1, **base))
        else:
            out += _degrade(ev, i, at_s, base, links, scale, issue,
                            {(t.link, t.direction) for t in plan.traces})
    if issues:
        raise with_lines(SpecError(issues), doc, source)
    return tuple(out)


def _degrade(ev: Degrade, i: int, at_s: float, base: dict[str, Any], links: dict[str, Any],
             scale: float, issue: Any, traced: set[tuple[str, str]]) -> list[EventAction]:
    keys = {k: getattr(ev, k) for k in _SHAPING_KEYS if getattr(ev, k) is not None}
    if not keys:
        issue(i, (), f"a degrade sets at least one of {', '.join(_SHAPING_KEYS)}")
        return []
    dirs = ("a_to_b", "b_to_a") if ev.direction == "both" else (ev.direction,)
    pairs = tuple((name, d) for name in base["links"] if name in links for d in dirs)
    mtu = min((links[name].mtu for name, _ in pairs), default=1500)
    try:
        changes = scale_changes(to_changes(keys), scale, mtu)
    except UnitError as exc:
        issue(i, (), str(exc))
        return []
    for name, d in pairs:
        if (name, d) in traced:
            issue(i, ("link",), f"{name} {d} follows a trace; a degrade would fight it")
            continue
        try:
            getattr(links[name], d).with_changes(**changes)  # validated as a whole
        except (UnitError, ValueError) as exc:
            issue(i, (), f"{name} {d}: {exc}")
    base = {**base, "links": ()}
    out = [EventAction(op="shape", t_s=at_s, directions=pairs, changes=changes, **base)]
    if ev.duration is not None:
        out.append(EventAction(op="shape", t_s=at_s + _seconds(ev.duration), directions=pairs,
                               restore=True, step=1, **base))
    return out
