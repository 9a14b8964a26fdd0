"""What each event of an experiment's ``events:`` timeline did to the workloads: the
``events`` section of metrics.json and ``tables/events_impact.parquet`` (one row per event
and workload it hit).

**Event window.** An event's actions (``events.jsonl``, models/events.py; times there are
seconds after the run's t0, ``manifest["events"]["t0_unix_s"]``) that were applied without
error give its window on the host clock: from the first action's ``began`` to the last
one's ``applied``. When the event leaves links down (its last action is a ``down``) the
window lasts until the first later ``up`` action of any of those links, and when it leaves
a shaping changed (a ``shape`` without ``restore``) until the first later restore of one of
its directions; with none, until the end of the run (``end`` None). Actions never reached or
failed do not count; an event with none applied has no window and hits nothing.

**Hit.** A flow is hit when its [t_start, t_end] (t_end unknown: still running) overlaps
the window; an iteration (analysis.metrics.collectives.iteration_times: the span of its ops),
a collective instance ([min rank_t_start, max rank_t_end]) or an FL round ([t_start, t_end]
over its aggregators) likewise. A transfer that failed (``failures.jsonl``, from the event
until the next one) hits its workload and the iteration and collective its record names
(it has no flow, collective or timeline record), and its workload's recovery search goes
on until its last failure. Of the hit flows, ``flows_on_link`` are those that crossed
a link the event touched (its links, a node's links, the links of the directions it
reshapes). Where the run captured on every such link (``captures/index.json``), from the
capture (``on_link_source`` ``capture``): a data segment of the flow's connection (src_ip,
sport -> dst_ip, dport, payload > 0) passed the link between the flow's start and the
earlier of its end and the window's end, so for a link down the flows that were on it when
it went down. Otherwise from the plan (``plan``): every routed path of the flow (models.paths:
each ECMP choice) crosses such a link, and ``flows_maybe_on_link`` counts those for which
only some ECMP paths do (the kernel's per-flow hash decides; the plan cannot).

**Goodput** of a workload (bit/s): payload bytes its completed, non-background flows
delivered to their receivers per second, from the flow records (``flows.jsonl``), each
flow's ``size_bytes`` spread evenly over [t_first_byte (else t_start), t_end]. The flow
records, not the counter samples, because they count payload bytes once (interface counters
add headers, ACKs and retransmitted copies) and exist in every run. Over a window
[t, t + w]: G(t) = (D(t + w) - D(t)) * 8 / w, D(t) the bytes delivered by t.

**Baseline.** The job's undisturbed pace: what it did before the first applied event of the
run after the workload began (not merely before this one: the link-up that ends an outage is
judged against the pace before the outage, not against the outage).
``iteration_time_before_s``: the median iteration time (collectives) or round time (FL rounds)
of the workload's iterations that ended by then.

**Time to recover, by pace** (a workload with iterations or rounds and a baseline): the job is
back to its pre-event pace, sustained. An iteration is at pace when it took at most the
baseline / 0.9 (:data:`RECOVERY_FRACTION`). Of the iterations that ended after the event
instant (the one in flight, then the later ones), the recovery instant is the start of the
first run of :data:`SUSTAIN` consecutive iterations at pace (fewer when fewer remain, at least
one); ``recovery_s`` = that instant minus the event instant (0: the one in flight and those
after it kept the pace). None found: ``recovered`` False. ``slowdown_mean`` and
``slowdown_max``: the iterations from the event to the recovery instant (or to the end), each
as its time over the baseline (``iteration_inflation_*`` below keep the event window's view).
``recovery_method`` is ``pace``.

**Time to recover, by goodput** (workloads without iterations or rounds, e.g. incast
patterns; ``recovery_method`` ``goodput``) follows the convergence time of RFC 6413's
Rate-Derived Method (Benchmarking Methodology for Link-State IGP Data-Plane Route
Convergence; terms of RFC 6412): the Convergence Recovery Instant minus the Convergence Event
Instant, with "goodput back to 90 % of before" in place of "forwarding rate back to the
offered load". Event instant: the window's start. Baseline B: the mean goodput from the
workload's first flow start to the first applied event's instant (for the first event, the
later of its first flow start and the previous event action's applied time, as before).
Recovery instant: the first t = start + k * w / 10 (k = 0, 1, ..) with G(t) >= 0.9 * B and
t + w not after the workload's last flow end; ``recovery_s`` = t - start (0: goodput never
fell below 90 %; resolution w / 10). Window w: the median iteration (or FL round) time of the
workload before the event, else :data:`DEFAULT_WINDOW_S`. No such t: ``recovered`` False and
``recovery_s`` None (never a number made up); no baseline or no traffic after the event:
``recovered`` None; ``recovery_note`` says which. The goodput figures
(``baseline_goodput_bps``, ``min_goodput_bps``) are given for every workload.

**Inflation.** ``iteration_inflation_first``: the time of the first hit iteration (the one in
flight at the event, or the next) over the baseline; ``iteration_inflation_max``: the worst
hit one's (which: ``iteration_worst``) over the baseline.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.metrics.collectives import iteration_times
from analysis.pcap import PROTO_TCP, DecodeStats, decode_frame, open_capture
from models.errors import SpecError
from models.paths import PathError, PathWalker
from models.plan import LabPlan

__all__ = ["RECOVERY_FRACTION", "SUSTAIN", "DEFAULT_WINDOW_S", "GOODPUT_SOURCE",
           "IMPACT_COLUMNS", "event_windows", "link_segments", "delivered", "goodput",
           "recovery", "pace_recovery", "inflation", "event_impact", "event_metrics",
           "impact_table"]

RECOVERY_FRACTION = 0.9  # recovered: back to 90 % of the pre-event pace (or goodput)
SUSTAIN = 3  # recovered by pace: this many consecutive iterations at pace
DEFAULT_WINDOW_S = 0.1   # goodput window without iterations or rounds before the event
GOODPUT_SOURCE = "flows.jsonl (payload bytes of completed flows)"
IMPACT_COLUMNS = (
    "event", "kind", "state", "target", "start_s", "end_s", "workload", "workload_index",
    "flows_hit", "flows_on_link", "flows_maybe_on_link", "on_link_source", "failures",
    "iterations_hit",
    "collectives_hit", "rounds_hit", "baseline_goodput_bps", "min_goodput_bps", "window_s",
    "recovered", "recovery_s", "recovery_note", "recovery_method", "slowdown_mean",
    "slowdown_max", "iteration_time_before_s",
    "iteration_inflation_first", "iteration_inflation_max", "iteration_worst")


def _target(actions: Sequence[dict[str, Any]]) -> tuple[str, set[str]]:
    """Text naming what the event touched, and the links it touched."""
    a = actions[0]
    links = {lk for x in actions for lk in x.get("links") or ()}
    links |= {d.rsplit(" ", 1)[0] for x in actions for d in x.get("directions") or ()}
    if a.get("node"):
        return f"node {a['node']}", links
    if a.get("directions"):
        return ", ".join(dict.fromkeys(a["directions"])), links
    return ", ".join(sorted(links)) or "—", links


def _applied(a: dict[str, Any]) -> bool:
    return not a.get("not_reached") and not a.get("error") and a.get("applied_t_s") is not None


def event_windows(records: Iterable[dict[str, Any]], t0_unix_s: float) -> list[dict[str, Any]]:
    """One dict per event of ``records`` (the lines of events.jsonl; lines with a ``record``
    key, such as FRR's ``record: convergence``, measure an action and are not one), in event
    order: event,
    kind, state (``applied``, ``partly applied``, ``not reached``, ``failed``), target (text),
    links (set of link names touched), start and end (host clock, s; the module docstring's
    window; None when not applied, end None: until the end of the run), planned_s (the first
    action's planned time after t0, s). Pure."""
    by_event: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("record"):  # a measurement about an action (FRR's convergence), not one
            continue
        by_event.setdefault(int(r["event"]), []).append(r)
    timeline = sorted(((t0_unix_s + a["applied_t_s"], ev, a) for ev, acts in by_event.items()
                       for a in acts if _applied(a)), key=lambda x: x[0])
    out = []
    for ev in sorted(by_event):
        acts = sorted(by_event[ev], key=lambda a: a.get("step", 0))
        done = [a for a in acts if _applied(a)]
        target, links = _target(acts)
        state = ("applied" if len(done) == len(acts) else "partly applied" if done
                 else "failed" if any(a.get("error") for a in acts) else "not reached")
        row: dict[str, Any] = {"event": ev, "kind": acts[0]["kind"], "state": state,
                               "target": target, "links": links,
                               "planned_s": acts[0].get("planned_t_s"),
                               "start": None, "end": None}
        if done:
            row["start"] = t0_unix_s + min(a["began_t_s"] for a in done)
            last = done[-1]
            row["end"] = end = t0_unix_s + last["applied_t_s"]
            if last["op"] == "down" or (last["op"] == "shape" and not last.get("restore")):
                row["end"] = next((when for when, other, a in timeline if when >= end and
                                   (other != ev or a.get("step", 0) > last.get("step", 0))
                                   and _undoes(a, last)), None)
        out.append(row)
    return out


def _undoes(a: dict[str, Any], last: dict[str, Any]) -> bool:
    """Whether action ``a`` ends what ``last`` left: an ``up`` of one of its downed links, a
    restore of one of its reshaped directions."""
    if last["op"] == "down":
        return a["op"] == "up" and bool(set(a.get("links") or ()) & set(last["links"]))
    return a["op"] == "shape" and bool(a.get("restore")) and \
        bool(set(a.get("directions") or ()) & set(last.get("directions") or ()))


def _spans(flows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(from, to, bytes) of the completed flows: delivery from t_first_byte (else t_start)
    to t_end."""
    if flows.empty or "t_end" not in flows:
        return np.empty(0), np.empty(0), np.empty(0)
    done = flows[flows["t_end"].notna()]
    if "background" in done:
        done = done[done["background"].ne(True)]
    start = done["t_start"].astype(float)
    if "t_first_byte" in done:
        start = done["t_first_byte"].astype(float).fillna(start)
    end = done["t_end"].astype(float).to_numpy()
    return (np.minimum(start.to_numpy(), end), end,
            done["size_bytes"].astype(float).to_numpy())


def delivered(flows: pd.DataFrame, at: np.ndarray | Sequence[float]) -> np.ndarray:
    """D(t): payload bytes the completed non-background ``flows`` had delivered by each time
    of ``at`` (host clock, s), each flow's ``size_bytes`` spread evenly over [t_first_byte
    (else t_start), t_end] (a flow with no duration delivers all at t_end). Exact for that
    piecewise-linear model: O((flows + times) log flows). Returns bytes, shaped like ``at``."""
    at = np.asarray(at, dtype=float)
    lo, hi, size = _spans(flows)
    if size.size == 0:
        return np.zeros_like(at)
    dur = hi - lo
    ramp = dur > 0
    # instantaneous flows: a step at t_end
    ends = np.sort(hi[~ramp])
    steps = np.concatenate(([0.0], np.cumsum(size[~ramp][np.argsort(hi[~ramp])])))
    out = steps[np.searchsorted(ends, at, side="right")]
    if ramp.any():  # ramps: slope +rate at lo, -rate at hi; D piecewise linear between them
        rate = size[ramp] / dur[ramp]
        pts = np.concatenate((lo[ramp], hi[ramp]))
        dslope = np.concatenate((rate, -rate))
        order = np.argsort(pts, kind="stable")
        pts, dslope = pts[order], dslope[order]
        slope = np.cumsum(dslope)  # slope just after each point
        d_at = np.concatenate(([0.0], np.cumsum(slope[:-1] * np.diff(pts))))
        out = out + np.interp(at, pts, d_at, left=0.0, right=d_at[-1])
    return out


def goodput(flows: pd.DataFrame, t: np.ndarray | Sequence[float], window_s: float
            ) -> np.ndarray:
    """G(t) = (D(t + w) - D(t)) * 8 / w (bit/s) for each t of ``t`` (host clock, s),
    w = ``window_s`` > 0 (:func:`delivered`)."""
    t = np.asarray(t, dtype=float)
    return (delivered(flows, t + window_s) - delivered(flows, t)) * 8 / window_s


def recovery(flows: pd.DataFrame, start: float, baseline_from: float, window_s: float,
             fraction: float = RECOVERY_FRACTION, until: float | None = None,
             baseline_until: float | None = None) -> dict[str, Any]:
    """Time to recover by goodput after an event at ``start`` (host clock, s) for one
    workload's ``flows`` (module docstring: baseline over [``baseline_from``,
    ``baseline_until``, default ``start``], windows of
    ``window_s``, threshold ``fraction`` of the baseline). Returns baseline_goodput_bps,
    min_goodput_bps (the lowest G(t) from start up to the recovery instant, or to the last
    window), recovered (True, False: not before the traffic ended, None: not measurable),
    recovery_s (s, None unless recovered) and recovery_note. ``until``: the workload was
    still there until then (host clock, s; e.g. its last failure record), so the search goes
    on to it even past its last flow's end. Pure."""
    out: dict[str, Any] = {"baseline_goodput_bps": None, "min_goodput_bps": None,
                           "recovered": None, "recovery_s": None, "recovery_note": "",
                           "recovery_method": "goodput"}
    lo, hi, _ = _spans(flows)
    if hi.size == 0:
        out["recovery_note"] = "no completed flow"
        return out
    b_end = start if baseline_until is None else min(start, baseline_until)
    span = b_end - baseline_from
    if span <= 0 or lo.min() >= b_end:
        out["recovery_note"] = "no traffic before the event: no baseline"
        return out
    base = float(np.diff(delivered(flows, [baseline_from, b_end]))[0]) * 8 / span
    out["baseline_goodput_bps"] = base
    if base <= 0:
        out["recovery_note"] = "no goodput before the event: no baseline"
        return out
    last = max(float(hi.max()), -math.inf if until is None else until)
    step = window_s / 10
    n = math.floor((last - window_s - start) / step + 1e-9) + 1
    if n < 1:
        out["recovery_note"] = "traffic ended within one window of the event"
        return out
    grid = start + step * np.arange(n)
    g = goodput(flows, grid, window_s)
    ok = np.flatnonzero(g >= fraction * base)
    if ok.size == 0:
        ended = "failed" if until is not None and until >= hi.max() else "'s traffic ended"
        out.update(recovered=False, min_goodput_bps=float(g.min()),
                   recovery_note=f"goodput stayed below {fraction:.0%} of before until the "
                                 f"workload{' ' * (ended == 'failed')}{ended}")
        return out
    k = int(ok[0])
    out.update(recovered=True, recovery_s=float(grid[k] - start),
               min_goodput_bps=float(g[:k + 1].min()),
               recovery_note="never fell below the threshold" if k == 0 else "")
    return out


