"""Link traces during a run: the trace player (testbed/trace_player.py) plays from the moment
the workloads start until they end; ``link_trace.jsonl`` in the run directory records every
applied step (planned and applied time), the manifest the start time and the counts."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aitb.errors import LabError
from testbed.lab import Lab
from testbed.trace_player import TRACE_RECORDS, TracePlayer

__all__ = ["playing_traces"]


@contextmanager
def playing_traces(lab: Lab, run_dir: Path, manifest: dict[str, Any],
                   progress: Callable[[str], None]) -> Iterator[TracePlayer | None]:
    """Play ``lab.plan.traces`` around the body (nothing without traces). Sets
    ``manifest["link_traces"]``: t0_unix_s (step time 0, seconds since the epoch), records
    file, the traces, then applied and errors. Raises LabError before the body when a trace
    needs what the kernel lacks, and after it when a change failed."""
    if not lab.plan.traces:
        yield None
        return
    player = TracePlayer(lab, run_dir / TRACE_RECORDS)
    player.check()
    t0 = player.start()
    info = manifest["link_traces"] = {
        "t0_unix_s": t0, "records": TRACE_RECORDS,
        "traces": [{"link": t.link, "direction": t.direction, "file": t.file,
                    "format": t.format, "loop": t.loop, "period_s": t.period_s,
                    "steps": len(t.steps)} for t in lab.plan.traces]}
    progress(f"playing {len(lab.plan.traces)} link traces from "
             f"{dt.datetime.fromtimestamp(t0, dt.UTC).isoformat(timespec='milliseconds')}")
    try:
        yield player
    finally:
        player.stop()
        info.update(applied=player.applied, errors=list(player.errors))
    if player.errors:
        raise LabError("link trace: " + "; ".join(player.errors))
