"""What the ``events:`` did to the transfers that failed: each record of a workload's
``failures.jsonl`` gets, in its ``extra``, the event state at its instant, read from
``events.jsonl`` (the actions applied so far, testbed/live/trace_player.py):

- ``links_down``: the links on the transfer's routed paths (models.paths, every ECMP choice,
  both directions: source to destination and back, the acknowledgements' way) that an event
  had set down and not up again at the failure's time ``t``;
- ``agents_stopped``: of the failure's nodes (``node``, ``src_node``, ``dst_node``) the ones
  whose agent an event had frozen (SIGSTOP, not yet continued) or killed;
- ``events``: the indices (in ``events:``) of the events behind those two.

A failure without a source and destination (an agent that went away) gets the agent part
only. Rewrites the file atomically; pure otherwise (no root).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from models.atomic import write_text_atomic
from models.paths import PathError, paths
from models.plan import LabPlan
from models.rundir import read_jsonl

__all__ = ["state_at", "annotate_failures", "failure_cause"]


def state_at(events: Iterable[Mapping[str, Any]], t_s: float
             ) -> tuple[dict[str, int], dict[str, tuple[str, int]]]:
    """(link -> event that set it down, node -> (freeze|kill, event)) after every applied
    event action of ``events`` (events.jsonl records) done by ``t_s`` (seconds after the
    events' t0)."""
    down: dict[str, int] = {}
    agents: dict[str, tuple[str, int]] = {}
    done = sorted((e for e in events if "error" not in e and e.get("applied_t_s") is not None
                   and e["applied_t_s"] <= t_s), key=lambda e: e["applied_t_s"])
    for e in done:
        if e["op"] in ("down", "up"):
            for link in e.get("links", ()):
                if e["op"] == "down":
                    down[link] = e["event"]
                else:
                    down.pop(link, None)
        agent, node = e.get("agent"), e.get("node")
        if agent in ("freeze", "kill") and node is not None:
            agents[node] = (agent, e["event"])
        elif agent == "thaw" and node is not None and agents.get(node, ("",))[0] == "freeze":
            agents.pop(node)
    return down, agents


def _path_links(plan: LabPlan, a: str, b: str) -> set[str]:
    out: set[str] = set()
    for src, dst in ((a, b), (b, a)):
        try:
            for path in paths(plan, src, str(plan.address_of(dst))):
                out.update(h.link for h in path)
        except (PathError, KeyError, ValueError):
            continue
    return out


def annotate_failures(plan: LabPlan, failures: Path, events: Path, t0: float) -> int:
    """Add ``links_down``, ``agents_stopped`` and ``events`` (module docstring) to every
    failure record of ``failures`` (JSONL), the event state from ``events`` (events.jsonl,
    times after ``t0``, seconds since the epoch). Returns how many records name at least one
    link or agent. Nothing happens when either file is missing."""
    if not failures.exists() or not events.exists():
        return 0
    evs = read_jsonl(events)
    lines = [x for x in failures.read_text(encoding="utf-8").splitlines() if x.strip()]
    out, hit = [], 0
    for line in lines:
        rec = json.loads(line)
        extra = dict(rec.get("extra") or {})
        down, agents = state_at(evs, float(rec.get("t") or 0.0) - t0)
        src, dst = extra.get("src_node"), extra.get("dst_node")
        links = sorted(_path_links(plan, src, dst) & set(down)) if src and dst else []
        names = [n for n in (rec.get("node"), src, dst) if n]
        stopped = {n: agents[n][0] for n in dict.fromkeys(names) if n in agents}
        extra.update(links_down=links, agents_stopped=stopped, events=sorted(
            {down[lk] for lk in links} | {agents[n][1] for n in stopped}))
        hit += bool(links or stopped)
        rec["extra"] = extra
        out.append(json.dumps(rec))
    write_text_atomic(failures, "".join(x + "\n" for x in out))
    return hit


def failure_cause(rec: Mapping[str, Any]) -> str:
    """One failure record's ``detail`` (a dict from failures.jsonl), told with its cause when
    :func:`annotate_failures` found one: the links down on its path and the agents stopped,
    with their events' indices in events.jsonl; an overdue transfer's advice to raise the
    timeout (traffic_gen.transfers.OVERDUE_ADVICE) is then dropped, as a longer timeout
    would not have saved it."""
    from traffic_gen.transfers import OVERDUE_ADVICE

    detail = str(rec.get("detail") or "")
    extra = rec.get("extra") or {}
    links, stopped = extra.get("links_down") or [], extra.get("agents_stopped") or {}
    if not links and not stopped:
        return detail
    why = []
    if links:
        why.append(f"link{'s' if len(links) > 1 else ''} {', '.join(links)} down on its path")
    if stopped:
        told = {"freeze": "frozen", "kill": "killed"}
        why.append("agent " + ", ".join(f"{n} {told.get(how, how)}"
                                        for n, how in stopped.items()))
    evs = ", ".join(str(e) for e in extra.get("events") or [])
    cause = "; ".join(why) + (f" (events.jsonl event {evs})" if evs else "")
    if detail.endswith(OVERDUE_ADVICE):
        return detail[: -len(OVERDUE_ADVICE)] + cause
    return f"{detail}; {cause}"
