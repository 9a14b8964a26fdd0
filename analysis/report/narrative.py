"""What a researcher reads first: per workload, the result in words and numbers (pure).

One section per workload of the manifest, built from the run's records and metrics:
training and collectives (first what bound them, in words with the numbers: link, latency,
compute, loss or the host's CPU, analysis.metrics.bound; then iteration time, compute vs
exposed communication, DCI share, the critical link and the stragglers by compute and by
network), incast (goodput against the number of senders, the slowest flow (longest FCT),
its sender and retransmissions), federated learning (round time and the client whose
upload ended last), inference (TTFT p50 and p99), and per event of the ``events:``
timeline that hit the workload what it hit, whether and when goodput recovered and the
worst iteration's inflation (analysis.metrics.events). Numbers are in human units
(:mod:`analysis.report.units`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.report.units import bits, duration, share, size, spans

__all__ = ["workload_sections", "dci_time", "verdict", "failure_words"]

# the advice ending an overdue transfer's error (traffic_gen/transfers.py OVERDUE_ADVICE,
# a layer analysis does not import); the cause replaces it as in the runner's error
_OVERDUE_ADVICE = "raise timeouts.transfer in the experiment or shrink the transfer"


def _of(frame: pd.DataFrame, w: int) -> pd.DataFrame:
    if frame.empty:
        return frame
    idx = frame["workload_index"] if "workload_index" in frame else pd.Series(0, frame.index)
    return frame[idx.fillna(0).astype(int) == w]


def _pct(values: pd.Series, q: float) -> float:
    return float(np.percentile(values.dropna().to_numpy(), q))


def dci_time(row: dict[str, Any]) -> str:
    """``row`` (analysis.dci's ``per_workload`` or ``totals``: ``dci_collective_time_s``,
    ``iteration_time_s``, ``share``) in words: "172 ms of 212 ms (81.2% of the iteration
    time)". One wording for the results and the DCI section."""
    return (f"{duration(row.get('dci_collective_time_s'))} of "
            f"{duration(row.get('iteration_time_s'))} ({share(row.get('share'))} of the "
            "iteration time)")


def _window(e: dict[str, Any]) -> str:
    a, b = e.get("cwnd_start"), e.get("cwnd_end")
    if a is None or b is None:
        return ""
    if b > a:
        return f" while the window grew from {a} to {b} segments"
    return f" with the window at {b} segments"


def _no_link_above(busy: Any) -> str:
    return "" if busy is None else f"; no link above {share(busy)} of its rate"


def verdict(v: dict[str, Any]) -> str:
    """One workload's verdict (metrics.json ``attribution.per_workload`` row) in words with
    its numbers: iteration time, the group of collectives that took most of it, what bound
    them (analysis.metrics.bound) and, where there is one, the second cause, e.g.
    "iteration 272 ms, 96% in DP all-reduces across the DCI, latency-bound: 20.1 ms RTT,
    ~12 round trips while the window grew from 10 to 419 segments; no link above 27% of its
    rate"."""
    e, d, b = v["evidence"], v["dominant"], v["bound"]
    head = (f"Iteration {duration(v['iteration_time_s'])}, {share(d['share'])} in "
            f"{d['group']}, ")
    second = v.get("secondary_bound")
    busy = None if second == "link" else v.get("busy_share_max")
    out = head + _clause(b, e, v.get("critical_link"), busy, first=True)
    if second:
        out += "; also " + _clause(second, v.get("secondary_evidence") or {},
                                   v.get("secondary_critical_link"), None, first=False)
    return out + "."


