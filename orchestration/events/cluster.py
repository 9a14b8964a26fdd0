"""``events:`` of a cluster run: each machine plays its share of the actions on its part of the
lab, the driver merges their records into the run's one ``events.jsonl``.

    with playing_cluster_events(lab, actions, run_dir, manifest, progress) as player:
        replay every workload (player.anchor, player.attach as on one machine)

**Split** (:func:`split_actions`, pure). The actions are the ones models.events plans and checks
for the whole lab (orchestration/events/spec.py), unchanged. A ``down`` or ``up`` goes to every
machine that holds an end of one of its links, with those links: a link cut between two
machines (orchestration.cluster.partition) is, on each, a veth between its node and the
proxy switch of the far end, so each machine sets its own end down or up (both ends of that
veth), and on up restores and reads back its own node's routes through the link
(testbed/live/faults.py), exactly as one machine does for a whole link. A ``shape`` of a direction
goes to the machine of the direction's sender (it shapes the direction on its egress; the
far machine's proxy end is unshaped), a ``delay`` there taken down by the underlay's one-way
delay on a cut link as at bring-up (orchestration.cluster.underlay; never below 0). A
straggler's ``slowdown`` stays on the driver: the controller is the driver's, and its
message reaches the agent over the agent's SSH channel. A node's agents frozen or killed
(``node_down`` with ``agent:``) are refused before the lab exists
(orchestration.cluster.run.check_cluster): the agent is a process of its machine, its
pid that machine's.

**Play.** Every machine with a share runs ``aitb topo events PART``
(orchestration.events.cluster_part) with the trace player of a local run. The run's t0 is the
driver's clock when playing starts; each machine gets t0 + its offset (measured before the
run), and each workload's anchors (its phase start instants, driver clock) likewise + the
offset, sent only to the machines whose actions wait for that anchor. An action's planned
time after t0 is therefore the same on every machine, and a machine's times after its t0 are
the driver's after the driver's t0, corrected with the offset before the run as the agents'
records are (flows.jsonl, which the analysis places the events against). An anchor reaches
a machine one SSH message after the phase's start was chosen; an action due at once after it
is late by that much (``late_s`` says).

**Merge** (:func:`merge_records`, pure). One line per action of the run, as on one machine:
``planned_t_s``; ``began_t_s`` the first machine's begin, ``applied_t_s`` and ``acked_t_s``
the last machine's (the action is done when every end is), ``late_s`` from those; ``done``
every machine's merged (links, routes per node, shaping per direction); ``error`` naming each
machine that failed or never reported (a lost machine); ``not_reached`` when a machine did
not reach it; and ``machines``: per machine (``driver`` for a slowdown) its own ``links`` or
``directions``, times, ``done`` and error. A line is written once every machine of the
action has reported it, so ``events.jsonl`` grows during the run as on one machine (failure
records are annotated from it after each workload, orchestration.events.hits).
analysis.metrics.events reads it unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from models.errors import AitbError, LabError
from models.events import EVENT_RECORDS, EventAction, action_to_dict
from models.fanout import fan_out
from models.plan import LabPlan
from orchestration.cluster.control import Control, paramiko_errors, read_json_line
from testbed.live.trace_player import TracePlayer

__all__ = ["DRIVER", "Share", "split_actions", "merge_records", "RemoteEvents",
           "ClusterPlayer", "playing_cluster_events"]

DRIVER = "driver"  # the name of the driver's own share (slowdowns) in a record's machines
READY_TIMEOUT_S = 120.0  # Python start, attaching to the part, the player's checks
STOP_TIMEOUT_S = 60.0  # the change under way, the records of the actions not reached
RT_PRIORITY = 10  # SCHED_FIFO of each machine's player, as a local run's


@dataclasses.dataclass(frozen=True)
class Share:
    """The split of a run's actions: per machine its actions (``index`` set), the driver's,
    and per action index the machines whose records make its line (a machine twice when its
    part of the action is two actions, :func:`split_actions`)."""

    machines: dict[str, list[EventAction]]
    driver: list[EventAction]
    expected: dict[int, list[str]]


def _shaped_changes(changes: Mapping[str, Any], one_way_s: float) -> dict[str, Any]:
    out = dict(changes)
    if one_way_s > 0 and out.get("delay_s") is not None:
        out["delay_s"] = max(0.0, float(out["delay_s"]) - one_way_s)
    return out


def split_actions(actions: Sequence[EventAction], plan: LabPlan, where: Mapping[str, str],
                  one_way_s: Mapping[str, float]) -> Share:
    """Who plays what of ``actions`` (module docstring) on ``plan`` placed by ``where`` (node
    -> machine); ``one_way_s``: cut link -> the underlay's one-way delay taken out of its
    delay at bring-up (orchestration.cluster.underlay.account). Pure."""
    links = {lk.name: lk for lk in plan.links}
    machines: dict[str, list[EventAction]] = {}
    driver: list[EventAction] = []
    expected: dict[int, list[str]] = {}

    def give(machine: str, a: EventAction) -> None:
        machines.setdefault(machine, []).append(a)
        expected.setdefault(a.index, []).append(machine)  # type: ignore[arg-type]

    for i, a in enumerate(actions):
        if a.op in ("down", "up") and a.links:
            by: dict[str, list[str]] = {}
            for name in a.links:
                lk = links[name]
                for m in dict.fromkeys((where[lk.a.node], where[lk.b.node])):
                    by.setdefault(m, []).append(name)
            for m, names in by.items():
                give(m, dataclasses.replace(a, links=tuple(names), index=i))
        elif a.op == "shape" and a.directions:
            groups: dict[tuple[str, float], list[tuple[str, str]]] = {}
            for name, d in a.directions:
                lk = links[name]
                sender = lk.a.node if d == "a_to_b" else lk.b.node
                groups.setdefault((where[sender], one_way_s.get(name, 0.0)), []).append(
                    (name, d))
            for (m, ow), pairs in groups.items():
                give(m, dataclasses.replace(a, directions=tuple(pairs), index=i,
                                            changes=_shaped_changes(a.changes, ow)))
        else:  # a slowdown (the driver's controller), or an action that touches nothing
            driver.append(dataclasses.replace(a, index=i))
            expected.setdefault(i, []).append(DRIVER)
    return Share(machines, driver, expected)


_PER_MACHINE = ("links", "directions", "began_t_s", "applied_t_s", "acked_t_s", "late_s",
                "done", "error", "not_reached")


def _merge_done(into: dict[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """Lists joined (first seen first, once), mappings updated, other values: the first."""
    for k, v in more.items():
        have = into.get(k)
        if isinstance(have, list) and isinstance(v, list):
            into[k] = have + [x for x in v if x not in have]
        elif isinstance(have, dict) and isinstance(v, Mapping):
            into[k] = {**have, **v}
        elif k not in into:
            into[k] = list(v) if isinstance(v, list) else dict(v) if isinstance(
                v, Mapping) else v
    return into


def _one_machine(recs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A machine's entry from its records of one action (one, or two when its part was
    split): times spanning them, lists joined, errors joined."""
    out: dict[str, Any] = {}
    for r in recs:
        for k in ("links", "directions"):
            if k in r:
                out[k] = out.get(k, []) + [x for x in r[k] if x not in out.get(k, [])]
        for k, pick in (("began_t_s", min), ("applied_t_s", max), ("acked_t_s", max),
                        ("late_s", max)):
            if r.get(k) is not None:
                out[k] = pick(out[k], r[k]) if k in out else r[k]
        if "done" in r:
            out["done"] = _merge_done(out.get("done", {}), r["done"])
        if r.get("error"):
            out["error"] = "; ".join(filter(None, (out.get("error"), r["error"])))
        if r.get("not_reached"):
            out["not_reached"] = True
    return out


