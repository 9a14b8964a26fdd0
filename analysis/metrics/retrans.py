"""TCP retransmissions: from the flow records' TCP_INFO and, when the run has captures, from
the packets (analysis.tcpflows, the same analysis as ``aitb pcap``).

Records: the sum of ``tcp.total_retrans`` (segments; linux/tcp.h ``tcpi_total_retrans``,
differenced per transfer, models.records.TcpInfo) over all flows, and of ``dsack_dups``
(retransmissions the receiver reported as duplicates, RFC 2883). Captures: per capture file,
the connections' ``retransmissions``, ``fast_retransmissions`` and ``rto_retransmissions``
(classification in analysis.tcpflows); a connection seen on several capture interfaces is
counted once, with the largest count any interface saw (retransmissions of segments lost
before a capture point are invisible there).

Reconciliation (``reconciliation``): per TCP connection (the 4-tuple, either direction) the
records' count and retransmitted bytes (sums over the transfers striped on it) beside the
captures' count and retransmitted bytes, with a ``status`` by this rule (first match):

1. ``agree``: the same count.
2. ``explained`` (GSO): the same retransmitted bytes, a different count: TCP_INFO counts MSS
   segments (``tcpi_total_retrans`` adds each skb's segment count), the capture one packet
   per skb it sees, and a retransmitted GSO/TSO super-packet carries several segments.
3. ``explained`` (out-of-order by Wireshark's rule): fewer in the capture by at most the
   capture's out-of-order segments of that connection: a re-sent segment that follows the
   highest sequence seen within the out-of-order threshold (the handshake RTT, else 3 ms;
   analysis.tcpflows.connection, packet-tcp.c) is classed out-of-order, not retransmitted,
   though the sender's kernel counted it (seen on a 2 ms, 1%-loss native line: 84 in
   TCP_INFO = 67 retransmissions + 17 out-of-order in the capture).
4. ``explained`` (lost before the capture point): fewer in the capture, and the deficits of
   all such connections together are at most the run's queue drops (``queue_drops``, root
   qdiscs): a segment dropped before the capture point (tcpdump sees a packet after the
   sending interface's qdisc) never passes it, so its retransmission passes as a first copy.
5. ``explained`` (spurious, after the ack the records read): more in the capture by at most
   the capture's spurious retransmissions (data already acknowledged, e.g. a tail-loss probe
   or a FIN re-sent after the transfer's TCP_INFO was read at its last byte's ack).
6. ``unexplained`` otherwise: the check flags the connection.

``verdict``: ``agree`` (all agree), ``explained`` (none unexplained), ``flagged`` (any
unexplained), None when no connection is in both. The check (verdict and flagged
connections) is also the ``retransmissions`` entry of the metrics' ``fidelity`` section.

One count per flow (:func:`flow_retrans`, columns ``retrans`` and ``retrans_source`` of
``tables/flows.parquet``): a TCP flow with a TCP_INFO record takes its record's
``total_retrans`` (source ``tcp_info``: the sender's kernel sees every retransmission, where
the loss happened and whether or not a capture ran); a TCP flow without one takes its
connection's capture count when it is the only flow on that connection (source
``capture``); otherwise (UDP, or no source that can be split per flow) ``retrans`` is null
and ``retrans_source`` None. ``summary_source`` names which count the run summary's
``retransmissions`` is, by the same rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["retrans_metrics", "capture_retrans", "reconcile", "flow_retrans", "RETRANS_SOURCES"]

_COUNTS = ("retransmissions", "fast_retransmissions", "rto_retransmissions",
           "spurious_retransmissions", "retransmitted_bytes", "out_of_order")
_TOTALS = _COUNTS[:3]
RETRANS_SOURCES = ("tcp_info", "capture")


def capture_retrans(files: list[Path]) -> dict[str, Any]:
    """Retransmission counts from the capture ``files`` (see module docstring): ``files``,
    ``connections``, totals of each count, ``warnings`` (damage found in the files)."""
    from analysis.tcpflows import analyse_capture  # numba: loaded only for runs with captures

    best: dict[tuple, dict[str, int]] = {}
    warnings = []
    for path in files:
        res = analyse_capture(path)
        warnings += [f"{path.name}: {w.to_dict()}" for w in res.warnings]
        for f in res.flows:
            if f.get("proto") != "tcp":
                continue
            key = tuple(sorted([(f["src"], f["sport"]), (f["dst"], f["dport"])]))
            old = best.setdefault(key, {c: 0 for c in _COUNTS})
            if int(f.get("retransmissions") or 0) >= old["retransmissions"]:
                best[key] = {c: int(f.get(c) or 0) for c in _COUNTS}
    totals = {c: sum(v[c] for v in best.values()) for c in _TOTALS}
    per = [{"a": list(k[0]), "b": list(k[1]), **v} for k, v in sorted(best.items())]
    return {"files": len(files), "connections": len(best), **totals, "warnings": warnings,
            "per_connection": per}


def _key(a_ip: Any, a_port: Any, b_ip: Any, b_port: Any) -> tuple:
    return tuple(sorted([(str(a_ip), int(a_port)), (str(b_ip), int(b_port))]))


def _records_per_connection(flows: pd.DataFrame) -> dict[tuple, tuple[int, int]]:
    rec: dict[tuple, tuple[int, int]] = {}
    if flows.empty or "tcp_total_retrans" not in flows:
        return rec
    tcp = flows[flows["tcp_total_retrans"].notna()]
    nbytes = tcp["tcp_bytes_retrans"] if "tcp_bytes_retrans" in tcp else \
        tcp["tcp_total_retrans"] * 0
    for r, b in zip(tcp.itertuples(index=False), nbytes.fillna(0), strict=True):
        k = _key(r.src_ip, r.sport, r.dst_ip, r.dport)
        n0, b0 = rec.get(k, (0, 0))
        rec[k] = (n0 + int(r.tcp_total_retrans), b0 + int(b))
    return rec


def reconcile(flows: pd.DataFrame, per_connection: list[dict[str, Any]],
              queue_drops: float | None = None) -> dict[str, Any]:
    """Records vs captures per connection by the rule of the module docstring: ``connections``
    compared, ``differing`` rows (a, b, records, captures, records_bytes, captures_bytes,
    captures_out_of_order, status, reason), ``flagged`` (the unexplained ones), ``verdict``,
    ``agree`` (None when no connection is in both), totals over the connections both saw.
    ``queue_drops``: the run's queue drops in packets (None: unknown, rule 4 never
    applies)."""
    rec = _records_per_connection(flows)
    cap = {_key(*c["a"], *c["b"]): c for c in per_connection}
    rows, budget = [], float(queue_drops or 0)
    for k in sorted(set(rec) & set(cap)):
        (r, rb), c = rec[k], cap[k]
        n, nb = int(c["retransmissions"]), int(c.get("retransmitted_bytes") or 0)
        status, reason = "agree", None
        if n == r:
            pass
        elif nb == rb and rb > 0:
            status, reason = "explained", (
                "same retransmitted bytes: TCP_INFO counts MSS segments, the capture GSO "
                "super-packets")
        elif n < r and r - n <= int(c.get("out_of_order") or 0):
            status, reason = "explained", (
                "fewer in the capture: re-sent segments within the out-of-order threshold of "
                "the highest sequence, classed out-of-order by Wireshark's rule")
        elif n < r and r - n <= budget:
            budget -= r - n
            status, reason = "explained", (
                "fewer in the capture: segments dropped before its capture point (queue drops "
                "of the run cover it), their retransmissions passed as first copies")
        elif n > r and n - r <= int(c.get("spurious_retransmissions") or 0):
            status, reason = "explained", (
                "more in the capture: spurious retransmissions of acknowledged data after "
                "TCP_INFO was read")
        else:
            status, reason = "unexplained", (
                "fewer in the capture than the queue drops explain (the capture lost packets?)"
                if n < r else "more in the capture than its spurious retransmissions "
                "explain (every packet captured twice?)")
        rows.append({"a": list(k[0]), "b": list(k[1]), "records": r, "captures": n,
                     "records_bytes": rb, "captures_bytes": nb,
                     "captures_out_of_order": int(c.get("out_of_order") or 0), "status": status,
                     "reason": reason})
    flagged = [r for r in rows if r["status"] == "unexplained"]
    verdict = None if not rows else "flagged" if flagged else \
        "agree" if all(r["status"] == "agree" for r in rows) else "explained"
    return {"connections_compared": len(rows),
            "records_total": sum(r["records"] for r in rows),
            "captures_total": sum(r["captures"] for r in rows),
            "agree": all(r["reason"] is None for r in rows) if rows else None,
            "verdict": verdict, "queue_drops": queue_drops,
            "differing": [r for r in rows if r["reason"]], "flagged": flagged}


def flow_retrans(flow_table: pd.DataFrame, retrans: dict[str, Any]) -> pd.DataFrame:
    """``flow_table`` (one row per flow record) with ``retrans`` (nullable Int64, segments)
    and ``retrans_source`` (``tcp_info``, ``capture`` or None) by the rule of the module
    docstring; ``retrans``: the ``retransmissions`` section (:func:`retrans_metrics`)."""
    out = flow_table.copy()
    n = len(out)
    values: list[Any] = [None] * n
    sources: list[Any] = [None] * n
    has_info = out["tcp_total_retrans"].notna().to_numpy() if "tcp_total_retrans" in out \
        else [False] * n
    cap = {_key(*c["a"], *c["b"]): int(c["retransmissions"])
           for c in ((retrans.get("captures") or {}).get("per_connection") or [])}
    keys: list[Any] = [None] * n
    if cap and {"src_ip", "sport", "dst_ip", "dport"} <= set(out.columns):
        keys = [None if pd.isna(r.sport) or pd.isna(r.dport) else
                _key(r.src_ip, r.sport, r.dst_ip, r.dport)
                for r in out[["src_ip", "sport", "dst_ip", "dport"]].itertuples(index=False)]
    per_key: dict[Any, int] = {}
    for k in keys:
        per_key[k] = per_key.get(k, 0) + 1
    tcp = (out["kind"] == "tcp").to_numpy() if "kind" in out else [True] * n
    for i in range(n):
        if has_info[i]:
            values[i], sources[i] = int(out["tcp_total_retrans"].iloc[i]), "tcp_info"
        elif tcp[i] and keys[i] in cap and per_key[keys[i]] == 1:
            values[i], sources[i] = cap[keys[i]], "capture"
    out["retrans"] = pd.array(values, dtype="Int64")
    out["retrans_source"] = pd.Series(sources, index=out.index, dtype="object")
    return out


def retrans_metrics(flows: pd.DataFrame, captures: list[Path],
                    queue_drops: float | None = None) -> dict[str, Any]:
    """The ``retransmissions`` section: ``records`` (total_retrans, dsack_dups, reord_seen,
    delivered_ce: sums over the TCP transfers, the last the packets their senders saw echoed
    as CE-marked (ECN: the bottleneck's marks instead of drops); flows with any
    retransmission, flows that negotiated ECN; None without TCP records), ``captures``
    (:func:`capture_retrans`, None without capture files), ``summary_source`` and
    ``reconciliation`` (:func:`reconcile`, None without captures; ``queue_drops`` as
    there)."""
    rec = None
    if not flows.empty and "tcp_total_retrans" in flows:
        tr = flows["tcp_total_retrans"].dropna()
        dsack = flows["tcp_dsack_dups"].dropna() if "tcp_dsack_dups" in flows else tr * 0
        reord = flows["tcp_reord_seen"].dropna() if "tcp_reord_seen" in flows else tr * 0
        ce = flows["tcp_delivered_ce"].dropna() if "tcp_delivered_ce" in flows else tr * 0
        ecn = flows["tcp_ecn"].dropna() if "tcp_ecn" in flows else tr[tr < 0]
        rec = {"total_retrans": int(tr.sum()), "dsack_dups": int(dsack.sum()),
               "reord_seen": int(reord.sum()), "delivered_ce": int(ce.sum()),
               "flows_with_retrans": int((tr > 0).sum()), "tcp_flows": int(len(tr)),
               "ecn_flows": int(ecn.astype(bool).sum())}
    cap = capture_retrans(captures) if captures else None
    out = {"records": rec, "captures": cap,
           "summary_source": "tcp_info" if rec else ("capture" if cap else None),
           "reconciliation": (reconcile(flows, cap["per_connection"], queue_drops)
                              if cap else None)}
    return out
