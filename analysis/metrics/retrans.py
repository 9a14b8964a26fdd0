"""TCP retransmissions: from the flow records' TCP_INFO and, when the run has captures, from
the packets (analysis.tcpflows, the same analysis as ``aitb pcap``).

Records: the sum of ``tcp.total_retrans`` (segments; linux/tcp.h ``tcpi_total_retrans``,
differenced per transfer, aitb.records.TcpInfo) over all flows, and of ``dsack_dups``
(retransmissions the receiver reported as duplicates, RFC 2883). Captures: per capture file,
the connections' ``retransmissions``, ``fast_retransmissions`` and ``rto_retransmissions``
(classification in analysis.tcpflows); a connection seen on several capture interfaces is
counted once, with the largest count any interface saw (retransmissions of segments lost
before a capture point are invisible there).

Reconciliation (``reconciliation``): per TCP connection (the 4-tuple, either direction) the
records' count (the sum over the transfers striped on it) beside the captures' count, and
``agree`` when every connection seen by both has the same count. Where they differ, each
such connection is listed with the likely reason: fewer in the capture when segments were
lost before its capture point (their retransmissions pass it as first copies) or the capture
dropped packets; more in the capture when retransmissions followed the last
acknowledgement the records read TCP_INFO at (records.py: TCP_INFO is read when a transfer's
last byte is acknowledged) or the capture saw every packet twice. ``summary_source`` names
which count the run summary's ``retransmissions`` is: ``tcp_info`` (the records) or
``capture``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["retrans_metrics", "capture_retrans", "reconcile"]

_COUNTS = ("retransmissions", "fast_retransmissions", "rto_retransmissions")


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
    totals = {c: sum(v[c] for v in best.values()) for c in _COUNTS}
    per = [{"a": list(k[0]), "b": list(k[1]), **v} for k, v in sorted(best.items())]
    return {"files": len(files), "connections": len(best), **totals, "warnings": warnings,
            "per_connection": per}


def _key(a_ip: Any, a_port: Any, b_ip: Any, b_port: Any) -> tuple:
    return tuple(sorted([(str(a_ip), int(a_port)), (str(b_ip), int(b_port))]))


def reconcile(flows: pd.DataFrame, per_connection: list[dict[str, Any]]) -> dict[str, Any]:
    """Records vs captures per connection (module docstring): ``connections`` rows (a, b,
    records, captures, reason), ``agree`` (None when no connection is in both), and totals
    over the connections both saw."""
    rec: dict[tuple, int] = {}
    if not flows.empty and "tcp_total_retrans" in flows:
        tcp = flows[flows["tcp_total_retrans"].notna()]
        for r in tcp.itertuples(index=False):
            k = _key(r.src_ip, r.sport, r.dst_ip, r.dport)
            rec[k] = rec.get(k, 0) + int(r.tcp_total_retrans)
    cap = {_key(*c["a"], *c["b"]): int(c["retransmissions"]) for c in per_connection}
    rows = []
    for k in sorted(set(rec) & set(cap)):
        r, c = rec[k], cap[k]
        reason = None
        if c < r:
            reason = ("fewer in the capture: segments lost before its capture point, or "
                      "packets the capture dropped")
        elif c > r:
            reason = ("more in the capture: retransmissions after the last acknowledgement "
                      "TCP_INFO was read at, or every packet captured twice")
        rows.append({"a": list(k[0]), "b": list(k[1]), "records": r, "captures": c,
                     "reason": reason})
    return {"connections_compared": len(rows),
            "records_total": sum(r["records"] for r in rows),
            "captures_total": sum(r["captures"] for r in rows),
            "agree": all(r["reason"] is None for r in rows) if rows else None,
            "differing": [r for r in rows if r["reason"]]}


def retrans_metrics(flows: pd.DataFrame, captures: list[Path]) -> dict[str, Any]:
    """The ``retransmissions`` section: ``records`` (total_retrans, dsack_dups, flows with
    any; None without TCP records), ``captures`` (:func:`capture_retrans`, None without
    capture files), ``summary_source`` and ``reconciliation`` (:func:`reconcile`, None
    without captures)."""
    rec = None
    if not flows.empty and "tcp_total_retrans" in flows:
        tr = flows["tcp_total_retrans"].dropna()
        dsack = flows["tcp_dsack_dups"].dropna() if "tcp_dsack_dups" in flows else tr * 0
        rec = {"total_retrans": int(tr.sum()), "dsack_dups": int(dsack.sum()),
               "flows_with_retrans": int((tr > 0).sum()), "tcp_flows": int(len(tr))}
    cap = capture_retrans(captures) if captures else None
    out = {"records": rec, "captures": cap,
           "summary_source": "tcp_info" if rec else ("capture" if cap else None),
           "reconciliation": reconcile(flows, cap["per_connection"]) if cap else None}
    return out
