"""The trace player of a deployed lab (``aitb topo deploy``): a process of its own that plays
the lab's traces (testbed/live/trace_player.py) until ``aitb topo destroy`` ends it, because the
deploying process exits once the lab is up.

    python -m testbed.live.trace_process RUN_ID STATE_DIR

It attaches to the lab, plays from its own start and writes ``link_trace.jsonl`` and
``trace_player.log`` into the lab's registry directory (``STATE_DIR/RUN_ID/``). It is
registered with the lab like the lab's own processes, so destroy and ``aitb clean`` end it by
pid and start time (SIGTERM: it stops at once, without the read-back of the last step).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from testbed.live.trace_player import TRACE_RECORDS, TracePlayer

__all__ = ["start_detached", "main", "LOG_NAME"]

LOG_NAME = "trace_player.log"


def start_detached(lab: Any) -> subprocess.Popen[bytes] | None:
    """Start the player process of ``lab`` (a Lab that is up) in a session of its own and
    register it with the lab; None when the plan has no traces. Side effects: a process in
    the root namespace; files in the lab's registry directory."""
    if not lab.plan.traces:
        return None
    argv = [sys.executable, "-m", "testbed.live.trace_process", lab.run_id,
            str(lab.registry.dir.parent)]
    with (lab.registry.dir / LOG_NAME).open("ab") as log:  # registered before it execs
        return lab.popen_host(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                              start_new_session=True)  # outlives the deployer


def main(argv: list[str]) -> int:
    """Play the traces of run ``argv[0]`` under state directory ``argv[1]`` until SIGTERM or
    SIGINT (then exit 0), or until every step of traces that do not loop was applied (then
    read back, exit 0). Exit 1 when a change failed (the error is in the records)."""
    from testbed.lab.lab import Lab

    run_id, state = argv[0], Path(argv[1])
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    lab = Lab.attach(run_id, state)
    for node in lab.plan.nodes:  # an attached lab opens namespaces on first use
        lab.node_io(node.name)
    player = TracePlayer(lab, lab.registry.dir / TRACE_RECORDS)
    player.check()
    player.start()
    while not stopped.is_set() and not player.wait(0.2):
        pass
    player.stop(read_back=not stopped.is_set())  # stopped: the lab is being destroyed
    for error in player.errors:
        print(error, file=sys.stderr)
    lab.release()
    return 1 if player.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