def _clause(b: str, e: dict[str, Any], lk: dict[str, Any] | None, busy: Any,
            first: bool) -> str:
    """One cause in words (:func:`verdict`): ``b`` the bound, ``e`` the evidence of a
    collective it held, ``lk`` its critical link (bound link), ``busy`` the highest busy
    share to name (None: not named); ``first``: the main cause (the full comparison)."""
    if b == "latency":
        cfg = e.get("rtt_s_configured")
        trips = e.get("round_trips")
        return (f"latency-bound: {duration(e.get('rtt_s'))} RTT"
                + (f" ({duration(cfg)} configured)" if cfg else "")
                + (f", ~{trips:.0f} round trips" if trips is not None else "")
                + _window(e) + _no_link_above(busy))
    if b == "link":
        lk = lk or {}
        q = (f", queue up to {size(lk.get('backlog_bytes_max'))}"
             + (" standing" if lk.get("standing_queue") else "")
             if lk.get("backlog_bytes_max") else ", no queue sampled")
        drops = f", {lk['drops']} drop(s)" if lk.get("drops") else ""
        return (f"link-bound: {lk.get('direction')} ({lk.get('link')}) busy "
                f"{share(lk.get('busy_share'))} of its {bits(lk.get('configured_bps'))}"
                + q + drops)
    if b == "compute":
        text = (f"compute-bound: rank {e.get('late_rank')} (it computed longest before it) "
                f"arrived {duration(e.get('arrival_lag_s'))} after the median rank")
        if not first:
            return text
        return (text + f", longer than the collective took after it arrived "
                f"({duration(e.get('after_last_arrival_s'))})" + _no_link_above(busy))
    if b == "loss":
        return (f"loss-bound: {e.get('retransmissions')} retransmission(s) on "
                f"{e.get('transfers_retransmitting')} critical transfer(s), which took "
                f"{duration(e.get('loss_s'))} of the critical path's "
                f"{duration(e.get('transfer_s'))}; {duration(e.get('rtt_s'))} RTT"
                + _no_link_above(busy))
    if e.get("unshaped_path"):
        return ("host-CPU-bound: no link on the critical path has a configured rate or "
                "delay, so the hosts moving the packets set the pace, not a link")
    if e.get("rate_off_direction"):
        return (f"host-CPU-bound: the emulation did not deliver the configured rate of "
                f"{e.get('rate_off_direction')} (fidelity.json: untrustworthy), so no link is "
                "to blame")
    cpu = e.get("cpu_busy_pct_p95")
    return ("host-CPU-bound: the host's CPU was saturated"
            + (f" (busy {cpu:.0f}% at p95)" if cpu is not None else "")
            + f" and round trips at the configured RTT explain "
            f"{duration(e.get('round_trips_explain_s'))} of the critical path's "
            f"{duration(e.get('latency_s'))} (fidelity.json: untrustworthy), so no link is to "
            "blame" + _no_link_above(busy))


def failure_words(f: dict[str, Any]) -> str:
    """A failure record (manifest ``workloads[].failures``) told with its cause where the
    runner found one (``extra.links_down``, ``extra.agents_stopped`` and the ``events:``
    indices behind them, orchestration/run/event_hits.py): the link down on the transfer's
    path or the agent stopped, not the rank at its other end."""
    detail = str(f.get("detail", f))
    extra = f.get("extra") or {}
    links, stopped = extra.get("links_down") or [], extra.get("agents_stopped") or {}
    why = []
    if links:
        why.append(f"link{'s' * (len(links) > 1)} {', '.join(links)} down on its path")
    if stopped:
        why.append("agent " + ", ".join(f"{n} {how}" for n, how in stopped.items()))
    if not why:
        return detail
    evs = ", ".join(f"events[{e}]" for e in extra.get("events") or [])
    cause = "; ".join(why) + (f" ({evs})" if evs else "")
    if detail.endswith(_OVERDUE_ADVICE):  # a longer timeout would not have saved it
        return detail[: -len(_OVERDUE_ADVICE)] + cause
    return f"{detail}; {cause}"


def _verdicts(w: int, m: dict[str, Any]) -> list[str]:
    return [verdict(v) for v in (m.get("attribution") or {}).get("per_workload") or []
            if v["workload_index"] == w]


def _training(w: int, m: dict[str, Any], dci: dict[str, Any] | None) -> list[str]:
    iters = [i for i in m["cct"]["iterations"] if i["workload_index"] == w]
    if not iters:
        return []
    t = pd.DataFrame(iters)
    out = _verdicts(w, m)
    out += [f"{len(t)} iteration(s): iteration time {duration(t['iteration_time_s'].median())}"
           + (f" median (min {duration(t['iteration_time_s'].min())}, max "
              f"{duration(t['iteration_time_s'].max())})" if len(t) > 1 else "")
           + f"; the busiest rank computed {duration(t['compute_s'].median())}, exposed "
           f"communication {duration(t['comm_exposed_s'].median())} (computing "
           f"{share(t['compute_share'].median())} of the time)."]
    rows = [r for r in (dci or {}).get("iterations", []) if r["workload_index"] == w]
    if rows and any(r["collectives_crossing"] for r in rows):
        dt = sum(r["dci_collective_time_s"] for r in rows)
        it = sum(r["iteration_time_s"] for r in rows)
        out.append("DCI-crossing collectives were in progress " + dci_time(
            {"dci_collective_time_s": dt, "iteration_time_s": it,
             "share": dt / it if it else None}) + ".")
    out += _attribution(w, m)
    return out