def merge_records(action: EventAction, index: int,
                  got: Sequence[tuple[str, Mapping[str, Any]]], missing: Sequence[str] = (),
                  nodes: Collection[str] | None = None) -> dict[str, Any]:
    """The one ``events.jsonl`` line of action ``action`` (number ``index`` of the run) from
    its machines' records ``got`` ((machine, record), the records' times after t0 on the
    driver's clock); ``missing``: machines that never reported it; ``nodes`` (if given): the
    lab's nodes, the only ones whose restored routes are kept (a cut link's proxy switch
    stands for nobody and has none). Module docstring. Pure."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    for m, r in got:
        if nodes is not None and isinstance(r.get("done", {}).get("routes"), Mapping):
            r = {**r, "done": {**r["done"], "routes": {
                k: v for k, v in r["done"]["routes"].items() if k in nodes}}}
        by.setdefault(m, []).append(r)
    machines = {m: _one_machine(rs) for m, rs in by.items()}
    planned = [r["planned_t_s"] for _, r in got if r.get("planned_t_s") is not None]
    rec: dict[str, Any] = {**action.describe(), "action": index,
                           "planned_t_s": min(planned) if planned else None}
    done: dict[str, Any] = {}
    for e in machines.values():
        if "done" in e:
            _merge_done(done, e["done"])
    if done:
        rec["done"] = done
    errors = [f"machine {m}: {e['error']}" for m, e in machines.items() if e.get("error")]
    errors += [f"machine {m}: no record of this action (its event player ended first)"
               for m in missing]
    applied = [e for e in machines.values() if e.get("applied_t_s") is not None]
    if applied:
        rec["began_t_s"] = min(e["began_t_s"] for e in applied if "began_t_s" in e)
        rec["applied_t_s"] = max(e["applied_t_s"] for e in applied)
        if rec["planned_t_s"] is not None:
            rec["late_s"] = round(rec["applied_t_s"] - rec["planned_t_s"], 6)
        acked = [e["acked_t_s"] for e in applied if e.get("acked_t_s") is not None]
        if acked:
            rec["acked_t_s"] = max(acked)
    if errors:
        rec["error"] = "; ".join(errors)
    elif any(e.get("not_reached") for e in machines.values()):
        rec["not_reached"] = True
    rec["machines"] = {m: {k: e[k] for k in _PER_MACHINE if k in e} for m, e in
                       machines.items()}
    return rec


class _Merger:
    """Writes an action's merged line once all its machines reported it (thread-safe);
    :meth:`close` writes the rest with the machines that did not."""

    def __init__(self, actions: Sequence[EventAction], expected: Mapping[int, list[str]],
                 path: Path, nodes: Collection[str]) -> None:
        self.actions, self.nodes = actions, nodes
        self.expected = dict(expected)  # an action's entry emptied once its line is written
        self.got: dict[int, list[tuple[str, Mapping[str, Any]]]] = {}
        self.applied = 0
        self._lock = threading.Lock()
        self._fh = path.open("a", encoding="utf-8")

    def add(self, machine: str, rec: Mapping[str, Any]) -> None:
        i = rec.get("action")
        if not isinstance(i, int) or i not in self.expected:
            return
        with self._lock:
            got = self.got.setdefault(i, [])
            got.append((machine, rec))
            if len(got) == len(self.expected[i]):
                self._write(i, got, ())

    def _write(self, i: int, got: Sequence[tuple[str, Mapping[str, Any]]],
               missing: Sequence[str]) -> None:
        line = merge_records(self.actions[i], i, got, missing, self.nodes)
        self.applied += "applied_t_s" in line and "error" not in line and \
            not line.get("not_reached")
        self._fh.write(json.dumps(line) + "\n")
        self._fh.flush()
        self.got[i] = []  # written (an empty list is never complete again)
        self.expected[i] = []

    def close(self) -> None:
        with self._lock:
            for i, want in sorted(self.expected.items()):
                if not want:
                    continue
                got = self.got.get(i, [])
                left = list(want)
                for m, _ in got:
                    left.remove(m)
                self._write(i, got, sorted(set(left)))
            self._fh.close()


class RemoteEvents:
    """``aitb topo events`` of part ``run_id`` on ``control``'s machine (protocol:
    orchestration.events.cluster_part): the constructor sends ``actions`` and returns once
    the machine is ready; records go to ``on_record(machine, record)`` from a thread. Raises
    LabError naming the machine with its error otherwise."""

    def __init__(self, control: Control, aitb: Sequence[str], run_id: str,
                 actions: Sequence[EventAction],
                 on_record: Callable[[str, Mapping[str, Any]], None]) -> None:
        self.machine = control.machine.name
        self.where = f"machine {self.machine}: events of part {run_id}"
        self.on_record = on_record
        self.summary: dict[str, Any] | None = None
        self._send_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        transport = control.client.get_transport()
        if transport is None or not transport.is_active():
            raise LabError(f"{self.where}: SSH connection lost")
        try:
            self.chan = transport.open_session(timeout=15)
        except (OSError, EOFError, paramiko_errors()) as exc:
            raise LabError(f"{self.where}: {type(exc).__name__}: {exc}") from None
        try:
            self.chan.settimeout(READY_TIMEOUT_S)
            self.chan.exec_command(shlex.join([*aitb, "topo", "events", run_id]))
            self.out = self.chan.makefile("rb")
            self._send({"actions": [action_to_dict(a) for a in actions],
                        "rt_priority": RT_PRIORITY})
            first = self._line()
        except BaseException as exc:  # closed: the part reads end of file and exits
            self.chan.close()         # (a part slow to get ready would wait for ever)
            if isinstance(exc, OSError | EOFError | paramiko_errors()):
                raise LabError(f"{self.where}: {type(exc).__name__}: {exc}") from None
            raise
        if first.get("ready") is not True:
            self.chan.close()
            raise LabError(f"{self.where}: {first.get('error') or first}")
        self.chan.settimeout(None)

    def _send(self, msg: Mapping[str, Any]) -> None:
        with self._send_lock:
            self.chan.sendall((json.dumps(msg) + "\n").encode())

    def _line(self) -> dict[str, Any]:
        return read_json_line(self.out, self.chan, self.where)

    def start(self, t0_s: float) -> None:
        """Start playing from ``t0_s`` (the machine's clock); records flow from now on."""
        self._reader = threading.Thread(target=self._read, name=f"aitb-events-{self.machine}",
                                        daemon=True)
        self._reader.start()
        try:
            self._send({"start": t0_s})
        except (OSError, EOFError, paramiko_errors()) as exc:
            raise LabError(f"{self.where}: start: {type(exc).__name__}: {exc}") from None

    def _read(self) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko_errors()):
            for raw in self.out:
                try:
                    msg = json.loads(raw)
                except ValueError:
                    continue
                if "record" in msg:
                    self.on_record(self.machine, msg["record"])
                elif "summary" in msg:
                    self.summary = msg["summary"]

    def anchor(self, name: str, t_s: float, iteration: int | None) -> str | None:
        """Tell it workload ``name`` (``iteration``) started at ``t_s`` (its clock); None,
        or why the message could not be sent (a lost machine)."""
        try:
            self._send({"anchor": name, "iteration": iteration, "t": t_s})
        except (OSError, EOFError, paramiko_errors()) as exc:
            return f"{self.where}: anchor {name}: {type(exc).__name__}: {exc}"
        return None

    def stop(self) -> dict[str, Any]:
        """Stop it; its summary (``applied``, ``errors``, ``rt_error``) once every record
        came. Raises LabError naming the machine if it does not answer within
        STOP_TIMEOUT_S or the channel fails."""
        try:
            self._send({"stop": True})
            self.chan.shutdown_write()
            if self._reader is not None:
                self._reader.join(STOP_TIMEOUT_S)
            self.chan.status_event.wait(STOP_TIMEOUT_S)
        except (OSError, EOFError, paramiko_errors()) as exc:
            raise LabError(f"{self.where}: stopping: {type(exc).__name__}: {exc}") from None
        finally:
            self.chan.close()
        if self.summary is None:
            raise LabError(f"{self.where}: it ended without its summary")
        return self.summary

    def close(self) -> None:
        """Close the channel (the part reads end of file, stops and exits)."""
        self.chan.close()


