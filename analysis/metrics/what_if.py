"""What-if: the iteration time and the CCT of every collective had one cause been smaller
(pure).

Three cases, each estimated from the run's critical paths (analysis.metrics.attribution):

* ``link_x2``: the workload's critical link (its ``per_workload`` verdict's; where none was
  named, the direction with the lowest configured rate on its collectives' transfers'
  paths) twice as fast;
* ``straggler_at_median``: each iteration's compute straggler computing as long as the median
  rank (analysis.metrics.attribution's ``compute_s_max - compute_s_median`` removed);
* ``rtt_half``: every configured delay halved.

The method is the what-if analysis of Lin et al. ("Understanding Stragglers in Large Model
Training Using What-if Analysis", arXiv:2505.05713, 2025): change the durations of the
operations on the critical path and add the change to the time they set, the path taken to
stay critical between collectives (a first-order estimate: where a change makes another
collective's chain the longest, the iteration estimate is a lower bound of the new time).

A transfer's duration under a case comes from the alpha-beta model (Hockney, "The
communication challenge for MPP: Intel Paragon and Meiko CS-2", Parallel Computing 20(3),
1994: time = alpha + size / beta) fitted to the transfer as measured: beta is its path's
bottleneck, the lowest configured rate of a hop on it, so ``serial = size x 8 / rate``
(at most its FCT), and alpha the rest of its FCT, ``fct - serial``: the round trips its
window needed (slow start doubles the window once per round trip, RFC 5681, so a
window-limited transfer needs a number of round trips that does not depend on the RTT,
and its time is that number times the RTT: the slow-start latency model of Cardwell,
Savage and Anderson, "Modeling TCP Latency", INFOCOM 2000; a paced sender's time per
window is one RTT as well). ``link_x2`` gives a transfer whose path crosses the critical
direction the path's new bottleneck (that direction at twice its rate, the other hops as
they were): ``alpha + serial x rate / new rate``; ``rtt_half`` scales alpha by the RTT's
change, the RTT being the connection's measured minimum (TCP_INFO ``min_rtt_s``, which
carries the hosts' stack time; else the configured RTT) less half the configured one:
``serial + alpha x (rtt - configured / 2) / rtt``.

A collective in which the critical direction was saturated (``bound`` link there, or a busy
share of at least analysis.metrics.bound.BUSY_LINK over its critical path) queues its
transfers behind each other on that direction, so their FCTs hold waiting as well as
sending; for it ``link_x2`` takes the direction's own occupancy instead: its busy time
``busy = bytes of the collective's transfers across it x 8 / rate`` (at most the CCT)
shrinks to ``busy x rate / new rate``, the rest of the CCT as it was.

A collective's estimated CCT is its measured CCT plus the change of its end when its
transfers are replayed with their estimated durations, each after the transfers it waited
for (:func:`_replay_end_shift`: the longest chain of that graph is its critical path, and
where a change makes another chain the longest, the replay follows it); an iteration's,
its measured iteration time plus the changes of the collectives on its critical chain
(from the collective that ended last, repeatedly the one that ended last before it began).
``straggler_at_median``: in a collective whose last-arriving rank is its iteration's
compute straggler, that rank arrives its lag earlier (at most the straggler's compute
excess, spent across the iteration's collectives in order): its sends that waited for
nothing start that much earlier and a transfer into it that began before it arrived lasts
as long as the median transfer between the other ranks; replayed.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from analysis.metrics.bound import BUSY_LINK

__all__ = ["CASES", "SOURCE", "transfer_estimate_s", "what_if_metrics"]

CASES = ("link_x2", "straggler_at_median", "rtt_half")
SOURCE = ("Lin et al., Understanding Stragglers in Large Model Training Using What-if "
          "Analysis, arXiv:2505.05713, 2025 (critical-path what-if); alpha-beta model "
          "(Hockney 1994) with TCP slow-start round trips (RFC 5681; Cardwell, Savage and "
          "Anderson, Modeling TCP Latency, INFOCOM 2000)")
FORMULA = ("transfer: fct = alpha + serial, serial = min(size x 8 / bottleneck rate, fct); "
           "link_x2: alpha + serial x rate / new rate (a saturated critical direction: "
           "CCT - busy x (1 - rate / new rate)); rtt_half: serial + alpha x "
           "(rtt - configured / 2) / rtt; straggler_at_median: the late rank's sends "
           "start its saved lag earlier, transfers into it last as long as the others")
_ORDER_EPS_S = 1e-4  # one host clock: a collective that began as another ended followed it


def _rtt_s(x: dict[str, Any]) -> float:
    return x["rtt_s"] if x["rtt_s"] is not None else (x["rtt_s_configured"] or 0.0)


def _rates(x: dict[str, Any], hop: tuple[str, str, str] | None) -> tuple[float | None,
                                                                         float | None]:
    """The bottleneck rate (bit/s) of ``x``'s path as configured and with ``hop`` at twice
    its rate (None: no hop has a rate)."""
    rates = [(h[0], h[1], h[2]) for h in x["hops"] if h[2]]  # link, node, rate_bps
    rate = min((r for *_, r in rates), default=None)
    if hop is None:
        return rate, rate
    return rate, min((r * 2 if (a, b) == hop[:2] else r for a, b, r in rates), default=None)


def transfer_estimate_s(x: dict[str, Any], case: str,
                        hop: tuple[str, str, str] | None = None) -> float:
    """A transfer's estimated duration (s) under ``case`` (module docstring): ``x`` its
    model inputs (analysis.metrics.attribution.model_inputs: ``size_bytes``, ``fct_s``,
    ``rtt_s``, ``rtt_s_configured``, ``hops``), ``hop`` (link, sending node, direction) the
    direction ``link_x2`` doubles. Other cases leave it as measured."""
    fct = float(x["fct_s"])
    rate, new_rate = _rates(x, hop)
    serial = min(x["size_bytes"] * 8 / rate, fct) if rate else 0.0
    alpha = fct - serial
    if case == "link_x2" and rate and new_rate:
        return alpha + serial * rate / new_rate
    if case == "rtt_half":
        rtt = _rtt_s(x)
        new = max(rtt - (x["rtt_s_configured"] or 0.0) / 2, 0.0)
        return serial + (alpha * new / rtt if rtt > 0 else alpha)
    return fct


def _replay_end_shift(transfers: list[dict[str, Any]], duration: Any,
                      shift: Any = None) -> float:
    """How much later (s; negative: earlier) one collective instance's last transfer ends
    when its transfers (analysis.metrics.attribution.model_inputs) are replayed in the
    order they started: each starts after the transfers it waited for (the last receive
    into its sender and the sender's last send that ended before it started, of an earlier
    step of the algorithm where the records name steps: a ring step waits for both) ended
    in the replay, plus the gap it left after them as run, or, waiting for none, at its
    start moved by ``shift(transfer)`` (s); it lasts ``duration(transfer)`` (s). The
    longest chain of that graph is the collective's critical path."""
    if not transfers:
        return 0.0
    shift = shift or (lambda g: 0.0)
    order = sorted(range(len(transfers)), key=lambda i: transfers[i]["t_start"])
    first: dict[Any, float] = {}
    for i in order:
        first.setdefault(transfers[i].get("step"), transfers[i]["t_start"])
    steps = {label: k for k, label in enumerate(sorted(first, key=first.__getitem__))}
    # per (role, rank): the replayed transfers it received (dst_rank) or sent (src_rank)
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    new_end: dict[int, float] = {}
    for i in order:
        g = transfers[i]
        k = steps[g.get("step")] if g.get("step") is not None else None
        preds = []
        for role in ("dst_rank", "src_rank"):  # g's sender's last receive, its last send
            done = [j for j in seen[(role, g["src_rank"])]
                    if transfers[j]["t_end"] <= g["t_start"] + _ORDER_EPS_S
                    and (k is None or steps[transfers[j].get("step")] < k)]
            if done:
                preds.append(max(done, key=lambda j: transfers[j]["t_end"]))
        start = g["t_start"] + shift(g)
        if preds:
            gap = g["t_start"] - max(transfers[j]["t_end"] for j in preds)
            start = max(new_end[j] for j in preds) + max(gap, 0.0)
        new_end[i] = start + duration(g)
        seen[("dst_rank", g["dst_rank"])].append(i)
        seen[("src_rank", g["src_rank"])].append(i)
    return max(new_end.values()) - max(x["t_end"] for x in transfers)


