"""Refuse, before anything exists, a placement that would move marked data outside its
regions (workload key ``data:`` with ``enforce: refuse``; models.locality holds the check).

The pairs checked are the hosts of every rank pair the workload's schedule moves bytes between
(workloads.cost_aware.traffic_matrix: collectives by their ring model, send/recv, bursts), on
every ECMP path the plan gives them. Deadline-bounded gathers (FL rounds) and the
algorithms' exact peer sets beyond the ring model are not enumerated here; the post-run
analysis (analysis.locality) checks every recorded flow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.errors import SpecError, SpecIssue
from models.locality import DataPolicy, flow_violations
from models.paths import PathWalker
from models.plan import LabPlan
from models.schedule import Schedule
from workloads.cost_aware import traffic_matrix

__all__ = ["policy_of", "check_placement"]


def policy_of(data: Any) -> DataPolicy:
    """The models.locality.DataPolicy of a ``data:`` entry (orchestration.run.kinds.DataSpec)."""
    return DataPolicy(data.data_class, tuple(data.allowed_regions),
                      tuple(data.allowed_countries) if data.allowed_countries is not None
                      else None)


def check_placement(entry: Any, schedule: Schedule, placement: Mapping[int, str],
                    plan: LabPlan, index: int, source: str) -> None:
    """Raise SpecError at ``workloads[index].data`` naming the first host pair, path and
    outside node when ``entry``'s refusing data policy would be violated by ``schedule``
    placed as ``placement`` (rank -> host) (module docstring); nothing for an entry without
    ``data`` or with ``enforce: record``."""
    data = getattr(entry, "data", None)
    if data is None or data.enforce != "refuse":
        return
    policy, walker = policy_of(data), PathWalker(plan)
    pairs = sorted({(placement[s], placement[d]) for s, d in traffic_matrix(schedule)
                    if placement[s] != placement[d]})
    for a, b in pairs:
        addr = plan.address_of(b)
        if addr is None:
            continue
        bad = flow_violations(walker, a, str(addr), policy)
        if bad:
            node = bad[0]["outside"][0]
            raise SpecError(SpecIssue(
                f"data class {policy.data_class!r} may stay in regions "
                f"{', '.join(policy.allowed_regions)}, but ranks on {a} and {b} would exchange "
                f"it via {' -> '.join(bad[0]['path'])}, and {node['node']} is in region "
                f"{node['region'] or '(no region label)'}"
                + (f", country {node['country']}" if node["country"] else "")
                + " (enforce: record runs it anyway and reports the violation)",
                file=source, key_path=("workloads", index, "data")))