def inflation(times: pd.DataFrame, start: float, end: float | None,
              baseline_until: float | None = None) -> dict[str, Any]:
    """Iteration-time inflation of one workload for an event window [start, end] (host
    clock, s; end None: open). ``times``: one row per iteration with ``iteration``,
    ``t_start``, ``t_end``, ``time_s``. Returns iteration_time_before_s (median of those ended
    by ``baseline_until``, default ``start``: the module docstring's baseline),
    iterations_hit (sorted iteration numbers overlapping the window),
    iteration_inflation_first, iteration_inflation_max, iteration_worst (None where there is
    no iteration before or none hit)."""
    out: dict[str, Any] = {"iteration_time_before_s": None, "iterations_hit": [],
                           "iteration_inflation_first": None, "iteration_inflation_max": None,
                           "iteration_worst": None}
    if times.empty:
        return out
    hit = times[_overlaps(times["t_start"], times["t_end"], start, end)].sort_values("t_start")
    out["iterations_hit"] = sorted(int(i) for i in hit["iteration"])
    cut = start if baseline_until is None else min(start, baseline_until)
    before = times[times["t_end"] <= cut]["time_s"]
    if before.empty:
        return out
    med = float(before.median())
    out["iteration_time_before_s"] = med
    if hit.empty or med <= 0:
        return out
    worst = hit.loc[hit["time_s"].idxmax()]
    out.update(iteration_inflation_first=float(hit["time_s"].iloc[0]) / med,
               iteration_inflation_max=float(worst["time_s"]) / med,
               iteration_worst=int(worst["iteration"]))
    return out