class ClusterPlayer:
    """What the runner's replay uses of a player (testbed.live.trace_player.TracePlayer's
    ``t0``, ``anchor``, ``attach``) for a cluster: anchors moved onto each machine's clock
    and sent to the machines that wait for them; the driver's own player (slowdowns) gets
    them and the controllers."""

    def __init__(self, t0: float, remotes: Mapping[str, RemoteEvents],
                 offsets_s: Mapping[str, float], waiting: Mapping[str, set[Any]],
                 local: TracePlayer | None) -> None:
        self.t0 = t0
        self.remotes, self.offsets_s, self.local = remotes, offsets_s, local
        self.waiting = {m: set(w) for m, w in waiting.items()}
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def anchor(self, name: str, t: float | None = None, iteration: int | None = None) -> int:
        """Workload ``name`` (``iteration``) started at ``t`` (driver clock, default now):
        sent to every machine with actions anchored there (the first start counts); the
        number of machines told, plus the driver's player's count. Thread-safe."""
        at = time.time() if t is None else t
        key = (name, iteration)
        with self._lock:
            told = [m for m, w in self.waiting.items() if key in w]
            for m in told:
                self.waiting[m].discard(key)
        for m in told:
            why = self.remotes[m].anchor(name, at + self.offsets_s[m], iteration)
            if why is not None:
                self.errors.append(why)
        return len(told) + (self.local.anchor(name, at, iteration) if self.local else 0)

    def attach(self, workload: str, controller: Any) -> None:
        """The driver's player gets workload ``workload``'s controller (None: it ended)."""
        if self.local is not None:
            self.local.attach(workload, controller)


