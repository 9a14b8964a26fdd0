"""What bound a collective: a link, round trips (latency), a rank's compute, loss, or the
emulating host's CPU, from what the kernel saw (pure).

Inputs: the critical path of the collective instance (analysis.metrics.attribution), the
link directions on each of its transfers' paths (models.paths: rate and delay as configured),
the interface counters (counters/links.parquet: cumulative ``tx_bytes``), the root queues
(counters/qdisc.parquet: ``backlog_bytes``/``backlog_packets``, cumulative ``drops``), the
transfers' TCP_INFO (flows.jsonl ``tcp``; counters/tcp.parquet for the window at a transfer's
start), the per-rank arrivals (collectives.jsonl) and compute (timeline.jsonl), and the
fidelity verdict (fidelity.json).

Per link direction h and set of intervals I (the critical-path transfers that cross h, each
[t_start, t_end]; |I| their total length):

* *busy share* = 8 x bytes(h, I) / (|I| x configured ``rate_bps`` of h), where bytes(h, I)
  is h's sending interface's ``tx_bytes`` increase over I, read off its cumulative counter
  by linear interpolation between samples, where I spans at least ``COUNTER_INTERVALS``
  sampling intervals (``bytes_source`` counters); over shorter intervals, which a 10 ms
  sampler blurs, the bytes of every transfer of the run (all workloads, background too)
  that crosses h, each prorated by the overlap of its interval with I (``records``).
  None for an unshaped direction;
* *queue*: the root queue's samples inside I: the largest and median ``backlog_bytes``, the
  share of samples with a packet waiting, and the ``drops`` added over I. A *standing
  queue* has a packet waiting in at least ``STANDING_SHARE`` of at least
  ``STANDING_MIN_SAMPLES`` samples (the queue never drained while the transfer ran);
* h is *saturated* for a transfer when it carried more than one shaper bucket
  (``SHAPER_BUCKET_S`` of its rate) over the transfer and its busy share reaches
  ``BUSY_LINK`` of the configured rate, or it has a standing queue and at least
  ``BUSY_QUEUE`` (a queue that stands while its link idles is the CPU's, not the link's).

Each critical-path transfer is *link* when a direction on its path is saturated, else *loss*
when it retransmitted (TCP_INFO ``total_retrans - dsack_dups`` > 0: loss recovery or
retransmission timeouts; D-SACKed, spurious retransmissions are not losses, RFC 2883),
else *latency*: nothing held it but round trips while its window grew. The collective's
network verdict is the class that holds most of the critical path's transfer time (ties:
link, loss, latency), except that a link whose busy share over all the critical-path
transfers that cross it stays under ``BUSY_QUEUE`` is blamed for nothing (its transfers
count as latency). Then ``bound`` is

* ``compute`` when the rank that arrived last (analysis.metrics.stragglers: named only
  beyond the start skew) is the compute straggler of the compute just before the
  collective (each rank's compute ops since its previous communication op: more compute
  than the median rank's, attribution.COMPUTE_TOLERANCE and COMPUTE_MIN_S, at a higher
  straggler factor than the median rank's: a rank that overran the compute it was given
  waited on its host, see analysis.metrics.attribution; the iteration's compute straggler
  where the records lack op indices) and its arrival lag exceeds the
  time the collective took after it arrived (the median rank's time in it, max rank end -
  median rank start, minus the lag: inflation above 2 in analysis.metrics.stragglers'
  terms): the others waited for its compute longer than for the network. (The
  critical-path transfers cannot measure that: a transfer to the late rank lasts until it
  reads it);
* ``host_cpu`` when the network verdict is link but fidelity.json calls the run
  untrustworthy and its rate check of that very direction is ``off``: the shaper did not
  deliver its configured rate while backlogged, so the emulating host, not the link,
  held the transfer;
* ``host_cpu`` also when the network verdict is latency but no hop of the critical-path
  transfers has a configured rate and none a configured delay: nothing of the lab's
  making held them, only the hosts that move the packets;
* ``host_cpu`` also when the network verdict is latency, fidelity.json calls the run
  untrustworthy, and the round trips slow start needs (:func:`slow_start_rounds`) at the
  configured RTT explain less than ``LATENCY_EXPLAINS`` of the latency-class time: a 100 KB
  transfer on a path of microseconds that took 100 ms was not held by round trips;
* else the network verdict.

A second cause (``secondary_bound``, None without one): a slow rank and a slow port in one
collective hold it one after the other, the others waiting first for the rank's compute
(its arrival lag) and then for the port. Of compute (that lag, where the late rank is the
compute straggler as above), link (the critical-path transfer time through a saturated
direction, where a critical link was named before any override) and loss (through
retransmissions), the one other than ``bound`` that held the most time is named when it
held at least ``SECONDARY_SHARE`` of the collective (its arrival lag plus the time after
the last arrival, else the critical path's transfer time), with ``secondary_critical_link``
where it is link; ``evidence.secondary_s`` is its time. ``host_cpu`` is never secondary.

The evidence of a ``latency`` verdict: the path RTT (TCP_INFO ``min_rtt_s``, median over the
critical-path transfers; and the configured one, the one-way delays of the forward path
and of the return path summed, the largest over those transfers), the number of round
trips (sum over the critical-path transfers of FCT / their min RTT) and the window's growth
over the longest transfer (``snd_cwnd`` from the last counters/tcp.parquet sample of its
connection at or before its start, else the previous transfer's reading on that
connection, else the initial window, to its reading at its ack instant). This taxonomy
(link, latency, compute, loss) follows the straggler root causes separated by Falcon (Wu et
al., "FALCON: Pinpointing and Mitigating Stragglers for Large-Scale Hybrid-Parallel
Training", arXiv:2410.12588, 2024); the thresholds are aitb's.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.dci import union_length
from analysis.metrics.counters import root_qdiscs

__all__ = ["BOUNDS", "BUSY_LINK", "BUSY_QUEUE", "SECONDARY_SHARE", "SHAPER_BUCKET_S",
           "STANDING_SHARE", "STANDING_MIN_SAMPLES", "KernelView", "collective_bound"]

BOUNDS = ("link", "latency", "compute", "loss", "host_cpu")
INITIAL_WINDOW_BYTES = 10 * 1448  # RFC 6928's initial window of 10 segments, 1448-byte MSS
LATENCY_EXPLAINS = 0.5  # latency-bound needs its round trips to explain half the time
SECONDARY_SHARE = 0.2  # a second cause is named where it held a fifth of the collective


def slow_start_rounds(size_bytes: float) -> int:
    """Round trips TCP's slow start needs to deliver ``size_bytes`` from the initial window,
    the window doubling each round trip (RFC 5681) and no rate limit: the smallest k with
    IW x (2^k - 1) >= size, plus one for the handshake's or the request's round trip."""
    k, sent = 0, 0.0
    while sent < size_bytes:
        sent += INITIAL_WINDOW_BYTES * 2 ** k
        k += 1
    return k + 1
BUSY_LINK = 0.8
BUSY_QUEUE = 0.5
STANDING_SHARE = 0.8
STANDING_MIN_SAMPLES = 3
# the shaper's bucket: HTB lets this much of its rate through at once (HTB_BURST_S,
# testbed/tc/qdiscs/htb.py); a hop that carried no more than that over an interval never made
# anything wait for its rate, however high its busy share over a short interval
SHAPER_BUCKET_S = 0.001
TCP_INIT_CWND = 10  # segments: Linux's initial congestion window (include/net/tcp.h)
# counters resolve an interval spanning this many sampling intervals; shorter ones the records
COUNTER_INTERVALS = 2

HopKey = tuple[str, str, str, int | None]  # link, node, ifname, rate_bps


def _merge(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


class KernelView:
    """The run's counters and records indexed for interval queries: per interface its
    cumulative ``tx_bytes``, per root queue its backlog and drops, per TCP connection its
    ``snd_cwnd`` samples, the fidelity checks per sending interface, and every transfer of
    the run with the link directions on its path (``hops``: a callable transfer -> hops)."""

    def __init__(self, counters: dict[str, pd.DataFrame], fidelity: Any,
                 all_flows: list[dict[str, Any]], hops: Any) -> None:
        self.tx: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        self.tx_dt: dict[tuple[str, str], float] = {}  # median sampling interval (s)
        links = counters.get("links", pd.DataFrame())
        if not links.empty:
            for (node, ifname), g in links.sort_values("t_s").groupby(["node", "ifname"]):
                t = g["t_s"].to_numpy(float)
                self.tx[(node, ifname)] = (t, g["tx_bytes"].to_numpy(float))
                self.tx_dt[(node, ifname)] = float(np.median(np.diff(t))) if t.size > 1 \
                    else float("inf")
        self.queue: dict[tuple[str, str], pd.DataFrame] = {}
        roots = root_qdiscs(counters.get("qdisc", pd.DataFrame()))
        if not roots.empty:
            for (node, ifname), g in roots.sort_values("t_s").groupby(["node", "ifname"]):
                self.queue[(node, ifname)] = g.drop_duplicates("t_s")
        self.cwnd: dict[tuple[str, int, str, int], tuple[np.ndarray, np.ndarray]] = {}
        tcp = counters.get("tcp", pd.DataFrame())
        if not tcp.empty:
            for key, g in tcp.sort_values("t_s").groupby(["src", "sport", "dst", "dport"]):
                self.cwnd[(str(key[0]), int(key[1]), str(key[2]), int(key[3]))] = (
                    g["t_s"].to_numpy(float), g["snd_cwnd"].to_numpy(float))
        fid = fidelity if isinstance(fidelity, dict) else {}
        self.untrustworthy = fid.get("trustworthy") is False
        self.cpu_busy_pct_p95 = (fid.get("cpu") or {}).get("busy_pct_p95") \
            if isinstance(fid.get("cpu"), dict) else None
        self.rate_check = {(e.get("node"), e.get("ifname")): (e.get("checks") or {}).get("rate")
                           for e in fid.get("links") or [] if isinstance(e, dict)}
        self.hops = hops
        crossing: dict[HopKey, list[tuple[float, float, float]]] = defaultdict(list)
        for f in all_flows:
            for h in hops(f):
                crossing[h].append((float(f["t_start"]), float(f["t_end"]),
                                    float(f["size_bytes"])))
        # per direction: (t_start, t_end, size_bytes) arrays of the transfers crossing it
        self.crossing = {h: np.array(v, dtype=float).T for h, v in crossing.items()}
        self.by_conn: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for f in all_flows:
            self.by_conn[_conn(f)].append(f)

    def hop(self, h: HopKey, intervals: Sequence[tuple[float, float]]) -> dict[str, Any]:
        """Busy share and queue of link direction ``h`` over ``intervals`` (module
        docstring): ``busy_share`` (None unshaped), ``bytes`` and its ``bytes_source``
        (``counters`` or ``records``), ``backlog_bytes_max``, ``backlog_bytes_median``,
        ``queue_samples``, ``queued_share``, ``standing_queue``, ``drops``."""
        link, node, ifname, rate = h
        merged = _merge(intervals)
        span = sum(b - a for a, b in merged)
        counted = None
        if (node, ifname) in self.tx:
            t, tx = self.tx[(node, ifname)]
            if t.size >= 2 and t[0] <= merged[0][0] and t[-1] >= merged[-1][1] and \
                    span >= COUNTER_INTERVALS * self.tx_dt[(node, ifname)]:
                counted = float(sum(np.interp(b, t, tx) - np.interp(a, t, tx)
                                    for a, b in merged))
        if counted is not None:
            size, source = counted, "counters"
        else:
            size, source = 0.0, "records"
            if h in self.crossing:
                t0, t1, n = self.crossing[h]
                d = t1 - t0
                over = sum(np.clip(np.minimum(t1, b) - np.maximum(t0, a), 0.0, None)
                           for a, b in merged)
                size = float(np.sum(np.divide(n * over, d, out=np.zeros_like(d),
                                              where=d > 0)))
        busy = size * 8 / (span * rate) if rate and span > 0 else None
        out: dict[str, Any] = {"bytes": int(size), "bytes_source": source, "busy_share": busy,
                               "backlog_bytes_max": None, "backlog_bytes_median": None,
                               "queue_samples": 0, "queued_share": None,
                               "standing_queue": False, "drops": None}
        q = self.queue.get((node, ifname))
        if q is not None and not q.empty:
            ts = q["t_s"].to_numpy(float)
            inside = np.zeros(ts.size, dtype=bool)
            for a, b in merged:
                inside |= (ts >= a) & (ts <= b)
            drops = q["drops"].to_numpy(float)
            out["drops"] = int(round(sum(np.interp(b, ts, drops) - np.interp(a, ts, drops)
                                         for a, b in merged)))
            n = int(inside.sum())
            out["queue_samples"] = n
            if n:
                backlog = q["backlog_bytes"].to_numpy(float)[inside]
                queued = float((q["backlog_packets"].to_numpy(float)[inside] > 0).mean())
                out.update(backlog_bytes_max=int(backlog.max()),
                           backlog_bytes_median=float(np.median(backlog)),
                           queued_share=queued,
                           standing_queue=n >= STANDING_MIN_SAMPLES and queued >= STANDING_SHARE)
        return out

    def cwnd_at_start(self, f: dict[str, Any]) -> tuple[int | None, str | None]:
        """``snd_cwnd`` (segments) of ``f``'s connection when it started and where it comes
        from: the last counters/tcp.parquet sample at or before ``t_start``
        (``tcp_sample``), else the reading of the connection's previous transfer (the last
        one to start before it) at its ack instant (``previous_transfer``; back-to-back
        sends pipeline, so that instant may fall a little after this start), else, for the
        connection's first TCP transfer,
        Linux's initial window TCP_INIT_CWND = 10 (include/net/tcp.h, RFC 6928;
        ``initial_window``); (None, None) for a transfer without TCP_INFO."""
        if _num(f.get("tcp_snd_cwnd")) is None:
            return None, None
        key = (str(f.get("src_ip")), _int(f.get("sport")), str(f.get("dst_ip")),
               _int(f.get("dport")))
        if key in self.cwnd:
            t, c = self.cwnd[key]
            i = int(np.searchsorted(t, f["t_start"], side="right")) - 1
            if i >= 0:
                return int(c[i]), "tcp_sample"
        before = [g for g in self.by_conn.get(_conn(f), []) if g["t_start"] < f["t_start"]]
        if not before:
            return TCP_INIT_CWND, "initial_window"
        last = max(before, key=lambda g: g["t_start"])
        cwnd = _num(last.get("tcp_snd_cwnd"))
        return (None, None) if cwnd is None else (int(cwnd), "previous_transfer")


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if x != x else x


def _conn(f: dict[str, Any]) -> tuple[Any, ...]:
    return (f.get("src_ip"), _int(f.get("sport")), f.get("dst_ip"), _int(f.get("dport")))


def _real_retrans(f: dict[str, Any]) -> int:
    r = _num(f.get("tcp_total_retrans")) or 0.0
    return int(max(0.0, r - (_num(f.get("tcp_dsack_dups")) or 0.0)))


def _direction(h: HopKey, peers: dict[tuple[str, str], str]) -> str:
    return f"{h[1]} -> {peers.get((h[0], h[1]), '?')}"


def collective_bound(path: list[dict[str, Any]], view: KernelView,
                     peers: dict[tuple[str, str], str], rtt_configured: Any,
                     straggle: dict[str, Any] | None, compute_straggler: int | None
                     ) -> dict[str, Any]:
    """The verdict of one collective instance (module docstring): ``bound`` (one of
    :data:`BOUNDS`), ``critical_link`` (the saturated direction that held the critical path
    longest, with its busy share and queue; only when ``bound`` is link),
    ``secondary_bound`` and ``secondary_critical_link`` (a second cause, or None), ``hops`` (every
    link direction on the critical-path transfers' paths: configured rate, busy share,
    queue, fidelity rate check), and ``evidence``: time split (transfer time per class,
    arrival lag), and the RTT, round trips, window growth and retransmissions.
    ``path``: the critical-path transfers (flow dicts with tcp_* columns), first first;
    ``rtt_configured``: transfer -> configured path RTT (s) or None; ``straggle``:
    analysis.metrics.stragglers.collective_straggle of the instance plus ``ranks`` (None
    without a collective record); ``compute_straggler``: the compute straggler rank of the
    compute before the collective (else of its iteration) or None."""
    per_hop: dict[HopKey, list[dict[str, Any]]] = defaultdict(list)
    class_s = {"link": 0.0, "loss": 0.0, "latency": 0.0}
    saturated_s: dict[HopKey, float] = defaultdict(float)
    for f in path:
        fct = f["t_end"] - f["t_start"]
        hot = []
        for h in view.hops(f):
            per_hop[h].append(f)
            one = view.hop(h, [(f["t_start"], f["t_end"])]) if fct > 0 else None
            if one and _saturated(one, h[3]):
                hot.append(h)
                saturated_s[h] += fct
        cls = "link" if hot else "loss" if _real_retrans(f) > 0 else "latency"
        class_s[cls] += max(fct, 0.0)
    net = max(("link", "loss", "latency"), key=lambda k: (class_s[k], k == "link",
                                                           k == "loss"))
    hops = []
    for h, fs in per_hop.items():
        row = view.hop(h, [(f["t_start"], f["t_end"]) for f in fs])
        hops.append({"link": h[0], "node": h[1], "ifname": h[2],
                     "direction": _direction(h, peers), "configured_bps": h[3],
                     "transfers": len(fs), "saturated_s": saturated_s.get(h, 0.0), **row,
                     "fidelity_rate": view.rate_check.get((h[1], h[2]))})
    hops.sort(key=lambda r: -(r["busy_share"] or 0.0))
    transfer_s = sum(max(f["t_end"] - f["t_start"], 0.0) for f in path)
    lag = (straggle or {}).get("lag_s")
    late = (straggle or {}).get("slowest_rank")
    bound = net
    critical = None
    starved = None
    if net == "link":
        best = max(saturated_s, key=lambda h: (saturated_s[h], (view.hop(
            h, [(f["t_start"], f["t_end"]) for f in per_hop[h]])["busy_share"] or 0.0)))
        critical = next(r for r in hops if (r["link"], r["node"]) == best[:2])
        critical = {**critical, "utilisation": critical["busy_share"],
                    "achieved_bps": (critical["busy_share"] or 0.0) * (best[3] or 0)}
        if (critical["busy_share"] or 0.0) < BUSY_QUEUE:
            # saturated over some transfers, idle over the critical path as a whole: no link
            # used under half its rate is blamed
            class_s["latency"] += class_s.pop("link")
            bound = net = max(("loss", "latency"), key=lambda k: (class_s[k], k == "loss"))
            critical = None
            class_s["link"] = 0.0
        elif view.untrustworthy and critical["fidelity_rate"] == "off":
            bound = "host_cpu"
            starved = critical["direction"]
    cfg = [x for x in (rtt_configured(f) for f in path) if x is not None]
    unshaped = bool(per_hop) and all(h[3] is None for h in per_hop) and bool(cfg) \
        and not any(cfg)
    if bound == "latency" and unshaped:
        bound = "host_cpu"  # no rate and no delay configured: only the hosts set the pace
    explained = sum(slow_start_rounds(f["size_bytes"]) * (rtt_configured(f) or 0.0)
                    for f in path if f.get("size_bytes"))
    if bound == "latency" and view.untrustworthy and explained < LATENCY_EXPLAINS * \
            class_s["latency"]:
        # round trips at the configured RTT explain under half the time: the starved
        # emulation (fidelity.json), not the path, held the transfers
        bound = "host_cpu"
    after = (straggle or {}).get("after_last_arrival_s")
    waited = late is not None and late == compute_straggler and lag is not None \
        and after is not None
    if waited and lag > after:
        bound = "compute"
    secondary, secondary_s = _secondary(bound, {
        "compute": lag if waited else 0.0,
        "link": class_s["link"] if critical is not None and starved is None else 0.0,
        "loss": class_s["loss"]}, (lag or 0.0) + after if waited else transfer_s)
    crit = max(path, key=lambda f: f["t_end"] - f["t_start"])
    cwnd0, cwnd0_source = view.cwnd_at_start(crit)
    rtts = [x for x in (_num(f.get("tcp_min_rtt_s")) or _num(f.get("tcp_rtt_s"))
                        for f in path) if x]
    trips = sum((f["t_end"] - f["t_start"]) / r for f in path
                if (r := _num(f.get("tcp_min_rtt_s")) or _num(f.get("tcp_rtt_s"))))
    busy = [r["busy_share"] for r in hops if r["busy_share"] is not None
            and r["bytes"] * 8 > (r["configured_bps"] or 0) * SHAPER_BUCKET_S]
    evidence = {
        "transfer_s": transfer_s, "link_s": class_s["link"], "loss_s": class_s["loss"],
        "latency_s": class_s["latency"], "arrival_lag_s": lag,
        "after_last_arrival_s": after, "late_rank": late,
        "compute_straggler_rank": compute_straggler,
        "rtt_s": statistics.median(rtts) if rtts else None,
        "rtt_s_configured": max(cfg) if cfg else None,
        "round_trips": trips if rtts else None,
        "cwnd_start": cwnd0, "cwnd_start_source": cwnd0_source,
        "cwnd_end": _int_or_none(crit.get("tcp_snd_cwnd")),
        "retransmissions": sum(_real_retrans(f) for f in path),
        # the highest busy share of a hop that carried more than one shaper bucket
        "transfers_retransmitting": sum(_real_retrans(f) > 0 for f in path),
        "busy_share_max": max(busy) if busy else None,
        "untrustworthy": view.untrustworthy,
        # host_cpu: the direction whose shaper fell short of its rate (fidelity rate check)
        "rate_off_direction": starved,
        # host_cpu: no hop of the critical path has a configured rate or delay
        "unshaped_path": unshaped,
        # round trips slow start needs at the configured RTT, summed over the critical path
        "round_trips_explain_s": explained}
    evidence.update(secondary_s=secondary_s, cpu_busy_pct_p95=view.cpu_busy_pct_p95)
    return {"bound": bound, "critical_link": critical if bound == "link" else None,
            "secondary_bound": secondary,
            "secondary_critical_link": critical if secondary == "link" else None,
            "hops": hops, "evidence": evidence}


def _secondary(bound: str, held_s: dict[str, float], total_s: float
               ) -> tuple[str | None, float | None]:
    """The second cause of a collective (module docstring): of compute (the late rank's
    arrival lag), link (critical-path transfer time through a saturated direction) and
    loss (through retransmissions), the one other than ``bound`` that held the most time,
    if that is at least ``SECONDARY_SHARE`` of ``total_s``; else (None, None)."""
    others = {k: v for k, v in held_s.items() if k != bound and v and v > 0}
    if not others or total_s <= 0:
        return None, None
    k = max(others, key=others.__getitem__)
    return (k, others[k]) if others[k] >= SECONDARY_SHARE * total_s else (None, None)


def _int_or_none(v: Any) -> int | None:
    x = _num(v)
    return None if x is None else int(x)


def _saturated(row: dict[str, Any], rate_bps: int | None) -> bool:
    busy = row["busy_share"]
    if busy is None or not rate_bps or row["bytes"] * 8 <= rate_bps * SHAPER_BUCKET_S:
        return False
    return busy >= BUSY_LINK or (row["standing_queue"] and busy >= BUSY_QUEUE)


def interval_share(intervals: list[tuple[float, float]], total_s: float) -> float | None:
    """Length of the union of ``intervals`` over ``total_s`` (None when that is not
    positive)."""
    return union_length(intervals) / total_s if total_s > 0 else None