def _attribution(w: int, m: dict[str, Any]) -> list[str]:
    rows = [r for r in m.get("attribution", {}).get("per_iteration", [])
            if r["workload_index"] == w]
    out = []
    links = [r.get("critical_link") for r in rows if r.get("critical_link")]
    if links:
        lk = links[-1]
        out.append(f"Critical link: {lk['direction']} ({lk['link']}), busy "
                   f"{share(lk['busy_share'])} of its {bits(lk['configured_bps'])}"
                   f" (network straggler: rank {rows[-1].get('network_straggler_rank')}).")
    slow = sorted({r["compute_straggler_rank"] for r in rows
                   if r.get("compute_straggler_rank") is not None})
    out.append(f"Compute stragglers: rank(s) {', '.join(map(str, slow))}." if slow else
               "No compute straggler (every rank computed within 5% or 2 ms of the median).")
    return out


def _incast(w: int, m: dict[str, Any], flows: pd.DataFrame) -> list[str]:
    bursts = [b for b in m["incast"]["per_burst"] if b["workload_index"] == w]
    if not bursts:
        return []
    b = pd.DataFrame(bursts)
    out = [f"{len(b)} burst(s) of {int(b['senders'].max())} sender(s) into "
           f"{b['bottleneck'].iloc[0] or 'the receiver'}: goodput {bits(b['goodput_bps'].mean())}"
           f" mean, loss {share(m['incast']['loss_ratio'])} of packets offered."]
    out += _worst_burst(b)
    by_n = b.groupby("senders")["goodput_bps"].mean()
    if len(by_n) > 1:
        out.append("Goodput by senders: " + ", ".join(
            f"{n}: {bits(g)}" for n, g in by_n.items()) + ".")
    f = _of(flows, w)
    if not f.empty and "burst_id" in f and f["t_end"].notna().any():
        done = f[f["t_end"].notna()]
        slow = done.loc[(done["t_end"] - done["t_start"]).idxmax()]
        start = f[f["burst_id"] == slow["burst_id"]]["t_start"].min()
        rt = slow.get("tcp_total_retrans")
        out.append(f"Slowest flow: {slow['src_node']} (rank {int(slow['src_rank'])}), FCT "
                   f"{duration(slow['t_end'] - slow['t_start'])}, done "
                   f"{duration(slow['t_end'] - start)} after its burst began"
                   + (f", {int(rt)} retransmission(s) (TCP_INFO)." if pd.notna(rt) else "."))
    return out


def _worst_burst(b: pd.DataFrame) -> list[str]:
    """The burst that took longest (the collapsed one an incast study is after) beside the
    mean, and the distribution of the bursts' finish times (each one up to 12 bursts, else
    quantiles)."""
    if "finish_s" not in b or b["finish_s"].isna().all():
        return []
    done = b[b["finish_s"].notna()]
    worst = done.loc[done["finish_s"].idxmax()]
    drops = worst.get("drops")
    what = (f"{int(drops)} drop(s)" if pd.notna(drops) else
            f"drops {str(worst.get('counts') or 'unknown')}")
    out = [f"Worst burst {worst['burst_id']}: finished in {duration(worst['finish_s'])} "
           f"(mean {duration(done['finish_s'].mean())}), goodput {bits(worst['goodput_bps'])}, "
           f"{what}."]
    times = done["finish_s"].to_numpy()
    if len(times) <= 12:
        dist = ", ".join(duration(x) for x in times)
        out.append(f"Burst finish times in order: {dist}.")
    else:
        q = done["finish_s"].quantile([0.1, 0.5, 0.9])
        out.append(f"Burst finish times: p10 {duration(q[0.1])}, p50 {duration(q[0.5])}, "
                   f"p90 {duration(q[0.9])}, max {duration(times.max())}.")
    unknown = int((b["counts"] != "exact").sum()) if "counts" in b else 0
    if unknown:
        out.append(f"Drops of {unknown} burst(s) unknown, not estimated (the per-burst rows "
                   "say why).")
    return out


