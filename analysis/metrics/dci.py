"""Collectives that cross a data-centre interconnect (DCI): the ``dci`` section of
metrics.json, taken from ``dci.json`` (analysis.dci, which walks the plan's routes to find the
flows that cross a DCI link; analyze_run writes it first). One definition for the report, the
summary key ``dci_collective_time_s`` and campaigns.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dci_metrics"]


def dci_metrics(dci_file: Any) -> dict[str, Any]:
    """The ``dci`` section from the parsed dci.json (None: the plan has no DCI link):
    ``dci_links`` (count), ``collectives_crossing`` (count), ``collective_time_s`` (seconds
    during which a crossing collective was in progress, summed over iterations; None without
    DCI links or collectives), ``iteration_time_s`` (of the workloads that ran collectives),
    ``share`` (the one over the other), ``per_workload`` (analysis.dci: per such workload
    its own three numbers, as the report's results say them), ``by_op_group`` (op, group
    kind, size -> instances, CCT mean, bytes crossing), ``unrouted_flows`` (flows the plan
    has no path for: they count as crossing nothing, so the report warns)."""
    if not isinstance(dci_file, dict) or not dci_file.get("dci_links"):
        return {"dci_links": 0, "collectives_crossing": 0, "collective_time_s": None,
                "iteration_time_s": None, "share": None, "per_workload": [],
                "by_op_group": [], "unrouted_flows": []}
    totals = dci_file.get("totals", {})
    has_colls = bool(totals.get("collectives"))
    return {"dci_links": len(dci_file["dci_links"]),
            "collectives_crossing": int(totals.get("collectives_crossing", 0)),
            "collective_time_s": totals.get("dci_collective_time_s") if has_colls else None,
            "iteration_time_s": totals.get("iteration_time_s") if has_colls else None,
            "share": totals.get("share") if has_colls else None,
            "per_workload": dci_file.get("per_workload", []),
            "by_op_group": dci_file.get("by_op_group", []),
            "unrouted_flows": dci_file.get("unrouted_flows", [])}
