"""Who made a collective slow: its critical path, the slowest link, stragglers by compute and
by network apart, and an nccl-tests-style per-pair bandwidth table (pure).

Inputs: the flow records (flows.jsonl: per transfer its ranks, nodes, destination address,
bytes and [t_start, t_end] on the host clock), the timeline (compute ops per rank) and the
plan (paths and configured rates; models.paths).

Definitions:

* *achieved rate* of a set of transfers = their bytes x 8 / the length of the union of their
  [t_start, t_end] intervals (bit/s): the rate while at least one of them was moving;
* a *link direction* is one sending interface on a path (models.paths.Hop: link, node, ifname);
  its achieved rate is that of the transfers whose every equal-cost path crosses it, its
  utilisation achieved / configured ``rate_bps``;
* *critical path* of a collective instance: from the transfer that ended last, repeatedly the
  transfer into its sender that ended last before it started (what the sender waited for),
  until there is none: the chain of transfers that set the CCT (the critical-path analysis of
  a task graph, as in the straggler analysis of Lin et al., "Understanding Stragglers in
  Large Model Training Using What-if Analysis", arXiv:2505.05713, 2025);
* its *critical transfer* is the longest one on that path; the *network straggler* is the
  critical transfer's sending rank;
* what *bound* the instance (``bound``: link, latency, compute, loss or host_cpu) and, only
  when a link did, its *critical link*: from the busy share and queue of every link
  direction on the critical-path transfers' paths against its configured rate, their
  TCP_INFO and the ranks' arrivals (analysis.metrics.bound). Every hop of one transfer
  carries the same bytes in the same time, so its achieved rate cannot tell which hop held
  it; the busy share against the configured rate and the queue can;
* per workload (``per_workload``): the bound that held its collectives longest (length of
  the union of their [first rank start, last rank end] intervals per bound), the group of
  collectives (group kind, op, whether a flow crossed a DCI link) that took the largest
  share of its iteration time, and the evidence of its longest collective of that bound;
* *compute straggler* of an iteration: the rank with the most compute time in it
  (timeline.jsonl), named only when that exceeds the median rank's by more than
  ``COMPUTE_TOLERANCE`` and by ``COMPUTE_MIN_S`` (below that the ranks compute alike: no
  straggler); ``compute_straggler_planned``: whether its compute ops ran at a higher
  straggler factor (the records' ``slowdown``, mean over its ops) than the median rank's
  (None without factors). An unplanned straggler computed longer than it was given: its
  timed sleeps woke late on a loaded host. It stays named in ``per_iteration`` but never
  makes a collective compute-bound. The same rule over each rank's compute just before a
  collective (its compute ops since its previous communication op, by timeline
  ``op_index``) names the compute straggler a collective's verdict weighs: a rank late at
  a collective for its compute is not blamed at the next one, which it reached late for
  another reason;
* per-pair bandwidth (nccl-tests' sendrecv view): bytes a rank sent to another over the union
  of those transfers' intervals, in bytes/s (nccl-tests prints GB/s = 1e9 bytes/s).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

import pandas as pd

from analysis.dci import union_length
from analysis.metrics.bound import KernelView, collective_bound
from analysis.metrics.collectives import iteration_times
from analysis.metrics.stragglers import collective_straggle
from analysis.metrics.what_if import what_if_metrics
from models.paths import PathError, PathWalker, dci_links
from models.plan import LabPlan

__all__ = ["COMPUTE_TOLERANCE", "attribution_metrics", "critical_path", "pair_bandwidth"]

COMPUTE_TOLERANCE = 0.05  # 5%: two ranks computing 1.05x apart are not called stragglers
# and at least 2 ms more than the median: a compute op is a timed sleep, which wakes up to a
# scheduler tick (4 ms at HZ=250) late on a loaded host; half of that is noise, not a straggler
COMPUTE_MIN_S = 0.002
_ORDER_EPS_S = 1e-4  # a send starts after the receive it waited for ended (one host clock)


def _rate_bps(rows: list[dict[str, Any]]) -> float | None:
    busy = union_length([(r["t_start"], r["t_end"]) for r in rows])
    return sum(r["size_bytes"] for r in rows) * 8 / busy if busy > 0 else None


def _done(flows: pd.DataFrame) -> list[dict[str, Any]]:
    need = ("t_start", "t_end", "size_bytes", "src_rank", "dst_rank")
    if flows.empty or any(c not in flows for c in need):
        return []
    ok = flows[flows["t_end"].notna() & flows["t_start"].notna() & flows["src_rank"].notna()
               & flows["dst_rank"].notna() & (flows["size_bytes"] > 0)]
    if "background" in ok:
        ok = ok[~ok["background"].fillna(False).astype(bool)]
    return ok.to_dict("records")


def critical_path(flows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The critical path (module docstring) through one collective instance's transfers
    (dicts with src_rank, dst_rank, t_start, t_end), first transfer first; [] for none."""
    if not flows:
        return []
    f = max(flows, key=lambda r: r["t_end"])
    path = [f]
    while True:
        before = [g for g in flows if g["dst_rank"] == f["src_rank"] and g is not f
                  and g["t_end"] <= f["t_start"] + _ORDER_EPS_S and g not in path]
        if not before:
            return path[::-1]
        f = max(before, key=lambda r: r["t_end"])
        path.append(f)