def _critical_hop(verdict: dict[str, Any] | None, inputs: list[list[dict[str, Any]]]
                  ) -> tuple[str, str, str] | None:
    """(link, sending node, direction) of the workload's critical link, else of the
    direction with the lowest configured rate on its collectives' transfers' paths (most
    transfers on a tie); None when no hop there has a rate."""
    lk = (verdict or {}).get("critical_link")
    if lk:
        return (lk["link"], lk["node"], lk["direction"])
    count: dict[tuple[str, str, int, str], int] = defaultdict(int)
    for path in inputs:
        for x in path:
            for h in x["hops"]:
                if h[2]:
                    count[(h[0], h[1], h[2], h[3])] += 1
    if not count:
        return None
    best = min(count, key=lambda k: (k[2], -count[k]))
    return (best[0], best[1], best[3])


def _chain(colls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The iteration's critical chain of collectives (module docstring)."""
    c = max(colls, key=lambda r: r["t_end"])
    out = [c]
    while True:
        before = [d for d in colls if d["t_end"] <= c["t_start"] + _ORDER_EPS_S
                  and d not in out]
        if not before:
            return out[::-1]
        c = max(before, key=lambda r: r["t_end"])
        out.append(c)


def _occupancy_cct_s(c: dict[str, Any], transfers: list[dict[str, Any]],
                     hop: tuple[str, str, str] | None) -> float | None:
    """``link_x2``'s CCT (s) of a collective that saturated ``hop`` (module docstring), None
    for one that did not."""
    if hop is None:
        return None
    lk = c.get("critical_link") or {}
    hot = (lk.get("link"), lk.get("node")) == hop[:2] or any(
        (r["link"], r["node"]) == hop[:2] and (r.get("busy_share") or 0.0) >= BUSY_LINK
        for r in c.get("hops") or [])
    across = [x for x in transfers if any((h[0], h[1]) == hop[:2] for h in x["hops"])]
    if not hot or not across:
        return None
    rate = next(h[2] for h in across[0]["hops"] if (h[0], h[1]) == hop[:2])
    new_rate = min(_rates(x, hop)[1] or rate * 2 for x in across)
    cct = c["t_end"] - c["t_start"]
    busy = min(sum(x["size_bytes"] for x in across) * 8 / rate, cct)
    return cct - busy * (1 - rate / new_rate)


def _straggler_cct_s(c: dict[str, Any], transfers: list[dict[str, Any]], saved: float
                     ) -> float:
    """``straggler_at_median``'s CCT (s) of a collective whose late rank arrives ``saved``
    earlier (module docstring): its sends that waited for nothing start that much earlier,
    a transfer into it that began before it arrived lasts as long as the median transfer
    between the other ranks (as run), the rest as measured, replayed."""
    cct = c["t_end"] - c["t_start"]
    late = c["evidence"].get("late_rank")
    mine = [x["t_start"] for x in transfers if x["src_rank"] == late]
    others = [x["fct_s"] for x in transfers if late not in (x["src_rank"], x["dst_rank"])]
    if saved <= 0 or not mine:
        return cct
    arrived = min(mine)
    typical = statistics.median(others) if others else None

    def duration(x: dict[str, Any]) -> float:
        if typical is not None and x["dst_rank"] == late and x["t_start"] < arrived:
            return min(x["fct_s"], typical)
        return x["fct_s"]

    return cct + _replay_end_shift(transfers, duration,
                                   lambda x: -saved if x["src_rank"] == late else 0.0)


def _straggler_savings(colls: list[dict[str, Any]], comp: dict[str, Any] | None
                       ) -> dict[str, float]:
    """Per collective_id, the time its end moves earlier were the iteration's compute
    straggler at the median (module docstring)."""
    if not comp or comp.get("compute_straggler_rank") is None:
        return {}
    excess = max(float(comp["compute_s_max"]) - float(comp["compute_s_median"]), 0.0)
    out = {}
    for c in sorted(colls, key=lambda r: r["t_start"]):
        e = c["evidence"]
        if e.get("late_rank") == comp["compute_straggler_rank"] and e.get("arrival_lag_s"):
            saved = min(float(e["arrival_lag_s"]), excess)
            excess -= saved
            out[c["collective_id"]] = saved
    return out


def what_if_metrics(per_coll: list[dict[str, Any]],
                    inputs: dict[tuple[int, str], list[dict[str, Any]]],
                    iters: Any, compute_rows: list[dict[str, Any]],
                    per_workload: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``attribution.what_if`` section of metrics.json (module docstring): ``source``,
    ``formula``, ``cases``; ``per_collective`` (``cct_s`` measured and per case, s);
    ``per_iteration`` (``iteration_time_s`` measured and per case, s); ``per_workload``
    (``iteration_time_s`` and ``cct_s_median`` as measured, medians over the iterations
    and the collectives; per case the same estimated, ``speedup`` = measured median
    iteration time / estimated, and the case's inputs: the link, the straggler ranks and
    their compute excess, the configured RTT). ``per_coll``: attribution's per_collective
    rows; ``inputs``: per (workload_index, collective_id) its critical path's model inputs
    (attribution.model_inputs); ``iters``: analysis.metrics.collectives.iteration_times;
    ``compute_rows``: attribution's per-iteration compute stragglers."""
    verdicts = {v["workload_index"]: v for v in per_workload}
    by_w: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for c in per_coll:
        by_w[c["workload_index"]].append(c)
    comp = {(r["workload_index"], r["iteration"]): r for r in compute_rows}
    rows_c, rows_i, rows_w = [], [], []
    for w, cs in sorted(by_w.items()):
        hop = _critical_hop(verdicts.get(w), [inputs.get((w, c["collective_id"]), [])
                                              for c in cs])
        est: dict[str, dict[str, float]] = {}
        by_it: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for c in cs:
            by_it[c["iteration"]].append(c)
        saved = {}
        for it, group in by_it.items():
            saved.update(_straggler_savings(group, comp.get((w, it))))
        for c in cs:
            cct = c["t_end"] - c["t_start"]
            transfers = inputs.get((w, c["collective_id"]), [])
            row = {"cct_s": cct}
            for case in ("link_x2", "rtt_half"):
                row[case] = cct + _replay_end_shift(
                    transfers, lambda x, k=case, h=hop: transfer_estimate_s(x, k, h))
            occupied = _occupancy_cct_s(c, transfers, hop)
            if occupied is not None:
                row["link_x2"] = occupied
            row["straggler_at_median"] = _straggler_cct_s(c, transfers,
                                                          saved.get(c["collective_id"], 0.0))
            est[c["collective_id"]] = row
            rows_c.append({"collective_id": c["collective_id"], "workload_index": w,
                           "iteration": c["iteration"], **{
                               (k if k == "cct_s" else f"{k}_cct_s"): v
                               for k, v in row.items()}})
        measured = _measured_iterations(iters, w)
        per_it = []
        for it, group in sorted(by_it.items()):
            t = measured.get(it)
            if t is None:
                continue
            chain = _chain(group)
            r = {"workload_index": w, "iteration": it, "iteration_time_s": t}
            for case in CASES:
                r[f"{case}_s"] = t + sum(est[c["collective_id"]][case]
                                         - est[c["collective_id"]]["cct_s"] for c in chain)
            per_it.append(r)
        rows_i += per_it
        rows_w.append(_workload_row(w, per_it, [est[c["collective_id"]] for c in cs], hop,
                                    comp, cs))
    return {"source": SOURCE, "formula": FORMULA, "cases": list(CASES),
            "per_workload": rows_w, "per_iteration": rows_i, "per_collective": rows_c}


def _measured_iterations(iters: Any, w: int) -> dict[int, float]:
    if iters is None or getattr(iters, "empty", True):
        return {}
    it = iters[iters["workload_index"] == w]
    return {int(i): float(t) for i, t in zip(it["iteration"], it["iteration_time_s"],
                                              strict=True)}


def _workload_row(w: int, per_it: list[dict[str, Any]], est: list[dict[str, float]],
                  hop: tuple[str, str, str] | None, comp: dict[tuple[int, int], dict[str, Any]],
                  cs: list[dict[str, Any]]) -> dict[str, Any]:
    med = statistics.median([r["iteration_time_s"] for r in per_it]) if per_it else None
    cct = statistics.median([e["cct_s"] for e in est]) if est else None
    slow = sorted({(r["compute_straggler_rank"], r["compute_s_max"] - r["compute_s_median"])
                   for (ww, _), r in comp.items()
                   if ww == w and r["compute_straggler_rank"] is not None})
    rtts = [c["evidence"].get("rtt_s_configured") for c in cs]
    inputs = {"link_x2": {"link": hop[0] if hop else None,
                          "direction": hop[2] if hop else None},
              "straggler_at_median": {
                  "ranks": sorted({r for r, _ in slow}),
                  "compute_excess_s_max": max((e for _, e in slow), default=None)},
              "rtt_half": {"rtt_s_configured": max((r for r in rtts if r is not None),
                                                   default=None)}}
    cases = {}
    for case in CASES:
        t = statistics.median([r[f"{case}_s"] for r in per_it]) if per_it else None
        c = statistics.median([e[case] for e in est]) if est else None
        cases[case] = {"iteration_time_s": t, "speedup": med / t if med and t else None,
                       "cct_s_median": c, "inputs": inputs[case]}
    return {"workload_index": w, "iteration_time_s": med, "cct_s_median": cct, **cases}