def pace_recovery(times: pd.DataFrame, start: float, baseline_s: float,
                  fraction: float = RECOVERY_FRACTION, sustain: int = SUSTAIN
                  ) -> dict[str, Any]:
    """Time to recover by pace (module docstring) of one workload after an event at ``start``
    (host clock, s). ``times``: one row per iteration (``t_start``, ``t_end``, ``time_s``);
    ``baseline_s``: the pre-event median iteration time (> 0). Returns recovered (True, False,
    None: no iteration ended after the event), recovery_s (s, None unless recovered),
    recovery_note, recovery_method ``pace``, slowdown_mean and slowdown_max (the iterations
    from the event to the recovery instant, else to the end, over the baseline). Pure."""
    out: dict[str, Any] = {"recovered": None, "recovery_s": None, "recovery_method": "pace",
                           "slowdown_mean": None, "slowdown_max": None,
                           "recovery_note": "no iteration ended after the event"}
    after = times[times["t_end"].astype(float) > start].sort_values("t_start")
    if after.empty:
        return out
    at_pace = (after["time_s"].astype(float) <= baseline_s / fraction).to_numpy()
    n = len(at_pace)
    k = next((i for i in range(n) if at_pace[i:i + sustain].all()), None)
    slow = after["time_s"].astype(float).to_numpy()[:n if k is None else max(k, 1)]
    out.update(slowdown_mean=float(slow.mean() / baseline_s),
               slowdown_max=float(slow.max() / baseline_s))
    if k is None:
        out.update(recovered=False, recovery_note=(
            f"iterations stayed slower than the pre-event pace ({baseline_s:.4g} s / "
            f"{fraction:.0%}) until the workload ended"))
        return out
    instant = max(float(after["t_start"].iloc[k]), start)
    out.update(recovered=True, recovery_s=0.0 if k == 0 else instant - start,
               recovery_note=("kept the pre-event pace" if k == 0 else
                              f"back to the pre-event pace for {min(sustain, n - k)} "
                              "iterations in a row"))
    return out


