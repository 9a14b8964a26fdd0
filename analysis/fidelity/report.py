"""``fidelity.json`` from the per-direction checks and the CPU samples (pure); this module
defines its shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.fidelity.checks import (
    DirectionRef,
    configured_loss_pct,
    delay_check,
    expected_rtt_s,
    host_drops_check,
    loss_check,
    rate_check,
    rtt_check,
    rtt_tolerance_s,
)

__all__ = ["CPU_SATURATED_PCT", "cpu_summary", "direction_entry", "fidelity_report",
           "traffic_windows", "samples_in_windows", "check_coverage", "coverage_words",
           "CHECK_NAMES"]

# the per-direction checks in the order the verdict names them, with their names in words
CHECK_NAMES = {"rate": "rate", "rtt": "RTT", "delay": "delay-line delay", "loss": "loss",
               "host_drops": "host egress drops"}

# Host CPU busy share (all cores, psutil.cpu_percent over ~100 ms windows) at or above which
# a window counts as saturated. HTB's watchdog timers, netem's delay line and the agents'
# sockets all run in softirq and process context on the same cores: once the cores are busy
# all the time, dequeues and deliveries wait for CPU and the emulated rate and delay stretch.
# 90% and not 100%: a 100 ms window at 90% already means ~10 ms of runnable work queued
# behind other work on a 2-core host, longer than a 1 ms HTB burst or a 10 ms sample.
# The run counts as saturated when at least 5% of its windows are (their p95 >= threshold).
CPU_SATURATED_PCT = 90.0


def cpu_summary(busy_pct: Sequence[float], threshold_pct: float = CPU_SATURATED_PCT
                ) -> dict[str, Any]:
    """``{"busy_pct_mean", "busy_pct_p95", "saturated", "threshold_pct"}`` of host CPU busy
    samples (percent of all cores, one per ~100 ms window); saturated when the 95th
    percentile reaches ``threshold_pct``. No samples: mean/p95 None, not saturated."""
    if len(busy_pct) == 0:
        return {"busy_pct_mean": None, "busy_pct_p95": None, "saturated": False,
                "threshold_pct": threshold_pct}
    arr = np.asarray(busy_pct, dtype=float)
    p95 = float(np.percentile(arr, 95))
    return {"busy_pct_mean": round(float(arr.mean()), 2), "busy_pct_p95": round(p95, 2),
            "saturated": p95 >= threshold_pct, "threshold_pct": threshold_pct}


def traffic_windows(timeline: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """(first op start, last op end) in seconds of each workload in ``timeline`` records
    (timeline.jsonl: ``t_start``, ``t_end``, ``workload_index``): when traffic was planned.
    Agents starting up (seconds of CPU each under software emulation) fall outside."""
    spans: dict[Any, tuple[float, float]] = {}
    for r in timeline:
        key = r.get("workload_index")
        lo, hi = spans.get(key, (r["t_start"], r["t_end"]))
        spans[key] = (min(lo, r["t_start"]), max(hi, r["t_end"]))
    return sorted(spans.values())


def samples_in_windows(samples: Sequence[tuple[float, float]], interval_s: float,
                       windows: Sequence[tuple[float, float]]) -> list[float]:
    """Busy percentages of the CPU ``samples`` ((end time s, percent) over the preceding
    ``interval_s``) whose window overlaps one of ``windows``; all of them if there are none."""
    if not windows:
        return [pct for _, pct in samples]
    return [pct for t, pct in samples
            if any(t > lo and t - interval_s < hi for lo, hi in windows)]


def direction_entry(ref: DirectionRef, qdisc: pd.DataFrame | None, links: pd.DataFrame | None,
                    rtt_s: float | None) -> dict[str, Any]:
    """One entry of ``links`` in fidelity.json for ``ref``: configured, measured, checks, ok
    (no check ``off``). ``rtt_s``: the probed minimum RTT of the link (None: not probed)."""
    rate, rate_want, rate_status = rate_check(qdisc, ref)
    loss, loss_status = loss_check(qdisc, links, ref)
    delay, delay_status = delay_check(ref)
    host_drops, host_status = host_drops_check(qdisc, ref)
    checks = {"rate": rate_status, "rtt": rtt_check(rtt_s, ref), "loss": loss_status}
    if ref.line is not None:
        checks["delay"] = delay_status
    if host_status is not None:
        checks["host_drops"] = host_status
    s = ref.configured
    return {"link": ref.link, "node": ref.tx_node, "ifname": ref.tx_dev,
            "direction": ref.direction,
            "configured": {"rate_bps": s.rate_bps, "delay_s": s.delay_s,
                           "loss_pct": configured_loss_pct(s)},
            "measured": {"rate_bps": None if rate is None else round(rate),
                         "rate_expected_bps": None if rate_want is None else round(rate_want),
                         "rtt_s": rtt_s, "loss_pct": loss,
                         **({} if host_status is None else {"host_drops": host_drops}),
                         **({} if ref.line is None else {
                             "line_delay_p50_s": delay, "line_delay_p99_s": ref.line.delay_p99_s,
                             "line_in_packets": ref.line.in_packets,
                             "line_dropped_model": ref.line.dropped_model,
                             "line_dropped_kernel": ref.line.dropped_kernel})},
            "delay_line": "native" if ref.line is not None else
            ("netem" if ref.netem_dev is not None else None),
            "events_set": _events_set(ref),
            "checks": checks, "ok": "off" not in checks.values()}


def _events_set(ref: DirectionRef) -> list[str]:
    """What the run's ``events:`` set on this direction (so its checks used those values)."""
    e = ref.effects
    if e is None:
        return []
    return [w for w, on in (("rate", bool(e.rate_changes)), ("down", bool(e.down)),
                            ("loss", e.loss_set), ("delay", e.delay_set)) if on]


