"""Link traces and ``events:`` during a run: the trace player (testbed/live/trace_player.py) plays
both from the moment the workloads start until they end; ``link_trace.jsonl`` in the run
directory records every applied step (planned and applied time), ``events.jsonl`` every event
action, the manifest the start time and the counts."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from models.errors import LabError
from models.events import EVENT_RECORDS, EventAction
from testbed.lab.lab import Lab
from testbed.live.trace_player import TRACE_RECORDS, TracePlayer

__all__ = ["playing_traces"]


@contextmanager
def playing_traces(lab: Lab, run_dir: Path, manifest: dict[str, Any],
                   progress: Callable[[str], None], events: Sequence[EventAction] = ()
                   ) -> Iterator[TracePlayer | None]:
    """Play ``lab.plan.traces`` and ``events`` around the body (nothing without either; the
    body calls :meth:`TracePlayer.anchor` as each workload starts). Sets
    ``manifest["link_traces"]``: t0_unix_s (step time 0, seconds since the epoch), records
    file, the traces, then applied and errors; and ``manifest["events"]`` likewise. Raises
    LabError before the body when a trace or event needs what the kernel lacks, and after it
    when a change failed."""
    if not lab.plan.traces and not events:
        yield None
        return
    # SCHED_FIFO 10 like the agents' starters (aitb run is root): event p99 on a loaded
    # host, bench/event_timing.py
    player = TracePlayer(lab, run_dir / TRACE_RECORDS, events=events,
                         events_out=run_dir / EVENT_RECORDS, rt_priority=10)
    player.check()
    t0 = player.start()
    info: dict[str, Any] = {}
    if lab.plan.traces:
        info = manifest["link_traces"] = {
            "t0_unix_s": t0, "records": TRACE_RECORDS,
            "traces": [{"link": t.link, "direction": t.direction, "file": t.file,
                        "format": t.format, "loop": t.loop, "period_s": t.period_s,
                        "steps": len(t.steps)} for t in lab.plan.traces]}
        progress(f"playing {len(lab.plan.traces)} link traces from "
                 f"{dt.datetime.fromtimestamp(t0, dt.UTC).isoformat(timespec='milliseconds')}")
    ev_info: dict[str, Any] = {}
    if events:
        ev_info = manifest["events"] = {"t0_unix_s": t0, "records": EVENT_RECORDS,
                                        "actions": len(events)}
        progress(f"{len(events)} event actions from "
                 f"{dt.datetime.fromtimestamp(t0, dt.UTC).isoformat(timespec='milliseconds')}")
    try:
        yield player
    finally:
        player.stop()
        if info:
            info.update(applied=player.applied, errors=list(player.errors))
        if ev_info:
            ev_info.update(applied=player.events_applied, errors=list(player.errors),
                           rt_error=player.rt_error)
    if player.errors:
        raise LabError("link trace or event: " + "; ".join(player.errors))