class _Links:
    """Link directions of each transfer (hops on every equal-cost path) and per direction the
    configured and achieved rates over a set of transfers."""

    def __init__(self, plan: LabPlan | None) -> None:
        self.walker = PathWalker(plan) if plan is not None else None
        self.peers = {(lk.name, e.node): o.node for lk in (plan.links if plan else ())
                      for e, o in ((lk.a, lk.b), (lk.b, lk.a))}
        self.cache: dict[tuple[str, str], list[tuple[str, str, str, int | None]]] = {}
        self.delay = {(lk.name, e.node): lk.egress(e.node).delay_s
                      for lk in (plan.links if plan else ()) for e in (lk.a, lk.b)}
        self.dci = dci_links(plan) if plan is not None else frozenset()

    def rtt_configured(self, f: dict[str, Any]) -> float | None:
        """The configured one-way delays of ``f``'s path there and of the path
        back (from its receiver to its sender's address), summed (s); None without both."""
        there = self.hops(f)
        back = self.hops({"src_node": f.get("dst_node"), "dst_ip": f.get("src_ip")})
        if not there or not back:
            return None
        return sum(self.delay.get((h[0], h[1]), 0.0) for h in (*there, *back))

    def crosses_dci(self, f: dict[str, Any]) -> bool:
        return any(h[0] in self.dci for h in self.hops(f))

    def hops(self, f: dict[str, Any]) -> list[tuple[str, str, str, int | None]]:
        key = (str(f.get("src_node")), str(f.get("dst_ip")))
        if key not in self.cache:
            self.cache[key] = self._walk(*key)
        return self.cache[key]

    def _walk(self, node: str, ip: str) -> list[tuple[str, str, str, int | None]]:
        if self.walker is None:
            return []
        try:
            found = self.walker.paths(node, ip)
        except (PathError, ValueError):
            return []
        if not found:
            return []
        hops = [[(h.link, h.node, h.ifname, h.shaping.rate_bps) for h in p] for p in found]
        common = set.intersection(*(set(p) for p in hops))
        return [h for h in hops[0] if h in common]  # in path order

    def table(self, flows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by: dict[tuple[str, str, str, int | None], list[dict[str, Any]]] = defaultdict(list)
        for f in flows:
            for h in self.hops(f):
                by[h].append(f)
        out = []
        for (link, node, ifname, rate), rows in by.items():
            got = _rate_bps(rows)
            out.append({"link": link, "node": node, "ifname": ifname,
                        "direction": f"{node} -> {self.peers.get((link, node), '?')}",
                        "configured_bps": rate, "achieved_bps": got,
                        "utilisation": got / rate if got and rate else None,
                        "transfers": len(rows),
                        "bytes": int(sum(r["size_bytes"] for r in rows))})
        return sorted(out, key=lambda r: (r["achieved_bps"] is None, r["achieved_bps"] or 0))


def _transfer(f: dict[str, Any]) -> dict[str, Any]:
    return {"src_rank": int(f["src_rank"]), "dst_rank": int(f["dst_rank"]),
            "src_node": f.get("src_node"), "dst_node": f.get("dst_node"),
            "step": f.get("step"), "size_bytes": int(f["size_bytes"]),
            "t_start": f["t_start"], "t_end": f["t_end"],
            "fct_s": f["t_end"] - f["t_start"],
            "rate_bps": int(f["size_bytes"]) * 8 / (f["t_end"] - f["t_start"])
            if f["t_end"] > f["t_start"] else None}


def _collective_row(cid: str, w: int, flows: list[dict[str, Any]], links: _Links,
                    view: KernelView, record: dict[str, Any] | None,
                    compute: dict[tuple[int, int], int | None],
                    before: _ComputeBefore) -> dict[str, Any]:
    path = critical_path(flows)
    crit = max(path, key=lambda f: f["t_end"] - f["t_start"])
    straggle = None
    if record is not None:
        straggle = collective_straggle(list(record["rank_t_start"]),
                                       list(record["rank_t_end"]))
        i = straggle.pop("slowest_index")
        t_med = max(record["rank_t_end"]) - statistics.median(record["rank_t_start"])
        straggle["after_last_arrival_s"] = t_med - straggle["lag_s"]
        straggle["slowest_rank"] = None if i is None else int(list(record["ranks"])[i])
    it = int(crit["iteration"])
    known, slow = before.rank(w, record) if record is not None else (False, None)
    verdict = collective_bound(path, view, links.peers, links.rtt_configured, straggle,
                               slow if known else compute.get((w, it)))
    return {"collective_id": cid, "workload_index": w, "iteration": it,
            "op": record.get("op") if record else None,
            "group_kind": record.get("group_kind") if record else None,
            "crosses_dci": any(links.crosses_dci(f) for f in flows),
            "t_start": min(record["rank_t_start"]) if record else min(
                f["t_start"] for f in flows),
            "t_end": max(record["rank_t_end"]) if record else max(f["t_end"] for f in flows),
            "critical_path": [_transfer(f) for f in path],
            "critical_transfer": _transfer(crit), "bound": verdict["bound"],
            "critical_link": verdict["critical_link"],
            "secondary_bound": verdict["secondary_bound"],
            "secondary_critical_link": verdict["secondary_critical_link"],
            "network_straggler_rank": int(crit["src_rank"]),
            "evidence": verdict["evidence"], "hops": verdict["hops"]}


def model_inputs(f: dict[str, Any], links: _Links) -> dict[str, Any]:
    """What analysis.metrics.what_if's transfer model needs of one transfer: ``src_rank``,
    ``dst_rank``, ``step`` (the algorithm's step label, or None), ``t_start``, ``t_end``
    (s, host clock), ``size_bytes``, ``fct_s``, ``rtt_s`` (TCP_INFO ``min_rtt_s``, else
    ``rtt_s``, else None), ``rtt_s_configured`` (s, the path there and back) and
    ``hops`` ([link, sending node, configured rate_bps or None, direction] of every link
    direction on its path)."""
    rtt = f.get("tcp_min_rtt_s")
    if rtt is None or rtt != rtt or not rtt:
        rtt = f.get("tcp_rtt_s")
    rtt = None if rtt is None or rtt != rtt or not rtt else float(rtt)
    return {"src_rank": int(f["src_rank"]), "dst_rank": int(f["dst_rank"]),
            "step": f.get("step"), "t_start": f["t_start"], "t_end": f["t_end"],
            "size_bytes": int(f["size_bytes"]), "fct_s": f["t_end"] - f["t_start"],
            "rtt_s": rtt, "rtt_s_configured": links.rtt_configured(f),
            "hops": [[h[0], h[1], h[3], f"{h[1]} -> {links.peers.get((h[0], h[1]), '?')}"]
                     for h in links.hops(f)]}


def _straggler_of(per: dict[int, float], factor: dict[int, float] | None) -> int | None:
    """The rank of ``per`` (rank -> compute s) that computed more than the median rank by
    COMPUTE_TOLERANCE and COMPUTE_MIN_S, unless ``factor`` (rank -> mean straggler factor,
    None without) says it ran at no higher a factor than the median rank: None if none."""
    if not per:
        return None
    med = float(statistics.median(per.values()))
    slow = max(per, key=per.__getitem__)
    top = per[slow]
    if med <= 0 or top <= med * (1 + COMPUTE_TOLERANCE) or top - med <= COMPUTE_MIN_S:
        return None
    if factor is not None and not factor[slow] > statistics.median(factor.values()):
        return None
    return slow


class _ComputeBefore:
    """Per collective record, the rank that computed longest just before it (its compute
    ops since its previous communication op of the iteration, timeline.jsonl ``op_index``
    order), named by :func:`_straggler_of`: a rank that arrived late at one collective for
    its compute is not blamed at the next, which it reached late for another reason."""

    def __init__(self, timeline: pd.DataFrame) -> None:
        self.rows: dict[tuple[int, int, int], list[tuple[int, str, float, float]]] = {}
        need = ("kind", "op_index", "rank", "iteration", "t_start", "t_end")
        self.known = not timeline.empty and all(c in timeline for c in need)
        if not self.known:
            return
        t = timeline.assign(workload_index=timeline.get("workload_index", 0))
        slow = t["slowdown"] if "slowdown" in t else pd.Series(float("nan"), t.index)
        for (w, it, r, k, kind, a, b, f) in zip(
                t["workload_index"].fillna(0).astype(int), t["iteration"].astype(int),
                t["rank"].astype(int), t["op_index"].astype(int), t["kind"], t["t_start"],
                t["t_end"], slow, strict=True):
            self.rows.setdefault((w, it, r), []).append((k, str(kind), b - a, f))
        for v in self.rows.values():
            v.sort()

    def rank(self, w: int, record: dict[str, Any]) -> tuple[bool, int | None]:
        """(whether the timeline tells, the compute straggler before ``record``)."""
        k = record.get("op_index")
        if not self.known or k is None or k != k:
            return False, None
        per: dict[int, float] = {}
        factors: dict[int, list[float]] = {}
        for r in record["ranks"]:
            before = [x for x in self.rows.get((w, int(record["iteration"]), int(r)), [])
                      if x[0] < int(k)]
            d, fs = 0.0, []
            for _, kind, dur, f in reversed(before):
                if kind != "compute":
                    break
                d += dur
                fs.append(f)
            per[int(r)] = d
            factors[int(r)] = fs
        factor = None
        if all(fs and all(f == f for f in fs) for fs in factors.values()):
            factor = {r: statistics.fmean(fs) for r, fs in factors.items()}
        return True, _straggler_of(per, factor)


def _compute_stragglers(timeline: pd.DataFrame) -> list[dict[str, Any]]:
    if timeline.empty or "kind" not in timeline:
        return []
    comp = timeline[timeline["kind"] == "compute"]
    comp = comp.assign(d=comp["t_end"] - comp["t_start"],
                       workload_index=comp.get("workload_index", 0))
    out = []
    for (w, it), g in comp.groupby(["workload_index", "iteration"]):
        per = g.groupby("rank")["d"].sum()
        med, top = float(statistics.median(per)), float(per.max())
        late = top > med * (1 + COMPUTE_TOLERANCE) and top - med > COMPUTE_MIN_S
        slow = int(per.idxmax()) if med > 0 and late else None
        planned = None
        if slow is not None and "slowdown" in g and g["slowdown"].notna().all():
            factor = g.groupby("rank")["slowdown"].mean()
            planned = bool(factor[slow] > statistics.median(factor))
        out.append({"workload_index": int(w), "iteration": int(it), "compute_s_max": top,
                    "compute_s_median": med, "compute_straggler_rank": slow,
                    "compute_straggler_planned": planned,
                    "compute_inflation": top / med if med > 0 else None})
    return out


def pair_bandwidth(flows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per ordered (src_rank, dst_rank) of one workload: transfers, bytes, busy time (s) and
    bandwidth ``bw_Bps`` (bytes/s over the union of the transfers' intervals)."""
    by: dict[tuple[int, int, int], list[dict[str, Any]]] = defaultdict(list)
    for f in flows:
        by[(int(f.get("workload_index", 0) or 0), int(f["src_rank"]),
            int(f["dst_rank"]))].append(f)
    out = []
    for (w, s, d), rows in sorted(by.items()):
        busy = union_length([(r["t_start"], r["t_end"]) for r in rows])
        size = int(sum(r["size_bytes"] for r in rows))
        out.append({"workload_index": w, "src_rank": s, "dst_rank": d,
                    "src_node": rows[0].get("src_node"), "dst_node": rows[0].get("dst_node"),
                    "transfers": len(rows), "bytes": size, "busy_s": busy,
                    "bw_Bps": size / busy if busy > 0 else None})
    return out


def _all_transfers(flows: pd.DataFrame) -> list[dict[str, Any]]:
    """Every transfer with an interval and bytes, background included (bytes on links)."""
    need = ("t_start", "t_end", "size_bytes", "src_node", "dst_ip")
    if flows.empty or any(c not in flows for c in need):
        return []
    ok = flows[flows["t_end"].notna() & flows["t_start"].notna() & (flows["size_bytes"] > 0)]
    return ok.to_dict("records")


def attribution_metrics(flows: pd.DataFrame, timeline: pd.DataFrame,
                        plan: LabPlan | None, collectives: pd.DataFrame | None = None,
                        counters: dict[str, pd.DataFrame] | None = None,
                        fidelity: Any = None) -> dict[str, Any]:
    """The ``attribution`` section of metrics.json (module docstring): ``links`` (per link
    direction: configured and achieved bit/s, utilisation), ``per_collective`` (per
    instance: ``op``, ``group_kind``, ``crosses_dci``, ``t_start``/``t_end`` (s, host clock),
    critical path and transfer, ``bound`` (link, latency, compute, loss or host_cpu;
    analysis.metrics.bound), ``critical_link`` (only where bound is link: the direction,
    its configured rate, ``busy_share``/``utilisation``, ``achieved_bps`` = busy share x
    configured rate, backlog, standing queue, drops), network straggler, ``evidence`` and
    ``hops``), ``per_iteration`` (the longest collective's bound, critical link and network
    straggler, and the compute straggler), ``per_workload`` (:func:`workload_verdicts`),
    ``what_if`` (the iteration time and CCTs were the critical link twice as fast, the
    compute straggler at the median or the RTT halved: analysis.metrics.what_if, from
    :func:`model_inputs` of every transfer), ``pairs`` (per-pair
    bandwidth). ``collectives`` (collectives.jsonl), ``counters``
    (counters/{links,qdisc,tcp}.parquet) and ``fidelity`` (fidelity.json) feed the verdict;
    without them it rests on the records alone. Empty lists when the run has no such
    records."""
    rows = _done(flows)
    links = _Links(plan)
    link_table = links.table(rows)
    view = KernelView(counters or {}, fidelity, _all_transfers(flows), links.hops)
    records: dict[tuple[int, str], dict[str, Any]] = {}
    if collectives is not None and not collectives.empty and "collective_id" in collectives:
        for r in collectives.to_dict("records"):
            records[(int(r.get("workload_index", 0) or 0), str(r["collective_id"]))] = r
    compute_rows = _compute_stragglers(timeline)
    # a straggler whose ops ran at the median rank's slowdown overran the compute it was
    # given (a sleep the loaded host woke late from): the host's noise, not the workload's
    compute = {(c["workload_index"], c["iteration"]): c["compute_straggler_rank"]
               for c in compute_rows if c["compute_straggler_planned"] is not False}
    coll: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for f in rows:
        cid = f.get("collective_id")
        if isinstance(cid, str):
            coll[(int(f.get("workload_index", 0) or 0), cid)].append(f)
    before = _ComputeBefore(timeline)
    per_coll = [_collective_row(cid, w, fs, links, view, records.get((w, cid)), compute,
                                before)
                for (w, cid), fs in sorted(coll.items())]
    inputs = {(w, cid): [model_inputs(f, links) for f in fs]
              for (w, cid), fs in coll.items()}
    iters = iteration_times(timeline, collectives if collectives is not None
                            else pd.DataFrame())
    per_workload = workload_verdicts(per_coll, iters)
    return {"links": link_table, "per_collective": per_coll,
            "per_iteration": _per_iteration(per_coll, compute_rows),
            "per_workload": per_workload,
            "what_if": what_if_metrics(per_coll, inputs, iters, compute_rows, per_workload),
            "pairs": pair_bandwidth(rows)}


def _group_name(c: dict[str, Any]) -> str:
    kind = str(c.get("group_kind") or "").upper().replace("WORLD", "")
    op = str(c.get("op") or "collective").replace("_", "-")
    return (f"{kind} " if kind else "") + f"{op}s" + (" across the DCI" if c["crosses_dci"]
                                                       else "")


def workload_verdicts(per_coll: list[dict[str, Any]], iters: pd.DataFrame
                      ) -> list[dict[str, Any]]:
    """Per workload with collectives: ``bound`` (the bound whose collectives' intervals
    cover the most time, union per bound), ``bound_time_s`` per bound, ``iteration_time_s``
    (median; analysis.metrics.collectives.iteration_times), ``iteration_time_s_total``,
    ``dominant`` (the group of collectives, named by group kind, op and DCI crossing, with
    the largest ``share`` of the total iteration time: union of its instances' intervals
    over it), ``example`` (the collective_id of the longest instance of that bound) and its
    ``evidence``, ``critical_link`` (where bound is link: the example's), ``busy_share_max``
    (the highest busy share of any hop over every instance's critical path), and its
    second cause (:func:`_workload_secondary`)."""
    out = []
    by_w: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for c in per_coll:
        by_w[c["workload_index"]].append(c)
    for w, cs in sorted(by_w.items()):
        it = iters[iters["workload_index"] == w] if not iters.empty else iters
        total = float(it["iteration_time_s"].sum()) if not it.empty else 0.0
        median = float(it["iteration_time_s"].median()) if not it.empty else None
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for c in cs:
            spans[c["bound"]].append((c["t_start"], c["t_end"]))
            groups[_group_name(c)].append((c["t_start"], c["t_end"]))
        times = {b: union_length(v) for b, v in spans.items()}
        bound = max(times, key=times.__getitem__)
        second = _workload_secondary(cs, bound)
        name = max(groups, key=lambda g: union_length(groups[g]))
        mine = [c for c in cs if c["bound"] == bound]
        ex = max(mine, key=lambda c: c["t_end"] - c["t_start"])
        busy = [c["evidence"]["busy_share_max"] for c in cs
                if c["evidence"]["busy_share_max"] is not None]
        out.append({"workload_index": w, "bound": bound, "bound_time_s": times,
                    "collectives": len(cs), "iteration_time_s": median,
                    "iteration_time_s_total": total,
                    "dominant": {"group": name, "share": union_length(groups[name]) / total
                                 if total > 0 else None,
                                 "instances": len(groups[name])},
                    "example": ex["collective_id"], "evidence": ex["evidence"],
                    "critical_link": ex["critical_link"],
                    "busy_share_max": max(busy) if busy else None, **second})
    return out


def _workload_secondary(cs: list[dict[str, Any]], bound: str) -> dict[str, Any]:
    """A workload's second cause: of the bounds and secondary bounds of its collectives
    other than ``bound`` (and host_cpu), the one whose collectives' intervals cover the
    most time (union), with the evidence and critical link of its longest collective:
    ``secondary_bound``, ``secondary_time_s``, ``secondary_example``,
    ``secondary_evidence``, ``secondary_critical_link`` (None where there is none)."""
    spans: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in cs:
        for b in {c["bound"], c.get("secondary_bound")} - {bound, None, "host_cpu"}:
            spans[b].append(c)
    if not spans:
        return {"secondary_bound": None, "secondary_time_s": None, "secondary_example": None,
                "secondary_evidence": None, "secondary_critical_link": None}
    times = {b: union_length([(c["t_start"], c["t_end"]) for c in v]) for b, v in spans.items()}
    b = max(times, key=times.__getitem__)
    ex = max(spans[b], key=lambda c: c["t_end"] - c["t_start"])
    link = ex["critical_link"] if ex["bound"] == "link" else ex.get("secondary_critical_link")
    return {"secondary_bound": b, "secondary_time_s": times[b],
            "secondary_example": ex["collective_id"], "secondary_evidence": ex["evidence"],
            "secondary_critical_link": link if b == "link" else None}


def _per_iteration(per_coll: list[dict[str, Any]], compute: list[dict[str, Any]]
                   ) -> list[dict[str, Any]]:
    by: dict[tuple[int, int], dict[str, Any]] = {
        (c["workload_index"], c["iteration"]): dict(c) for c in compute}
    for c in per_coll:
        key = (c["workload_index"], c["iteration"])
        row = by.setdefault(key, {"workload_index": key[0], "iteration": key[1],
                                  "compute_straggler_rank": None})
        t = c["critical_transfer"]
        if t["fct_s"] >= row.get("_fct", -1.0):
            row.update(_fct=t["fct_s"], critical_collective=c["collective_id"],
                       network_straggler_rank=c["network_straggler_rank"],
                       bound=c["bound"], critical_link=c["critical_link"])
    return [{k: v for k, v in r.items() if k != "_fct"} for _, r in sorted(by.items())]