def _reasons(entry: Mapping[str, Any], ref: DirectionRef) -> list[str]:
    where = f"link {entry['link']} {entry['direction']} ({entry['node']}:{entry['ifname']})"
    got, want, checks = entry["measured"], entry["configured"], entry["checks"]
    out = []
    if checks["rate"] == "off":
        source = "in force (events changed it)" if entry.get("events_set") else "configured"
        out.append(f"{where}: rate {got['rate_bps'] / 1e6:.3f} Mbit/s measured while "
                   f"backlogged throughout, {got['rate_expected_bps'] / 1e6:.3f} Mbit/s {source}")
    if checks["rtt"] == "off":
        low, high = rtt_tolerance_s(ref.configured, ref.reverse, ref.precise)
        out.append(f"{where}: RTT {got['rtt_s'] * 1e3:.3f} ms measured, "
                   f"{expected_rtt_s(ref.configured, ref.reverse) * 1e3:.3f} ms expected "
                   f"(the configured delays; accepted {low * 1e3:.3f}..{high * 1e3:.3f} ms)")
    if checks.get("delay") == "off":
        out.append(f"{where}: the native delay line's median added delay "
                   f"{got['line_delay_p50_s'] * 1e3:.3f} ms, {ref.configured.delay_s * 1e3:.3f} ms "
                   "configured")
    if checks.get("host_drops") == "off":
        out.append(f"{where}: {got['host_drops']} packets dropped at the host's own egress "
                   "queue (a real host's NIC queue does not drop its TCP segments: the scaled "
                   "buffer is smaller than what TCP Small Queues let in; TCP waits where the "
                   "unscaled network would not)")
    if checks["loss"] == "off":
        out.append(f"{where}: loss {got['loss_pct']:.4g}% measured, "
                   f"{want['loss_pct']:.4g}% configured")
    return out


