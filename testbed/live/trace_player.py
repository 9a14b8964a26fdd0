"""Play link traces on a live lab: every step of every :class:`models.trace.LinkTrace` of the plan
is applied at its time through :meth:`testbed.lab.lab.Lab.set_shaping` (a rate step changes the
HTB class in place; delay and loss steps change the delay line), looped or once, from an
absolute start time (``time.time()``, CLOCK_REALTIME), until :meth:`TracePlayer.stop`.

Each step is one line of ``link_trace.jsonl``: link, direction, step index, pass, planned
time, when the change began and when set_shaping returned (read-back included; seconds after
the start), and the values. One thread applies the steps of all traces in time order. When
it falls behind (a change takes longer than the gap to the next step: bench/trace_timing.py),
a direction's steps that are already superseded by a later due one are recorded as
``skipped`` and not applied, so lateness does not pile up.

The same thread plays an experiment's ``events:`` (:class:`models.events.EventAction`: links
down and up through testbed/live/faults.py, reshaping through set_shaping), one scheduler on one
clock: each action is one line of ``events.jsonl`` with its planned, began and applied time
(seconds after the start; applied = done and read back; a link up also has ``acked_t_s``,
when the kernel had acked the links and the restored routes, before the read-back waited for
the carrier: the time the change took effect, which bench/event_timing.py's target is on).
Actions anchored to a workload are scheduled when the runner says that workload (or one of
its iterations) started (:meth:`TracePlayer.anchor`). Actions on agents (a straggler's
``slowdown``, a node's agents frozen, continued or killed) go to the controllers the runner
attaches while their workloads run (:meth:`TracePlayer.attach`; duck-typed: ``set_slowdown``
and ``signal_agent`` of traffic_gen's Controller); a slowdown of a workload not running yet
is kept and sent when it attaches. A ramp step (``ramp`` (k, n)) sets every ramped value
(rate, delay, jitter, loss, corrupt) to start + k/n x (target - start), start being the
direction's shaping when step 1 was applied; other keys switch at step 1.
Events are never skipped: one that is late is applied late and its record says by how
much; a failed one is recorded and the others still run. Before the thread waits for a link
action's instant, the action is made ready (:meth:`testbed.lab.lab.Lab.prepare_links`: names,
ifindexes, encoded messages), so that at the instant it only sends; it never starts before
its time. The last millisecond before an instant is spun on the clock (a sleeping thread
woke up to a few 100 us late here), and from then until the action's record is written
Python's garbage collector is off (collections in this thread took 0.3-1 ms, one 88 ms:
bench/event_timing.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import heapq
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from models.errors import AitbError, LabError
from models.events import EventAction
from models.shaping import Shaping
from models.trace import LinkTrace, PlannedChange, planned_changes

if TYPE_CHECKING:
    from testbed.lab.lab import Lab

__all__ = ["PlannedChange", "planned_changes", "TracePlayer", "TRACE_RECORDS", "SPIN_S"]

TRACE_RECORDS = "link_trace.jsonl"
SPIN_S = 0.001  # the last part of a wait spun on the clock instead of slept


def _values(s: Shaping) -> dict[str, Any]:
    return {"rate_bps": s.rate_bps, "delay_s": s.delay_s, "loss_pct": s.loss_pct}


def _event_values(s: Shaping) -> dict[str, Any]:
    return {**_values(s), "jitter_s": s.jitter_s, "corrupt_pct": s.corrupt_pct}


RAMPED = ("rate_bps", "delay_s", "jitter_s", "loss_pct", "corrupt_pct")
AGENT_SIGNALS = {"freeze": signal.SIGSTOP, "kill": signal.SIGKILL, "thaw": signal.SIGCONT}


def ramp_step(start: Shaping, target: Shaping, k: int, n: int) -> Shaping:
    """Step ``k`` of ``n`` from ``start`` to ``target``: every :data:`RAMPED` value set in
    both at start + k/n x (target - start) (a rate rounded to bit/s), the rest as
    ``target``. Raises UnitError if the mix is invalid (it is not when both ends are: the
    checks are linear)."""
    frac = k / n
    mixed: dict[str, Any] = {}
    for f in RAMPED:
        a, b = getattr(start, f), getattr(target, f)
        if a is not None and b is not None and a != b:
            v = a + (b - a) * frac
            mixed[f] = max(1, round(v)) if f == "rate_bps" else v
    return target.with_changes(**mixed) if mixed and k < n else target


class TracePlayer:
    """Applies the traces of ``lab.plan`` (or ``traces``) and the ``events`` from :meth:`start`
    to :meth:`stop`, writing one record per applied step to ``out`` (``link_trace.jsonl`` of
    the run) and one per event action to ``events_out`` (``events.jsonl``).

    clock: seconds since the epoch (default :func:`time.time`, the run's clock); sleep: waits
    that many seconds (default: until then, :meth:`stop` or a new anchor; tests pass a fake).
    A failed trace change (LabError from set_shaping) ends the playing; a failed event action
    does not; both are in :attr:`errors` and in the records. rt_priority: run the thread at
    SCHED_FIFO of that priority (1-99; root), so that a loaded host's other processes do not
    delay its wake-ups (bench/event_timing.py); where the kernel refuses, :attr:`rt_error`
    says why and the thread plays at normal priority. on_record: also given every event
    record (a dict, as written to ``events_out``; from the player's thread, and from
    :meth:`stop` for the actions not reached): a cluster machine's part sends them to the
    driver (orchestration/events/cluster_part.py). Side effects: a thread; changes
    the lab's links, routes, qdiscs and plan.json; writes ``out`` and ``events_out``.
    """

    def __init__(self, lab: Lab, out: Path, traces: Sequence[LinkTrace] | None = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] | None = None,
                 events: Sequence[EventAction] = (), events_out: Path | None = None,
                 rt_priority: int | None = None,
                 on_record: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.lab = lab
        self.on_record = on_record
        self.rt_priority = rt_priority
        self.rt_error: str | None = None  # why SCHED_FIFO could not be set, if it could not
        self.traces = tuple(lab.plan.traces if traces is None else traces)
        self.out = out
        self.events = tuple(events)
        self.events_out = events_out if events_out is not None else out.with_name(
            "events.jsonl")
        self.clock = clock
        self._sleep = sleep
        self.t0: float | None = None
        self.applied = 0
        self.skipped = 0
        self.events_applied = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop and anchor
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._queue: list[tuple[float, int, EventAction]] = []  # (t since t0, seq, action)
        self._seq = itertools.count()
        self._unanchored = {(a.anchor, a.iteration) for a in self.events
                            if a.anchor is not None}
        self._begin_shaping: dict[tuple[str, str], Shaping] = {}
        self._ramp_from: dict[tuple[int, str, str], Shaping] = {}
        self._controllers: dict[str, Any] = {}  # workload -> its running controller
        self._slowdowns: dict[str, dict[int, float]] = {}  # workload -> rank -> factor
        self._watches: list[Any] = []  # convergence watches of a routing: frr lab
        self._prepared: dict[int, Any] = {}  # queue seq -> its testbed.live.faults.LinkChange
        self._ready: Any = None  # the LinkChange of the action being applied, if prepared

    def attach(self, workload: str, controller: Any) -> None:
        """Workload ``workload``'s agents are up under ``controller`` (None: it ended):
        agent actions reach them from now on; slowdowns set before are sent now. A failed
        send is in :attr:`errors`. Thread-safe."""
        with self._lock:
            if controller is None:
                self._controllers.pop(workload, None)
                return
            self._controllers[workload] = controller
            pending = dict(self._slowdowns.get(workload, {}))
        for rank, factor in sorted(pending.items()):
            try:
                controller.set_slowdown(rank, factor)
            except (OSError, KeyError) as exc:
                self.errors.append(f"slowdown of {workload} rank {rank}: {exc}")

    def _base(self) -> dict[tuple[str, str], Shaping]:
        return {(lk.name, d): getattr(lk, d) for lk in self.lab.plan.links
                for d in ("a_to_b", "b_to_a")}

    def _check_shaping(self, where: str, link: str, direction: str, shaping: Shaping) -> None:
        from testbed.delay import native
        from testbed.lab.lab import missing_kernel_features

        lk = next(x for x in self.lab.plan.links if x.name == link)
        if self.lab.layout.lines.get((link, direction)) == native.NAME:
            try:
                native.check_change(self.lab, lk, direction, shaping)
            except LabError as exc:
                raise LabError(f"{where}: {exc}") from None
            return
        probe = dataclasses.replace(self.lab.plan, traces=(), links=(
            dataclasses.replace(lk, **{direction: shaping}),))
        missing = missing_kernel_features(probe)
        if missing:
            raise LabError(f"{where} sets delay or loss, which needs "
                           f"{', '.join(missing)}; this kernel lacks it")

    def check(self) -> None:
        """Raise LabError naming the trace or event when a step needs what this lab cannot
        do: a delay line the kernel lacks, or a change the direction's native delay line
        refuses (one that had no delay at bring-up, a refused key). Probes the kernel
        (root)."""
        base = self._base()
        for tr in self.traces:
            netem = next((c.shaping for c in planned_changes([tr], base, until_s=tr.period_s)
                          if c.shaping.needs_netem), None)
            if netem is not None:  # rate steps only: an HTB class, which every lab has
                self._check_shaping(f"trace {tr.file} ({tr.link} {tr.direction})", tr.link,
                                    tr.direction, netem)
        for a in self.events:
            for link, direction in a.directions if a.changes else ():
                new = base[(link, direction)].with_changes(**a.changes)
                if new.needs_netem:
                    self._check_shaping(f"events[{a.event}] ({a.kind} {link} {direction})",
                                        link, direction, new)

    def start(self, t0: float | None = None) -> float:
        """Start playing with step time 0 at ``t0`` (seconds since the epoch; default now).
        Returns t0. Without traces and events, does nothing."""
        self.t0 = self.clock() if t0 is None else t0
        self._begin_shaping = self._base()
        with self._lock:
            for a in self.events:
                if a.anchor is None:
                    self._push(a.t_s, a)
        if self.traces or self.events:
            self._thread = threading.Thread(target=self._run, name="aitb-trace", daemon=True)
            self._thread.start()
        return self.t0

    def _push(self, t_s: float, action: EventAction) -> None:
        heapq.heappush(self._queue, (t_s, next(self._seq), action))  # ties: file order

    def anchor(self, name: str, t: float | None = None, iteration: int | None = None) -> int:
        """Workload ``name`` started (``iteration`` None: its first phase; else that
        iteration) at ``t`` (seconds since the epoch; default now): schedule the event
        actions anchored to it. Returns how many; 0 for one without events or already
        anchored (the first start counts). Thread-safe."""
        assert self.t0 is not None, "anchor() after start()"
        at = (self.clock() if t is None else t) - self.t0
        key = (name, iteration)
        with self._lock:
            if key not in self._unanchored:
                return 0
            self._unanchored.discard(key)
            mine = [a for a in self.events if (a.anchor, a.iteration) == key]
            for a in mine:
                self._push(at + a.t_s, a)
        self._wake.set()
        return len(mine)

    def stop(self, timeout_s: float = 30.0, read_back: bool = True) -> None:
        """Stop after the change under way (waits at most ``timeout_s``: one set_shaping),
        record the event actions not reached (``not_reached``), then (``read_back``) read
        back every traced direction once and record the lab's plan.json (the steps
        themselves skip the read-back: it took most of a change's time here)."""
        self._stop.set()
        self._wake.set()
        if self._thread is None:
            return
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.errors.append(f"trace player still busy after {timeout_s:g} s")
            return
        for w in self._watches:  # each records its result (converged or not) as it ends
            w.stop(timeout_s)
        self._record_not_reached()
        if not read_back:
            return
        current = self._base()
        for tr in self.traces:
            try:
                self.lab.set_shaping(tr.link, tr.direction, current[(tr.link, tr.direction)])
            except AitbError as exc:
                self.errors.append(f"read-back of {tr.link} {tr.direction}: {exc}")

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until every step has been applied (traces that do not loop, events whose
        anchors all started) or playing ended; True when it has."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self._thread is None or not self._thread.is_alive()

    def __enter__(self) -> TracePlayer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_until(self, target: float, wakeable: bool = False, spin_s: float = SPIN_S
                    ) -> bool:
        """Wait until ``target`` on the clock, spinning the last ``spin_s``; True when
        stopped first or (``wakeable``) woken by a new anchor."""
        while (left := target - self.clock()) > 0:
            if self._sleep is not None:
                self._sleep(left)
            elif left > spin_s:
                if self._wake.wait(left - spin_s) and (self._stop.is_set() or wakeable):
                    break
                continue
            if self._stop.is_set() or (wakeable and self._wake.is_set()):
                break
        return self._stop.is_set() or (wakeable and self._wake.is_set())

    def _due(self, it: Iterator[PlannedChange], first: PlannedChange
             ) -> tuple[list[PlannedChange], PlannedChange | None]:
        """``first`` and every later change already due; the next one not yet due."""
        assert self.t0 is not None
        due, nxt = [first], next(it, None)
        while nxt is not None and self.t0 + nxt.t_s <= self.clock():
            due.append(nxt)
            nxt = next(it, None)
        return due, nxt

    def _next_event(self) -> tuple[float, int, EventAction] | None:
        with self._lock:
            self._wake.clear()
            return self._queue[0] if self._queue else None

    def _run(self) -> None:
        assert self.t0 is not None
        if self.rt_priority is not None:
            try:  # the calling thread only (pid 0 = this task)
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.rt_priority))
            except OSError as exc:
                self.rt_error = f"SCHED_FIFO {self.rt_priority}: {exc.strerror}"
        it = planned_changes(self.traces, self._base())
        pending = next(it, None)
        with self.out.open("a", encoding="utf-8") if self.traces else _Null() as f, \
                self.events_out.open("a", encoding="utf-8") if self.events else _Null() as g:
            while not self._stop.is_set():
                ev = self._next_event()
                if ev is not None and (pending is None or ev[0] <= pending.t_s):
                    self._prepare(ev[1], ev[2])  # off the clock: at the instant, only sends
                    at = self.t0 + ev[0]
                    if self._wait_until(at - SPIN_S, wakeable=True, spin_s=0.0):
                        continue  # stopped, or an anchor may have brought an earlier one
                    with _no_gc():  # a collection in the spin or the action delays it
                        if self._wait_until(at, wakeable=True):
                            continue
                        with self._lock:
                            heapq.heappop(self._queue)
                        self._apply_event(ev[0], ev[2], g, self._prepared.pop(ev[1], None))
                    continue
                if pending is None:
                    with self._lock:
                        waiting = bool(self._unanchored)
                    if not waiting:
                        return
                    self._wake.wait()
                    continue
                if self._wait_until(self.t0 + pending.t_s, wakeable=bool(self.events)):
                    continue
                due, pending = self._due(it, pending)
                # behind schedule: a direction's latest due change holds all its values, so
                # the ones before it are recorded as skipped instead of applied late
                latest = {(c.link, c.direction): c for c in due}
                for c in due:
                    if latest[(c.link, c.direction)] is not c:
                        self._record(f, c, None, None, skipped=True)
                        self.skipped += 1
                    elif not self._apply(c, f):
                        return

    def _record(self, f: IO[str], change: PlannedChange, began: float | None,
                done: float | None, error: str | None = None, skipped: bool = False) -> None:
        assert self.t0 is not None
        rec: dict[str, Any] = {"link": change.link, "direction": change.direction,
                               "step": change.step, "loop": change.loop,
                               "planned_t_s": change.t_s}
        if skipped:
            rec["skipped"] = True
        else:
            assert began is not None and done is not None
            rec.update(began_t_s=round(began - self.t0, 6), applied_t_s=round(done - self.t0, 6))
        rec.update(_values(change.shaping))
        if error:
            rec["error"] = error
        f.write(json.dumps(rec) + "\n")
        f.flush()

    def _apply(self, change: PlannedChange, f: IO[str]) -> bool:
        began = self.clock()
        error = None
        try:
            self.lab.set_shaping(change.link, change.direction, change.shaping,
                                 read_back=False)
        except AitbError as exc:
            error = f"{change.link} {change.direction} at {change.t_s:g} s: {exc}"
            self.errors.append(error)
        self._record(f, change, began, self.clock(), error)
        self.applied += error is None
        return error is None

    def _prepare(self, seq: int, a: EventAction) -> None:
        """Make the links of down/up action ``a`` (queue entry ``seq``) ready before its
        instant (:meth:`testbed.lab.lab.Lab.prepare_links`, where the lab has it): names
        checked, ifindexes looked up, messages encoded. A refusal here is not recorded: the
        action then goes through set_links at its instant, which raises the same error into
        its record."""
        prepare = getattr(self.lab, "prepare_links", None)
        if prepare is None or a.op not in ("down", "up") or not a.links or \
                seq in self._prepared:
            return
        try:
            self._prepared[seq] = prepare(a.links, a.op == "up", node=a.node)
        except AitbError:
            pass

    def _do_event(self, a: EventAction) -> dict[str, Any]:
        prepared, self._ready = self._ready, None
        if a.op == "slowdown":
            return self._slowdown(a)
        if a.op in ("down", "up"):
            if prepared is not None:
                done = prepared.apply()
            else:
                done = self.lab.set_links(a.links, a.op == "up", node=a.node) if a.links \
                    else {"links": []}
            if a.agent is not None and a.node is not None:
                done["agents"] = self._signal_agents(a.node, a.agent)
            return done
        done = {}
        current = self._base()
        for link, direction in a.directions:
            if a.restore:
                new = self._begin_shaping[(link, direction)]
            elif a.ramp is not None:
                key = (a.event, link, direction)
                if a.ramp[0] == 1 or key not in self._ramp_from:
                    self._ramp_from[key] = current[(link, direction)]
                start = self._ramp_from[key]
                new = ramp_step(start, start.with_changes(**a.changes), *a.ramp)
            else:
                new = current[(link, direction)].with_changes(**a.changes)
            self.lab.set_shaping(link, direction, new, read_back=False)
            done[f"{link} {direction}"] = _event_values(new)
        return {"shaping": done}

    def _slowdown(self, a: EventAction) -> dict[str, Any]:
        assert a.workload is not None and a.rank is not None and a.factor is not None
        with self._lock:
            self._slowdowns.setdefault(a.workload, {})[a.rank] = a.factor
            ctl = self._controllers.get(a.workload)
        if ctl is None:  # sent when its agents are up (attach)
            return {"sent": False, "pending": True}
        try:
            node = ctl.set_slowdown(a.rank, a.factor)
        except (OSError, KeyError) as exc:
            raise LabError(f"rank {a.rank} of workload {a.workload}: the slowdown could not "
                           f"reach its agent: {exc}") from None
        return {"sent": True, "node": node}

    def _signal_agents(self, node: str, action: str) -> dict[str, Any]:
        """``action`` (freeze, kill, thaw) on the agent of ``node`` of every running
        workload: workload -> pid signalled (none running: empty)."""
        sig = AGENT_SIGNALS[action]
        with self._lock:
            ctls = dict(self._controllers)
        pids = {}
        for name, ctl in sorted(ctls.items()):
            try:
                pid = ctl.signal_agent(node, sig)
            except OSError as exc:
                raise LabError(f"node {node}: {action} of the agent of workload {name}: "
                               f"{exc.strerror}") from None
            if pid is not None:
                pids[name] = pid
        return {"signal": signal.Signals(sig).name, "pids": pids}

    def _apply_event(self, t_s: float, a: EventAction, g: IO[str], prepared: Any = None
                     ) -> None:
        assert self.t0 is not None
        began = self.clock()
        began_mono = time.monotonic()
        rec: dict[str, Any] = {**a.describe(), "planned_t_s": round(t_s, 6)}
        try:
            self._ready = prepared
            rec["done"] = self._do_event(a)
            self.events_applied += 1
            if a.op in ("down", "up"):
                self._watch(a, t_s, began_mono)
        except AitbError as exc:
            rec["error"] = f"events[{a.event}] {a.kind} ({a.op}): {exc}"
            self.errors.append(rec["error"])
        done = self.clock()
        rec.update(began_t_s=round(began - self.t0, 6), applied_t_s=round(done - self.t0, 6),
                   late_s=round(done - self.t0 - t_s, 6))
        acked = rec.get("done", {}).pop("acked_unix_s", None)
        if acked is not None:  # a link up: routes acked, then read back (carrier awaited)
            rec["acked_t_s"] = round(acked - self.t0, 6)
        g.write(json.dumps(rec) + "\n")
        g.flush()
        if self.on_record is not None:
            self.on_record(rec)

    def _watch(self, a: EventAction, t_s: float, began: float) -> None:
        """For a lab whose routers run FRR: record, once known, how long after the event
        each router's forwarding table took to be stable again (one ``events.jsonl`` line
        with ``record: convergence``, the action's event/kind/op/step and
        ``convergence_s``, see :class:`testbed.routing.frr.ConvergenceWatch`)."""
        watch = getattr(self.lab, "watch_convergence", None)
        if watch is None:
            return

        def done(result: dict[str, Any]) -> None:
            rec = {"record": "convergence", **a.describe(), "planned_t_s": round(t_s, 6),
                   **result}
            if "error" in result:
                self.errors.append(f"events[{a.event}] {a.kind} ({a.op}): {result['error']}")
            line = (json.dumps(rec) + "\n").encode()
            fd = os.open(self.events_out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:  # one O_APPEND write: the player thread appends its lines meanwhile
                os.write(fd, line)
            finally:
                os.close(fd)

        w = watch(began, done)
        if w is not None:
            self._watches.append(w)

    def _record_not_reached(self) -> None:
        """Event actions still queued or never anchored when playing stopped: one record
        each (``not_reached``), so events.jsonl accounts for every action of the file."""
        with self._lock:
            left = [(t, a) for t, _, a in sorted(self._queue)] + [
                (None, a) for a in self.events if (a.anchor, a.iteration) in self._unanchored]
            self._queue.clear()
        if not left:
            return
        with self.events_out.open("a", encoding="utf-8") as g:
            for t, a in left:
                rec = {**a.describe(), "planned_t_s": None if t is None else round(t, 6),
                       "not_reached": True}
                g.write(json.dumps(rec) + "\n")
                if self.on_record is not None:
                    self.on_record(rec)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Python's garbage collector off inside (for the whole process: one action, a few ms),
    back on after if it was on; the garbage of the action is collected afterwards. Measured
    with bench/event_timing.py: collections in the player thread took 0.3-1 ms (generations
    0 and 1), one of generation 2 88 ms, each landing inside whatever action was under way."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Null:
    """A file-like context that is never written (no traces, or no events)."""

    def __enter__(self) -> Any:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