@contextmanager
def playing_cluster_events(lab: Any, actions: Sequence[EventAction], run_dir: Path,
                           manifest: dict[str, Any], progress: Callable[[str], None]
                           ) -> Iterator[ClusterPlayer | None]:
    """Play ``actions`` on ``lab`` (an orchestration.cluster.lab.ClusterLab that is up)
    around the body (module docstring; nothing without actions); writes
    ``run_dir/events.jsonl`` and the manifest's ``events`` (t0_unix_s, records, actions,
    applied, errors, per machine its actions and rt_error). Raises LabError naming the
    machine whose player failed to start (before the body; the others are stopped), and
    after the body when an action failed or a machine's player did."""
    if not actions:
        yield None
        return
    d = lab.deployed
    assert d is not None
    one_way = {c["link"]: float(c.get("underlay_one_way_s") or 0.0) for c in d.cut_links}
    share = split_actions(actions, lab.plan, lab.where, one_way)
    merger = _Merger(actions, share.expected, run_dir / EVENT_RECORDS,
                     frozenset(n.name for n in lab.plan.nodes))
    remotes: dict[str, RemoteEvents] = {}

    def start(name: str) -> None:
        remotes[name] = RemoteEvents(lab.controls[name], lab.cluster.aitb, d.run_ids[name],
                                     share.machines[name], merger.add)

    try:
        fan_out(start, list(share.machines), inline_single=True)
    except BaseException:
        for r in remotes.values():
            r.close()
        merger.close()
        raise
    local = None
    if share.driver:
        local = TracePlayer(lab, run_dir / "link_trace.jsonl", traces=(), events=share.driver,
                            events_out=Path(os.devnull),
                            on_record=lambda rec: merger.add(DRIVER, rec))
    t0 = time.time()
    offsets = {m: d.offsets[m].offset_s for m in remotes}
    try:
        for m, r in remotes.items():
            r.start(t0 + offsets[m])
    except BaseException:  # the ones started would play on until the part's teardown
        for r in remotes.values():
            r.close()
        merger.close()
        raise
    if local is not None:
        local.start(t0)
    waiting = {m: {(a.anchor, a.iteration) for a in acts if a.anchor is not None}
               for m, acts in share.machines.items()}
    player = ClusterPlayer(t0, remotes, offsets, waiting, local)
    info = manifest["events"] = {
        "t0_unix_s": t0, "records": EVENT_RECORDS, "actions": len(actions),
        "machines": {m: {"actions": len(a)} for m, a in share.machines.items()}}
    if share.driver:
        info["machines"][DRIVER] = {"actions": len(share.driver)}
    progress(f"{len(actions)} event actions over {len(remotes)} machine(s): "
             + ", ".join(f"{m} {len(a)}" for m, a in share.machines.items()))
    errors: list[str] = []
    try:
        yield player
    finally:
        if local is not None:
            local.stop()
            errors += local.errors
        live = [m for m in remotes if m not in lab.lost]
        for m in remotes:
            if m not in live:
                remotes[m].close()

        def stop(name: str) -> None:
            try:
                s = remotes[name].stop()
            except AitbError as exc:
                errors.append(str(exc))
                return
            info["machines"][name]["rt_error"] = s.get("rt_error")
            errors.extend(f"machine {name}: {e}" for e in s.get("errors", []))

        fan_out(stop, live, inline_single=True)
        merger.close()
        errors += player.errors
        info.update(applied=merger.applied, errors=list(errors))
    if errors:
        raise LabError("event: " + "; ".join(errors))
