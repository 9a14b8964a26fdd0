"""Applications (``kind: app`` workloads): completion time and the slowest node.

From ``apps.jsonl`` (orchestration/apps/run.py: one record per node with ``t_start``,
``t_end`` epoch seconds on the shared host clock, ``duration_s``, ``exit_code``). The
completion time of a workload is ``max(t_end) - min(t_start)`` over its nodes, as a job's
makespan (the time from the first process started to the last one finished); the slowest
node is the one with the largest ``duration_s`` (``t_end - t_start`` of that node).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["app_metrics"]


def _one(rows: pd.DataFrame) -> dict[str, Any]:
    done = rows[rows["t_end"].notna()] if "t_end" in rows else rows.iloc[0:0]
    ok = bool(len(done) == len(rows) and (rows["exit_code"] == 0).all())
    complete = float(done["t_end"].max() - rows["t_start"].min()) if len(done) else None
    slow = done.loc[done["duration_s"].idxmax()] if len(done) else None
    return {"nodes": int(len(rows)), "ok": ok,
            "completion_time_s": complete if len(done) == len(rows) else None,
            "slowest_node": None if slow is None else str(slow["node"]),
            "slowest_duration_s": None if slow is None else float(slow["duration_s"]),
            "failed_nodes": sorted(str(n) for n in rows.loc[rows["exit_code"].fillna(-1)
                                                            != 0, "node"])}


def app_metrics(apps: pd.DataFrame) -> dict[str, Any]:
    """The ``apps`` section: ``workloads``, a list in run order of {workload,
    workload_index, nodes, ok (every node exited 0), completion_time_s (s, None unless every
    node ended), slowest_node, slowest_duration_s (s), failed_nodes}; empty without apps."""
    if apps.empty:
        return {"workloads": []}
    key = "workload_index" if "workload_index" in apps else None
    groups = apps.groupby(key, sort=True) if key else [(0, apps)]
    out = []
    for index, rows in groups:
        name = str(rows["workload"].iloc[0]) if "workload" in rows else "app"
        out.append({"workload": name, "workload_index": int(index), **_one(rows)})
    return {"workloads": out}
