"""What the shared traffic engine (``traffic_engine: shared``, traffic_gen/engine.py) cannot
replay, refused before the lab exists (pure).

The engine replays compute, collectives, send_recv and TCP bursts for many hosts in one
process per CPU. It refuses UDP flows, TLS, FL gathers and timed messages (each needs the
per-host agent's code), events that freeze or kill a node's agents (an engine serves other
hosts too: SIGSTOP would freeze them all), and labs over several machines (each machine's
agents are started over SSH, one per host). ``kind: app`` entries run their own processes
either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.errors import SpecError, SpecIssue
from models.events import EventAction
from models.schedule import Burst, Gather, Timed

__all__ = ["check_shared_engine"]

_USE = "; use traffic_engine: per_host"


def check_shared_engine(spec: Any, workloads: Sequence[Any], events: Sequence[EventAction],
                        source: str) -> None:
    """Raise :class:`SpecError` (one issue per problem, at its key) if ``spec`` (an
    ExperimentSpec) asks for ``traffic_engine: shared`` and a workload of ``workloads``
    (built workloads: ``name``, ``schedule``, ``app``), an event of ``events`` or the lab
    needs what the engine does not do (module docstring). No-op for ``per_host``."""
    if spec.traffic_engine != "shared":
        return
    issues = []
    if spec.transport.encryption == "tls":
        issues.append(SpecIssue("the shared traffic engine does not run TLS" + _USE,
                                file=source, key_path=["transport", "encryption"]))
    if spec.cluster is not None:
        issues.append(SpecIssue("the shared traffic engine runs on one machine; a lab over "
                                "several machines starts one agent per host" + _USE,
                                file=source, key_path=["cluster"]))
    for i, w in enumerate(workloads):
        if w.app is not None:
            continue
        why = _unsupported(w.schedule.ops)
        if why:
            issues.append(SpecIssue(f"{w.name}: the shared traffic engine does not replay "
                                    f"{why}" + _USE, file=source, key_path=["workloads", i]))
    for ev in events:
        if ev.agent is not None:
            issues.append(SpecIssue(f"an event that does {ev.agent!r} to the agents on "
                                    f"{ev.node}: with the shared traffic engine a node's "
                                    "traffic shares a process with other hosts'" + _USE,
                                    file=source, key_path=["events", ev.event]))
            break
    if issues:
        raise SpecError(issues)


def _unsupported(ops: Sequence[Any]) -> str | None:
    for op in ops:
        if isinstance(op, Gather):
            return "FL gathers"
        if isinstance(op, Timed):
            return "timed messages"
        if isinstance(op, Burst) and any(f.protocol == "udp" for f in op.flows):
            return "UDP flows"
    return None
