"""Play link traces on a live lab: every step of every :class:`aitb.trace.LinkTrace` of the plan
is applied at its time through :meth:`testbed.lab.Lab.set_shaping` (a rate step changes the
HTB class in place; delay and loss steps change the delay line), looped or once, from an
absolute start time (``time.time()``, CLOCK_REALTIME), until :meth:`TracePlayer.stop`.

Each step is one line of ``link_trace.jsonl``: link, direction, step index, pass, planned
time, when the change began and when set_shaping returned (read-back included; seconds after
the start), and the values. One thread applies the steps of all traces in time order. When
it falls behind (a change takes longer than the gap to the next step: bench/trace_timing.py),
a direction's steps that are already superseded by a later due one are recorded as
``skipped`` and not applied, so lateness does not pile up.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from aitb.errors import AitbError, LabError
from aitb.shaping import Shaping
from aitb.trace import LinkTrace, TraceStep

if TYPE_CHECKING:
    from testbed.lab import Lab

__all__ = ["PlannedChange", "planned_changes", "TracePlayer", "TRACE_RECORDS"]

TRACE_RECORDS = "link_trace.jsonl"


@dataclass(frozen=True, slots=True)
class PlannedChange:
    """Set ``direction`` of ``link`` to ``shaping`` at ``t_s`` seconds after the start; the
    ``step``-th row of its trace in pass ``loop`` (0 = the first)."""

    link: str
    direction: str
    t_s: float
    step: int
    loop: int
    shaping: Shaping


def _changes(step: TraceStep) -> dict[str, Any]:
    out: dict[str, Any] = {k: v for k, v in (("rate_bps", step.rate_bps),
                                             ("delay_s", step.delay_s),
                                             ("loss_pct", step.loss_pct)) if v is not None}
    if step.loss_pct is not None:
        out["loss_gemodel"] = None  # a traced random loss replaces a burst model
    return out


def planned_changes(traces: Sequence[LinkTrace], base: Mapping[tuple[str, str], Shaping],
                    until_s: float = float("inf")) -> Iterator[PlannedChange]:
    """Every change of ``traces`` in time order (ties: plan order), up to ``until_s`` seconds;
    endless for a looped trace when ``until_s`` is infinite. ``base``: the shaping of each
    (link, direction) before its first step; a step keeps the values it does not set. A row
    that changes nothing (a trace's closing time-only row) is left out. Pure."""
    current = {(t.link, t.direction): base[(t.link, t.direction)] for t in traces}
    heap = [(t.steps[0].t_s, k, 0, 0) for k, t in enumerate(traces)]
    heapq.heapify(heap)
    while heap:
        t_s, k, i, loop = heapq.heappop(heap)
        if t_s > until_s:
            return
        tr = traces[k]
        if i + 1 < len(tr.steps):
            heapq.heappush(heap, (loop * tr.period_s + tr.steps[i + 1].t_s, k, i + 1, loop))
        elif tr.loop:
            heapq.heappush(heap, ((loop + 1) * tr.period_s + tr.steps[0].t_s, k, 0, loop + 1))
        key = (tr.link, tr.direction)
        new = current[key].with_changes(**_changes(tr.steps[i]))
        if new != current[key]:
            current[key] = new
            yield PlannedChange(tr.link, tr.direction, t_s, i, loop, new)


def _values(s: Shaping) -> dict[str, Any]:
    return {"rate_bps": s.rate_bps, "delay_s": s.delay_s, "loss_pct": s.loss_pct}


class TracePlayer:
    """Applies the traces of ``lab.plan`` (or ``traces``) from :meth:`start` to :meth:`stop`,
    writing one record per applied step to ``out`` (``link_trace.jsonl`` of the run).

    clock: seconds since the epoch (default :func:`time.time`, the run's clock); sleep: waits
    that many seconds (default: until then or :meth:`stop`; tests pass a fake). A failed
    change (LabError from set_shaping) ends the playing; it is in :attr:`errors` and in the
    records. Side effects: a thread; changes the lab's qdiscs and plan.json; writes ``out``.
    """

    def __init__(self, lab: Lab, out: Path, traces: Sequence[LinkTrace] | None = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] | None = None) -> None:
        self.lab = lab
        self.traces = tuple(lab.plan.traces if traces is None else traces)
        self.out = out
        self.clock = clock
        self._sleep = sleep
        self.t0: float | None = None
        self.applied = 0
        self.skipped = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _base(self) -> dict[tuple[str, str], Shaping]:
        return {(lk.name, d): getattr(lk, d) for lk in self.lab.plan.links
                for d in ("a_to_b", "b_to_a")}

    def check(self) -> None:
        """Raise LabError naming the trace when a step needs what this lab cannot do: a delay
        line the kernel lacks, or a change the direction's native delay line refuses (one
        that had no delay at bring-up, a refused key). Probes the kernel (root)."""
        from testbed.delay_backends import native
        from testbed.lab import missing_kernel_features

        base = self._base()
        for tr in self.traces:
            netem = next((c.shaping for c in planned_changes([tr], base, until_s=tr.period_s)
                          if c.shaping.needs_netem), None)
            if netem is None:  # rate steps only: an HTB class, which every lab has
                continue
            lk = next(x for x in self.lab.plan.links if x.name == tr.link)
            where = f"trace {tr.file} ({tr.link} {tr.direction})"
            if self.lab.layout.lines.get((tr.link, tr.direction)) == native.NAME:
                try:
                    native.check_change(self.lab, lk, tr.direction, netem)
                except LabError as exc:
                    raise LabError(f"{where}: {exc}") from None
                continue
            probe = dataclasses.replace(self.lab.plan, traces=(), links=(
                dataclasses.replace(lk, **{tr.direction: netem}),))
            missing = missing_kernel_features(probe)
            if missing:
                raise LabError(f"{where} sets delay or loss, which needs "
                               f"{', '.join(missing)}; this kernel lacks it")

    def start(self, t0: float | None = None) -> float:
        """Start playing with step time 0 at ``t0`` (seconds since the epoch; default now).
        Returns t0. Without traces, does nothing."""
        self.t0 = self.clock() if t0 is None else t0
        if self.traces:
            self._thread = threading.Thread(target=self._run, name="aitb-trace", daemon=True)
            self._thread.start()
        return self.t0

    def stop(self, timeout_s: float = 30.0, read_back: bool = True) -> None:
        """Stop after the change under way (waits at most ``timeout_s``: one set_shaping),
        then (``read_back``) read back every traced direction once and record the lab's
        plan.json (the steps themselves skip the read-back: it took most of a change's time
        here)."""
        self._stop.set()
        if self._thread is None:
            return
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.errors.append(f"trace player still busy after {timeout_s:g} s")
            return
        if not read_back:
            return
        current = self._base()
        for tr in self.traces:
            try:
                self.lab.set_shaping(tr.link, tr.direction, current[(tr.link, tr.direction)])
            except AitbError as exc:
                self.errors.append(f"read-back of {tr.link} {tr.direction}: {exc}")

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until every step has been applied (traces that do not loop) or playing ended;
        True when it has."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self._thread is None or not self._thread.is_alive()

    def __enter__(self) -> TracePlayer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_until(self, target: float) -> bool:
        """Sleep until ``target`` on the clock; True when stopped first."""
        while (left := target - self.clock()) > 0:
            if self._sleep is not None:
                self._sleep(left)
            if self._stop.is_set() or (self._sleep is None and self._stop.wait(left)):
                return True
        return self._stop.is_set()

    def _due(self, it: Iterator[PlannedChange], first: PlannedChange
             ) -> tuple[list[PlannedChange], PlannedChange | None]:
        """``first`` and every later change already due; the next one not yet due."""
        assert self.t0 is not None
        due, nxt = [first], next(it, None)
        while nxt is not None and self.t0 + nxt.t_s <= self.clock():
            due.append(nxt)
            nxt = next(it, None)
        return due, nxt

    def _run(self) -> None:
        assert self.t0 is not None
        it = planned_changes(self.traces, self._base())
        pending = next(it, None)
        with self.out.open("a", encoding="utf-8") as f:
            while pending is not None:
                if self._wait_until(self.t0 + pending.t_s):
                    return
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
