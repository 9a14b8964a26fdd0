"""Collectives that cross a data-centre interconnect (DCI).

A host's site is its ``labels["site"]``, else its ``group``, else one common site (the rule
of workloads.placement.sites_of_plan, restated here because analysis reads plan.json only).
A collective crosses the DCI when its hosts lie in more than one site. The DCI collective
time is the sum of those collectives' CCT (s): the time the job spent in collectives that
waited on the interconnect, per workload and in total (e.g. a flat ring against a
hierarchical all-reduce over the same two DCs).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from aitb.models.plan import LabPlan

__all__ = ["host_sites", "dci_metrics"]


def host_sites(plan: LabPlan) -> dict[str, str]:
    """host name -> site name (module docstring)."""
    return {n.name: n.labels.get("site", n.group or "") for n in plan.hosts()}


def dci_metrics(collectives: pd.DataFrame, plan: LabPlan | None) -> dict[str, Any]:
    """The ``dci`` section: ``sites`` (count), ``collectives_crossing`` (count),
    ``collective_time_s`` (sum of their CCT; None if the plan has one site or none cross),
    ``by_workload`` (workload name -> count and CCT sum)."""
    sites = host_sites(plan) if plan is not None else {}
    n_sites = len(set(sites.values()))
    if n_sites < 2 or collectives.empty:
        return {"sites": n_sites, "collectives_crossing": 0, "collective_time_s": None,
                "by_workload": {}}
    crossing = collectives[collectives["hosts"].map(
        lambda hs: len({sites.get(h, "") for h in hs}) > 1)]
    by: dict[str, dict[str, Any]] = {}
    names = crossing["workload"] if "workload" in crossing else pd.Series("", crossing.index)
    for name, g in crossing.groupby(names):
        by[str(name)] = {"collectives": int(len(g)), "collective_time_s": float(g["cct_s"].sum())}
    return {"sites": n_sites, "collectives_crossing": int(len(crossing)),
            "collective_time_s": float(crossing["cct_s"].sum()) if len(crossing) else None,
            "by_workload": by}