def _overlaps(lo: pd.Series, hi: pd.Series, start: float, end: float | None) -> pd.Series:
    """Rows whose [lo, hi] (hi NaN: open) overlaps [start, end] (end None: open)."""
    hi = hi.astype(float).fillna(math.inf)
    return (hi >= start) & (lo.astype(float) <= (math.inf if end is None else end))


def _workload_index(frame: pd.DataFrame) -> pd.Series:
    if "workload_index" in frame:
        return frame["workload_index"].fillna(0).astype(int)
    return pd.Series(0, index=frame.index, dtype=int)


def _round_times(rounds: pd.DataFrame) -> pd.DataFrame:
    """One row per (workload_index, round): the round's span over its aggregators."""
    if rounds.empty:
        return pd.DataFrame(columns=["workload_index", "iteration", "t_start", "t_end",
                                     "time_s"])
    r = rounds.assign(workload_index=_workload_index(rounds))
    g = r.groupby(["workload_index", "round"], as_index=False).agg(
        t_start=("t_start", "min"), t_end=("t_end", "max"))
    return g.rename(columns={"round": "iteration"}).assign(time_s=g["t_end"] - g["t_start"])


Conn = tuple[str, int, str, int]  # src_ip, sport, dst_ip, dport of a data segment


def link_segments(run_dir: Path, links: Iterable[str]) -> dict[str, dict[Conn, np.ndarray]]:
    """Per link of ``links`` captured in ``run_dir`` (``captures/index.json``: the files of
    the first interface on it), the sorted host-clock times (s) of its TCP data segments
    (payload > 0) per connection direction. Links without a capture are left out; an
    unreadable capture or index leaves its link out. Reads the capture files."""
    try:
        index = json.loads((run_dir / "captures" / "index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    wanted = set(links)
    out: dict[str, dict[Conn, np.ndarray]] = {}
    for iface in index.get("interfaces") or []:
        link = iface.get("link")
        if link not in wanted or link in out:
            continue
        times: dict[Conn, list[float]] = {}
        try:
            for rel in iface.get("files") or []:
                _segments(run_dir / rel, times)
        except (OSError, SpecError):
            continue
        out[link] = {k: np.sort(np.asarray(v)) for k, v in times.items()}
    return out


def _segments(path: Path, times: dict[Conn, list[float]]) -> None:
    cap = open_capture(path)
    stats = DecodeStats()
    for ts, link, buf, off, caplen, wirelen in cap.frames():
        d = decode_frame(link, buf, off, caplen, wirelen, stats)
        if d is None or d[0] != PROTO_TCP or d[5] <= 0:
            continue
        key = (str(ipaddress.ip_address(d[1])), d[3], str(ipaddress.ip_address(d[2])), d[4])
        times.setdefault(key, []).append((cap.start_ns or 0) / 1e9 + ts)


def _on_capture(flows: pd.DataFrame, segments: list[dict[Conn, np.ndarray]],
                end: float | None) -> int:
    """Hit ``flows`` with a data segment on one of the captured links (``segments``) between
    the flow's start and the earlier of its end and ``end``."""
    n = 0
    cols = ("src_ip", "sport", "dst_ip", "dport", "t_start", "t_end")
    for src, sport, dst, dport, lo, hi in zip(*(flows[c] for c in cols), strict=True):
        hi = min(math.inf if pd.isna(hi) else float(hi), math.inf if end is None else end)
        key = (str(src), int(sport), str(dst), int(dport))
        for seg in segments:
            ts = seg.get(key)
            if ts is not None and np.searchsorted(ts, float(lo)) < np.searchsorted(
                    ts, hi, side="right"):
                n += 1
                break
    return n


def _on_link(flows: pd.DataFrame, links: set[str], plan: LabPlan | None
             ) -> tuple[int | None, int | None]:
    """(flows every plan path of which crosses ``links``, flows only some paths of which
    do); (None, None) without a plan or links."""
    if plan is None or not links or flows.empty:
        return (None, None) if plan is None or not links else (0, 0)
    walker = PathWalker(plan)
    every = some = 0
    for src, dst in zip(flows["src_node"], flows["dst_ip"], strict=True):
        try:
            crossed = [any(h.link in links for h in p) for p in walker.paths(src, dst)]
        except PathError:
            continue
        every += all(crossed)
        some += any(crossed) and not all(crossed)
    return every, some


def event_impact(windows: Sequence[dict[str, Any]], flows: pd.DataFrame,
                 collectives: pd.DataFrame, timeline: pd.DataFrame, rounds: pd.DataFrame,
                 failures: pd.DataFrame, plan: LabPlan | None,
                 workload_names: dict[int, str] | None = None, t0_unix_s: float = 0.0,
                 segments: dict[str, dict[Conn, np.ndarray]] | None = None) -> pd.DataFrame:
    """The impact table: one row per (event, workload it hit) with :data:`IMPACT_COLUMNS`
    (an event that hit no workload: one row, workload None, counts 0). ``windows``: from
    :func:`event_windows`; the frames as analysis.tables loads them (host-clock times).
    start_s, end_s: the window in seconds after ``t0_unix_s`` (the run's t0, as in
    events.jsonl; None end: open). ``segments``: :func:`link_segments` of the touched links
    (None or missing links: the plan decides ``flows_on_link``).
    Pure."""
    names = dict(workload_names or {})
    flows = flows.assign(workload_index=_workload_index(flows)) if not flows.empty else flows
    iters = iteration_times(timeline, collectives)
    iters = iters.assign(time_s=iters["iteration_time_s"]) if not iters.empty else iters
    rtimes = _round_times(rounds)
    colls = collectives.assign(
        workload_index=_workload_index(collectives),
        t_start=collectives["rank_t_start"].map(min),
        t_end=collectives["rank_t_end"].map(max)) if not collectives.empty else collectives
    origin = t0_unix_s
    applied = sorted(w["start"] for w in windows if w["start"] is not None)
    rows = []
    for w in windows:
        base = {"event": w["event"], "kind": w["kind"], "state": w["state"],
                "target": w["target"], "start_s": None, "end_s": None, "workload": None,
                "workload_index": None, "flows_hit": 0, "flows_on_link": None,
                "flows_maybe_on_link": None, "on_link_source": None, "failures": 0,
                "iterations_hit": [],
                "collectives_hit": [], "rounds_hit": [], "window_s": None,
                "iteration_time_before_s": None, "iteration_inflation_first": None,
                "iteration_inflation_max": None, "iteration_worst": None,
                "baseline_goodput_bps": None, "min_goodput_bps": None, "recovered": None,
                "recovery_s": None, "recovery_note": "event not applied",
                "recovery_method": None, "slowdown_mean": None, "slowdown_max": None}
        start, end = w["start"], w["end"]
        if start is None:
            rows.append(base)
            continue
        base.update(start_s=start - origin, end_s=None if end is None else end - origin,
                    recovery_note="no flow was active during the event")
        hit = flows[_overlaps(flows["t_start"], flows["t_end"], start, end)] \
            if not flows.empty else flows
        hit_w = set(hit["workload_index"]) if not hit.empty else set()
        for frame in (iters, rtimes):
            if not frame.empty:
                hit_w |= set(frame[_overlaps(frame["t_start"], frame["t_end"], start, end)]
                             ["workload_index"].astype(int))
        nxt = next((t for t in applied if t > start), math.inf)
        prev = max((t for t in applied if t < start), default=-math.inf)
        fails = _failures_after(failures, start, nxt)
        hit_w |= set(_workload_index(fails))
        if not hit_w:
            rows.append(base)
            continue
        for wi in sorted(hit_w):
            rows.append(_row(base, w, wi, names, flows, hit, iters, rtimes, colls, fails,
                             plan, start, end, prev, segments or {}, applied))
    return pd.DataFrame(rows, columns=list(IMPACT_COLUMNS))


def _row(base: dict[str, Any], w: dict[str, Any], wi: int, names: dict[int, str],
         flows: pd.DataFrame, hit: pd.DataFrame, iters: pd.DataFrame, rtimes: pd.DataFrame,
         colls: pd.DataFrame, fails: pd.DataFrame, plan: LabPlan | None, start: float,
         end: float | None, prev: float,
         segments: dict[str, dict[Conn, np.ndarray]], applied: list[float]
         ) -> dict[str, Any]:
    """The row of workload ``wi`` for the event of window ``w``; ``fails``: the failure
    records from the event until the next one; ``applied``: the run's applied event instants
    (sorted); the baseline ends at the first of them after the workload began."""
    mine = flows[flows["workload_index"] == wi] if not flows.empty else flows
    began = _began(wi, mine, iters, rtimes, start)
    first_event = next((x for x in applied if x > began), start)
    mine_hit = hit[hit["workload_index"] == wi] if not hit.empty else hit
    row = {**base, "workload_index": wi, "flows_hit": len(mine_hit)}
    if not mine.empty and "workload" in mine:
        names.setdefault(wi, str(mine["workload"].iloc[0]))
    row["workload"] = names.get(wi)
    if w["links"] and all(lk in segments for lk in w["links"]):
        row.update(on_link_source="capture", flows_on_link=_on_capture(
            mine_hit, [segments[lk] for lk in sorted(w["links"])], end) if len(mine_hit) else 0)
    else:
        row["flows_on_link"], row["flows_maybe_on_link"] = _on_link(mine_hit, w["links"], plan)
        row["on_link_source"] = "plan" if row["flows_on_link"] is not None else None
    f = fails[_workload_index(fails) == wi] if not fails.empty else fails
    row["failures"] = len(f)
    # a transfer that failed has no flow record, its op no collective or timeline record:
    # the failure record names them (extra.iteration, extra.id of a collective)
    failed_ids = set(f["extra_id"][f.get("extra_op_kind", pd.Series("", f.index)) ==
                                   "collective"].dropna()) if "extra_id" in f else set()
    failed_its = {int(i) for i in f["extra_iteration"].dropna()} \
        if "extra_iteration" in f else set()
    if not colls.empty:
        c = colls[(colls["workload_index"] == wi) &
                  _overlaps(colls["t_start"], colls["t_end"], start, end)]
        failed_ids |= set(c["collective_id"])
    row["collectives_hit"] = sorted(failed_ids, key=_natural)
    per_w = {}
    for key, frame in (("iterations", iters), ("rounds", rtimes)):
        sub = frame[frame["workload_index"] == wi] if not frame.empty else frame
        per_w[key] = inflation(sub, start, end, first_event) if not sub.empty else None
    row["rounds_hit"] = per_w["rounds"]["iterations_hit"] if per_w["rounds"] else []
    inf = per_w["rounds"] if per_w["rounds"] and not per_w["iterations"] else per_w["iterations"]
    its = set(per_w["iterations"]["iterations_hit"]) if per_w["iterations"] else set()
    if not per_w["rounds"]:
        its |= failed_its
    row["iterations_hit"] = sorted(its)
    if inf:
        row.update({k: inf[k] for k in ("iteration_time_before_s", "iteration_inflation_first",
                                        "iteration_inflation_max", "iteration_worst")})
    window = row["iteration_time_before_s"] or DEFAULT_WINDOW_S
    row["window_s"] = window
    first = float(mine["t_start"].min()) if not mine.empty else start
    until = float(f["t"].max()) if len(f) else None  # it failed: zero goodput until then
    # the baseline ends at the workload's first event: a later event is judged against the
    # pace before any disturbance (module docstring)
    lo = max(first, prev) if first_event >= start else first
    row.update(recovery(mine, start, lo, window, until=until, baseline_until=first_event))
    times = rtimes if per_w["rounds"] and not per_w["iterations"] else iters
    if inf and row["iteration_time_before_s"] and not len(f):
        row.update(pace_recovery(times[times["workload_index"] == wi], start,
                                 row["iteration_time_before_s"]))
    return row


def _began(wi: int, flows: pd.DataFrame, iters: pd.DataFrame, rtimes: pd.DataFrame,
           start: float) -> float:
    """When workload ``wi`` began: its first flow, iteration or round start (host clock, s);
    ``start`` when it has none."""
    starts = [float(flows["t_start"].min())] if not flows.empty else []
    for frame in (iters, rtimes):
        if not frame.empty:
            sub = frame[frame["workload_index"] == wi]
            if not sub.empty:
                starts.append(float(sub["t_start"].min()))
    return min(starts, default=start)


def _failures_after(failures: pd.DataFrame, start: float, nxt: float) -> pd.DataFrame:
    """Failure records at or after ``start`` and before ``nxt`` (the next event)."""
    if failures.empty or "t" not in failures:
        return pd.DataFrame()
    return failures[(failures["t"] >= start) & (failures["t"] < nxt)]


def _natural(cid: str) -> tuple[Any, ...]:
    """c0.10 after c0.9."""
    return tuple(int(p) if p.isdigit() else p for p in cid.replace("c", "", 1).split("."))


def event_metrics(records: Sequence[dict[str, Any]], t0_unix_s: float | None,
                  flows: pd.DataFrame, collectives: pd.DataFrame, timeline: pd.DataFrame,
                  rounds: pd.DataFrame, failures: pd.DataFrame, plan: LabPlan | None,
                  workload_names: dict[int, str] | None = None, run_dir: Path | None = None
                  ) -> tuple[dict[str, Any], pd.DataFrame]:
    """The ``events`` section of metrics.json and the impact table (:func:`event_impact`).
    ``records``: events.jsonl's lines (empty: no events: the section's ``events`` is 0 and
    the table empty); ``t0_unix_s``: the manifest's ``events.t0_unix_s`` (None with records:
    the section says the times cannot be placed). The section: events, applied,
    not_recovered (rows whose goodput never came back), recovery_s_max, inflation_max, the
    definitions (fraction, goodput_source) and the rows (``impact``). With ``run_dir``, the
    captures of the touched links there decide ``flows_on_link`` (:func:`link_segments`;
    reads them)."""
    section: dict[str, Any] = {"events": 0, "applied": 0, "not_recovered": 0,
                               "recovery_s_max": None, "iteration_inflation_max": None,
                               "fraction": RECOVERY_FRACTION, "goodput_source": GOODPUT_SOURCE,
                               "impact": [], "note": None}
    empty = pd.DataFrame(columns=list(IMPACT_COLUMNS))
    if not records:
        return section, empty
    section["events"] = len({r["event"] for r in records})
    if t0_unix_s is None:
        section["note"] = "events.jsonl without the manifest's events.t0_unix_s: not placed"
        return section, empty
    windows = event_windows(records, t0_unix_s)
    touched = {lk for w in windows if w["start"] is not None for lk in w["links"]}
    segments = link_segments(run_dir, touched) if run_dir is not None and touched else {}
    table = event_impact(windows, flows, collectives, timeline, rounds, failures, plan,
                         workload_names, t0_unix_s, segments)
    section["applied"] = sum(w["start"] is not None for w in windows)
    section["not_recovered"] = int((table["recovered"] == False).sum())  # noqa: E712
    rec = table["recovery_s"].dropna()
    section["recovery_s_max"] = float(rec.max()) if len(rec) else None
    inf = table["iteration_inflation_max"].dropna()
    section["iteration_inflation_max"] = float(inf.max()) if len(inf) else None
    section["impact"] = table.astype(object).where(table.notna(), None).to_dict("records")
    return section, table


def impact_table(section: dict[str, Any]) -> pd.DataFrame:
    """The impact table back from the ``events`` section of metrics.json (its ``impact``
    rows, :data:`IMPACT_COLUMNS`), e.g. for ``tables/events_impact.parquet``."""
    return pd.DataFrame(section.get("impact") or [], columns=list(IMPACT_COLUMNS))