def check_coverage(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Which checks of fidelity.json's ``links`` entries ran: ``{"directions": n,
    "exercised": {check: directions judged ok or off}, "not_exercised": {check: ["link
    direction", ...]}}``, checks in :data:`CHECK_NAMES` order, a check absent from every
    entry (``delay`` without native lines) left out. A verdict passes only what was
    exercised: a rate check without a standing backlog (an incast's short bursts) or an RTT
    never probed says nothing about that direction. Pure."""
    exercised: dict[str, int] = {}
    missing: dict[str, list[str]] = {}
    for name in CHECK_NAMES:
        states = [(f"{e['link']} {e['direction']}", e["checks"][name]) for e in entries
                  if name in e["checks"]]
        if not states:
            continue
        exercised[name] = sum(v != "not_exercised" for _, v in states)
        gaps = [where for where, v in states if v == "not_exercised"]
        if gaps:
            missing[name] = gaps
    return {"directions": len(entries), "exercised": exercised, "not_exercised": missing}


def coverage_words(coverage: Mapping[str, Any], most: int = 3) -> tuple[str, str]:
    """(what was checked, what was not) of a :func:`check_coverage` in words: ``"rate on 3 of
    30 shaped directions, RTT on 15 of 30, ..."`` (checks that ran on no direction left
    out; ``""`` when none ran) and ``"rate on 27 directions (a-b a->b, ... and 24 more),
    ..."`` (``""`` when every check ran everywhere), naming at most ``most`` directions per
    check. Pure."""
    n = coverage["directions"]
    ran = [(name, k) for name, k in coverage["exercised"].items() if k]
    passed = ", ".join(f"{CHECK_NAMES[name]} on {k} of {n}" + (" shaped directions" if not i
                                                                  else "")
                       for i, (name, k) in enumerate(ran))
    parts = []
    for i, (name, where) in enumerate(coverage["not_exercised"].items()):
        more = f" and {len(where) - most} more" if len(where) > most else ""
        unit = (" direction" if len(where) == 1 else " directions") if not i else ""
        parts.append(f"{CHECK_NAMES[name]} on {len(where)}{unit} "
                     f"({', '.join(where[:most])}{more})")
    return passed, ", ".join(parts)


def fidelity_report(refs: Sequence[DirectionRef], qdisc: pd.DataFrame | None,
                    links: pd.DataFrame | None, rtts: Mapping[str, float | None],
                    cpu: Mapping[str, Any], run_checks: Mapping[str, Mapping[str, Any]]
                    | None = None) -> dict[str, Any]:
    """The fidelity.json document: one entry per direction of ``refs`` (``rtts``: link name
    -> probed minimum RTT in seconds or None), the CPU summary (:func:`cpu_summary`),
    ``trustworthy`` (no check off and CPU not saturated; None when nothing was assessed: no
    CPU samples, or shaped links none of whose checks could run), the ``reasons``, the
    ``warnings`` and the ``coverage`` (:func:`check_coverage`: which checks ran on which
    directions).

    ``run_checks``: checks of the whole run (analysis/fidelity/run_checks.py: stalls, the
    counter sampler, scaled BDPs), name -> a dict with its figures and optionally
    ``reason`` (a finding that makes the run untrustworthy) and ``warning`` (one that
    does not); each is kept under its name without those two keys."""
    entries, reasons = [], []
    for ref in refs:
        entry = direction_entry(ref, qdisc, links, rtts.get(ref.link))
        entries.append(entry)
        reasons += _reasons(entry, ref)
    if cpu.get("saturated"):
        reasons.append(f"host CPU saturated: 95th percentile of busy share "
                       f"{cpu['busy_pct_p95']:.0f}% >= {cpu['threshold_pct']:.0f}%: emulated "
                       "rates and delays stretch when dequeues wait for a CPU")
    warnings, extra = [], {}
    for name, found in (run_checks or {}).items():
        extra[name] = {k: v for k, v in found.items() if k not in ("reason", "warning")}
        if found.get("reason"):
            reasons.append(found["reason"])
        if found.get("warning"):
            warnings.append(found["warning"])
    exercised = any(v == "ok" for e in entries for v in e["checks"].values())
    coverage = check_coverage(entries)
    doc = {"links": entries, "cpu": dict(cpu), **extra, "warnings": warnings,
           "coverage": coverage}
    if not reasons and (cpu.get("busy_pct_p95") is None or (entries and not exercised)):
        # nothing was measured (interrupted before the workloads, no CPU samples, or no check
        # could run): no verdict rather than a clean bill of health
        return {**doc, "trustworthy": None,
                "reasons": ["not assessed: no CPU samples while workloads ran, or no shaped "
                            "link direction could be checked"]}
    return {**doc, "trustworthy": not reasons, "reasons": reasons}