def _rounds(w: int, rounds: pd.DataFrame, flows: pd.DataFrame) -> list[str]:
    r = _of(rounds, w)
    if r.empty:
        return []
    out = [f"{len(r)} round(s): round time {duration(r['round_time_s'].median())}"
           + (" median" if len(r) > 1 else "")
           + f"; {int(r['clients_finished'].sum())} of {int(r['clients_selected'].sum())} "
           f"selected clients finished."]
    f = _of(flows, w)
    for _, row in r.iterrows():
        up = f[(f["dst_node"] == row["aggregator"]) & (f["t_end"] <= row["t_end"] + 1e-6)
               & (f["t_start"] >= row["t_start"] - 1e-6)] if not f.empty else f
        if not up.empty:
            last = up.loc[up["t_end"].idxmax()]
            out.append(f"Round {int(row['round'])} ({duration(row['round_time_s'])}) was set "
                       f"by {last['src_node']}, whose upload ended last.")
    return out


def _requests(w: int, requests: pd.DataFrame) -> list[str]:
    r = _of(requests, w)
    if r.empty or "ttft_s" not in r or not r["ttft_s"].notna().any():
        return []
    return [f"{len(r)} request(s): time to first token {duration(_pct(r['ttft_s'], 50))} p50, "
            f"{duration(_pct(r['ttft_s'], 99))} p99."]


def _events(w: int, m: dict[str, Any]) -> list[str]:
    out = []
    for r in (m.get("events") or {}).get("impact") or []:
        if r["workload_index"] != w:
            continue
        its, rds = r["iterations_hit"], r["rounds_hit"]
        hit = (f"iteration{'s' * (len(its) > 1)} {spans(its)}" if its else
               f"round{'s' * (len(rds) > 1)} {spans(rds)}" if rds else "no iteration")
        text = (f"events[{r['event']}] {r['kind']} ({r['target']}) at {r['start_s']:.3f} s hit "
                f"{hit} and {r['flows_hit']} flow(s)")
        text += _recovery_words(r)
        if r["iteration_inflation_max"] is not None:
            text += (f"; the worst hit iteration ({r['iteration_worst']}) took "
                     f"{r['iteration_inflation_max']:.2f}x the median before "
                     f"({duration(r['iteration_time_before_s'])})")
        out.append(text + ".")
    return out


def _recovery_words(r: dict[str, Any]) -> str:
    """The recovery clause of an event's sentence: by pace (iterations or rounds against the
    pre-event median) or by goodput (analysis.metrics.events)."""
    if r.get("recovery_method") == "pace":
        pace = f"its pre-event pace ({duration(r['iteration_time_before_s'])} per iteration)"
        slow = (f"{r['slowdown_mean']:.2f}x on average, worst {r['slowdown_max']:.2f}x"
                if r.get("slowdown_mean") is not None else "")
        if r["recovered"] and r["recovery_s"] == 0:
            return f"; the job kept {pace}"
        if r["recovered"]:
            return (f"; the job was back to {pace} {duration(r['recovery_s'])} later, "
                    f"sustained (until then iterations took {slow})")
        if r["recovered"] is False:
            return f"; the job did NOT get back to {pace} before it ended (iterations took {slow})"
        return ""
    if r["recovered"]:
        return (f"; goodput stayed above 90% of before ({bits(r['baseline_goodput_bps'])})"
                if r["recovery_s"] == 0 else
                f"; goodput was back to 90% of before ({bits(r['baseline_goodput_bps'])})"
                f" {duration(r['recovery_s'])} later")
    if r["recovered"] is False:
        return (f"; goodput did NOT recover to 90% of before "
                f"({bits(r['baseline_goodput_bps'])}) before the traffic ended")
    return ""


def workload_sections(manifest: dict[str, Any], m: dict[str, Any], tables: Any
                      ) -> list[dict[str, Any]]:
    """Per workload of ``manifest["workloads"]``: ``{"index", "name", "ok", "sentences"}``;
    ``tables`` is the run's :class:`analysis.tables.RunTables`."""
    flows, rounds = tables.table("flows"), tables.table("rounds")
    requests = tables.table("requests")
    out = []
    for wl in manifest.get("workloads") or []:
        w = int(wl.get("index", 0))
        sentences = (_training(w, m, tables.dci) + _incast(w, m, flows)
                     + _rounds(w, rounds, flows) + _requests(w, requests) + _events(w, m))
        if not wl.get("ok", True):
            sentences.insert(0, "This workload FAILED: " + "; ".join(
                failure_words(f) for f in wl.get("failures") or []))
        out.append({"index": w, "name": wl.get("name", f"workload {w}"),
                    "ok": wl.get("ok", True),
                    "sentences": sentences or ["No records of this workload."]})
    return out
