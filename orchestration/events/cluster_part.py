"""The machine's side of a cluster run's ``events:``: ``aitb topo events PART`` runs on each
machine that holds a share of the event actions (over SSH, for the length of the run) and
plays that share on its part of the lab with the trace player of a local run
(testbed/live/trace_player.py: links down and up through testbed/live/faults.py, the plan's routes
restored and read back on up, reshaping through set_shaping; one thread, SCHED_FIFO 10, the
action made ready before its instant). Times are the machine's own clock; the driver hands it
the run's t0 and the workloads' anchors already moved onto that clock, so the records' times
after t0 are the driver's (orchestration.events.cluster).

Protocol on stdin/stdout (one JSON object a line):

1. the driver sends ``{"actions": [action, ...], "rt_priority": N | null}`` (each action as
   models.events.action_to_dict, with its ``index`` in the run's list); the part attaches to
   the lab, opens every namespace, checks what the actions need (TracePlayer.check) and says
   ``{"ready": true}``, or ``{"error": TEXT}`` and exits 1;
2. ``{"start": T0}`` (seconds since the epoch, the machine's clock): playing starts, actions
   at absolute times are due T0 + t; ``{"anchor": WORKLOAD, "iteration": K | null, "t": T}``:
   that workload (iteration) started at T, its actions are due from then;
3. every record of events.jsonl as it is written: ``{"record": {...}}`` (with ``action``,
   the index; times after T0);
4. ``{"stop": true}``: the player stops (the actions not reached are recorded), then
   ``{"summary": {"applied": N, "errors": [TEXT, ...], "rt_error": TEXT | null}}``; exit 0
   when ``errors`` is empty, else 1. End of file instead of a line (the driver went away: a
   lost machine) stops the player and exits 1.

This process is registered in the machine's registry under the part's run id, so ``aitb topo
destroy PART`` ends it by pid should the driver be lost. It writes no file.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import IO, Any

from models.errors import AitbError
from models.events import action_from_dict
from testbed.lab.lab import Lab
from testbed.lab.registry import pid_start_time, state_dir
from testbed.live.trace_player import TracePlayer

__all__ = ["events_part"]


def events_part(run_id: str, stdin: IO[str], stdout: IO[str]) -> int:
    """Play the share of the event actions the driver sends for part ``run_id`` (module
    docstring); returns the exit status. Raises LabError (before anything starts) for an
    unknown run id."""
    lock = threading.Lock()

    def say(msg: dict[str, Any]) -> None:
        with lock:  # the player's thread sends records meanwhile
            stdout.write(json.dumps(msg) + "\n")
            stdout.flush()

    lab = Lab.attach(run_id, state_dir())
    lab.registry.append([{"kind": "process", "node": "(root namespace)",
                          "argv": ["aitb", "topo", "events", run_id], "pid": os.getpid(),
                          "start": pid_start_time(os.getpid())}])
    player = None
    try:
        try:
            first = json.loads(stdin.readline() or "{}")
            actions = [action_from_dict(d) for d in first.get("actions", [])]
            for node in lab.plan.nodes:  # opened now, not at an action's instant
                lab.node_io(node.name)
            player = TracePlayer(lab, Path(os.devnull), traces=(), events=actions,
                                 events_out=Path(os.devnull),
                                 rt_priority=first.get("rt_priority"),
                                 on_record=lambda rec: say({"record": rec}))
            player.check()
        except (AitbError, ValueError, TypeError, KeyError) as exc:
            say({"error": f"{type(exc).__name__}: {exc}" if not isinstance(exc, AitbError)
                 else str(exc)})
            return 1
        say({"ready": True})
        stopped = False
        for line in stdin:
            if not line.strip():
                continue
            msg = json.loads(line)
            if "start" in msg:
                player.start(float(msg["start"]))
            elif "anchor" in msg:
                player.anchor(msg["anchor"], float(msg["t"]), msg.get("iteration"))
            elif msg.get("stop"):
                stopped = True
                break
        if player.t0 is not None:  # never started: nothing applied, nothing to record
            player.stop(read_back=False)
        if not stopped:  # the driver is gone (module docstring, step 4)
            return 1
        say({"summary": {"applied": player.events_applied, "errors": list(player.errors),
                         "rt_error": player.rt_error}})
        return 1 if player.errors else 0
    finally:
        lab.release()
