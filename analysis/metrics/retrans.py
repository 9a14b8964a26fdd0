"""TCP retransmissions: from the flow records' TCP_INFO and, when the run has captures, from
the packets (analysis.tcpflows, the same analysis as ``aitb pcap``).

Records: the sum of ``tcp.total_retrans`` (segments; linux/tcp.h ``tcpi_total_retrans``,
differenced per transfer, aitb.records.TcpInfo) over all flows, and of ``dsack_dups``
(retransmissions the receiver reported as duplicates, RFC 2883). Captures: per capture file,
the connections' ``retransmissions``, ``fast_retransmissions`` and ``rto_retransmissions``
(classification in analysis.tcpflows); a connection seen on several capture interfaces is
counted once, with the largest count any interface saw (retransmissions of segments lost
before a capture point are invisible there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["retrans_metrics", "capture_retrans"]

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
    return {"files": len(files), "connections": len(best), **totals, "warnings": warnings}


def retrans_metrics(flows: pd.DataFrame, captures: list[Path]) -> dict[str, Any]:
    """The ``retransmissions`` section: ``records`` (total_retrans, dsack_dups, flows with
    any; None without TCP records) and ``captures`` (:func:`capture_retrans`, None without
    capture files)."""
    rec = None
    if not flows.empty and "tcp_total_retrans" in flows:
        tr = flows["tcp_total_retrans"].dropna()
        dsack = flows["tcp_dsack_dups"].dropna() if "tcp_dsack_dups" in flows else tr * 0
        rec = {"total_retrans": int(tr.sum()), "dsack_dups": int(dsack.sum()),
               "flows_with_retrans": int((tr > 0).sum()), "tcp_flows": int(len(tr))}
    return {"records": rec, "captures": capture_retrans(captures) if captures else None}
