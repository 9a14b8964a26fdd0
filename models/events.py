"""Faults and dynamics during a run: the actions an experiment's ``events:`` timeline expands to
(orchestration/events/spec.py reads and checks the file form), played on the live lab by the
one scheduler thread of testbed/live/trace_player.py, which records each in ``events.jsonl``.

An action is one change at one instant: ``down`` or ``up`` of some links (down: one veth
end each, its peer then without carrier; up: both ends, and the plan's routes restored;
testbed/live/faults.py), ``shape`` of some link directions
(Shaping field changes, or back to the plan's shaping with ``restore``), or ``slowdown`` of
one rank's compute (the agents' control channel, traffic_gen/agent.py). A ``flap`` expands to
``count`` down/up pairs, a ``node_down`` to the down of every link of the node (and, with
``agent``, the node's agents frozen by SIGSTOP or killed; its ``node_up`` sends SIGCONT to the
frozen), a ``partition`` to one down of all its links (its ``heal`` or ``duration``: one up), a
``trace`` to one ``shape`` per step of its trace file, a ``degrade`` with a ramp to ``steps``
shapes that each move the values a step closer to the target (``ramp``: (k, n), step k of n,
interpolated by the player from the values the direction had when the ramp began), a
``corrupt`` to a ``shape`` of ``corrupt_pct``. Times are
seconds after the anchor: the run's start (the moment the first workload is started, the
run's t0) or, with ``anchor``, the start instant of that workload's first phase or of its
iteration ``iteration`` (the controller's phase start, traffic_gen ReplayOptions.on_phase).
:func:`action_to_dict` and :func:`action_from_dict` carry an action as JSON (a cluster's
machines play their share of the actions, orchestration/events/cluster.py). Pure data, no
root.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from models.shaping import GilbertElliott
from models.units import BufferSize

__all__ = ["EventAction", "EventOp", "AgentAction", "EVENT_RECORDS", "EVENT_KINDS",
           "action_to_dict", "action_from_dict"]

EVENT_RECORDS = "events.jsonl"
EventOp = Literal["down", "up", "shape", "slowdown"]
EVENT_KINDS = ("link_down", "link_up", "flap", "degrade", "node_down", "node_up", "trace",
               "partition", "heal", "straggler", "corrupt")
AgentAction = Literal["freeze", "kill", "thaw"]


@dataclass(frozen=True, slots=True)
class EventAction:
    """One change of event ``event`` (its index in ``events:``, of kind ``kind``): ``op`` at
    ``t_s`` seconds after the anchor (``anchor``: a workload's name, None: the run's start;
    ``iteration``: the start of that iteration of the workload, numbered from 0 as in its
    records, None: the start of its first phase).

    links: the links it sets down or up (``down``/``up``); node: the node of a node event;
    directions: the (link, direction) pairs it reshapes (``shape``), with ``changes`` (Shaping
    field -> value, e.g. ``rate_bps``) or ``restore`` (back to the shaping they had when the
    run started); step: the action's number within its event (a flap: 0 down, 1 up, 2 down..).
    agent: what happens to the agents on ``node`` (``freeze`` SIGSTOP, ``kill`` SIGKILL,
    ``thaw`` SIGCONT to the ones an earlier event froze; None: nothing); ramp: (k, n), this
    ``shape`` is step k of n of a ramp towards ``changes``; workload, rank, factor: the
    ``slowdown`` of ``rank`` of ``workload`` (compute durations times ``factor`` from now on).
    index: the action's number in the run's whole list, set on the share a cluster machine
    plays (its records carry it back as ``action``, so the driver merges them); None: not
    split.
    """

    event: int
    kind: str
    op: EventOp
    t_s: float
    anchor: str | None = None
    iteration: int | None = None
    links: tuple[str, ...] = ()
    node: str | None = None
    directions: tuple[tuple[str, str], ...] = ()
    changes: Mapping[str, Any] = field(default_factory=dict)
    restore: bool = False
    step: int = 0
    agent: AgentAction | None = None
    ramp: tuple[int, int] | None = None
    workload: str | None = None
    rank: int | None = None
    factor: float | None = None
    index: int | None = None

    def describe(self) -> dict[str, Any]:
        """The action's fields for a record (JSON types)."""
        out: dict[str, Any] = {"event": self.event, "kind": self.kind, "op": self.op,
                               "step": self.step, "anchor": self.anchor}
        if self.iteration is not None:
            out["iteration"] = self.iteration
        if self.links:
            out["links"] = list(self.links)
        if self.node is not None:
            out["node"] = self.node
        if self.agent is not None:
            out["agent"] = self.agent
        if self.ramp is not None:
            out["ramp"] = list(self.ramp)
        if self.op == "slowdown":
            out.update(workload=self.workload, rank=self.rank, factor=self.factor)
        if self.directions:
            out["directions"] = [f"{lk} {d}" for lk, d in self.directions]
            out["restore"] = self.restore
            if self.changes:
                out["changes"] = {k: _jsonable(v) for k, v in self.changes.items()}
        if self.index is not None:
            out["action"] = self.index
        return out


def action_to_dict(a: EventAction) -> dict[str, Any]:
    """``a`` as JSON types, every field (a buffer or Gilbert-Elliott change as its fields);
    :func:`action_from_dict` reads it back equal. Pure."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(a):
        v = getattr(a, f.name)
        if f.name == "changes":
            v = {k: dataclasses.asdict(x) if dataclasses.is_dataclass(x) else x
                 for k, x in v.items()}
        elif isinstance(v, tuple):
            v = [list(x) if isinstance(x, tuple) else x for x in v]
        out[f.name] = v
    return out


def action_from_dict(d: Mapping[str, Any]) -> EventAction:
    """The :class:`EventAction` of :func:`action_to_dict`'s ``d``. Raises TypeError or
    KeyError for a mapping that is not one."""
    kw = dict(d)
    kw["links"] = tuple(kw.get("links") or ())
    kw["directions"] = tuple(tuple(x) for x in kw.get("directions") or ())
    if kw.get("ramp") is not None:
        kw["ramp"] = tuple(kw["ramp"])
    changes = dict(kw.get("changes") or {})
    for key, cls in (("buffer", BufferSize), ("loss_gemodel", GilbertElliott)):
        if isinstance(changes.get(key), Mapping):
            changes[key] = cls(**changes[key])
    kw["changes"] = changes
    return EventAction(**kw)


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return str(v)
