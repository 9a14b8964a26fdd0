"""Data locality: may a marked transfer's bytes cross a node outside its allowed regions?
(pure; the one check that the pre-run refusal and the post-run analysis share).

Nodes carry a ``region`` label (and optionally ``country``) in the topology. A workload marks
its data with a :class:`DataPolicy` (experiment key ``data: {class, allowed_regions,
allowed_countries}``). A path complies when every node on it, i.e. both ends of every link it
crosses, has a region in ``allowed_regions`` (and, when ``allowed_countries`` is given, a
country in it). A node without a region label complies with no policy (fail closed: an
unlabelled router may be anywhere). Paths are the route walk's (models.paths): every ECMP path
of a flow is checked, since the kernel may hash the flow onto any of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from models.paths import Hop, PathWalker
from models.plan import LabPlan

__all__ = ["DataPolicy", "path_nodes", "outside_nodes", "flow_violations"]


@dataclass(frozen=True)
class DataPolicy:
    """A data class and where its bytes may go: region names (non-empty) and optionally
    country names (None: any country of an allowed region)."""

    data_class: str
    allowed_regions: tuple[str, ...]
    allowed_countries: tuple[str, ...] | None = None


def path_nodes(path: Sequence[Hop], plan: LabPlan) -> list[str]:
    """The nodes of ``path`` in order: every hop's sender, then the last hop's receiver."""
    if not path:
        return []
    last = path[-1]
    lk = next(x for x in plan.links if x.name == last.link)
    far = lk.b.node if lk.a.node == last.node else lk.a.node
    return [h.node for h in path] + [far]


def outside_nodes(plan: LabPlan, nodes: Sequence[str], policy: DataPolicy
                  ) -> list[dict[str, Any]]:
    """The nodes of ``nodes`` that ``policy`` does not allow, each as ``{node, region,
    country}`` (None where unlabelled), in path order."""
    out = []
    for name in dict.fromkeys(nodes):
        labels = plan.node(name).labels or {}
        region, country = labels.get("region"), labels.get("country")
        bad = region not in policy.allowed_regions or (
            policy.allowed_countries is not None and country not in policy.allowed_countries)
        if bad:
            out.append({"node": name, "region": region, "country": country})
    return out


def flow_violations(walker: PathWalker, src_node: str, dst_ip: str, policy: DataPolicy
                    ) -> list[dict[str, Any]]:
    """Every path of the flow ``src_node`` -> ``dst_ip`` that leaves ``policy``'s regions, as
    ``{path: [node...], links: [link...], outside: [...]}`` (:func:`outside_nodes`); [] when
    the flow complies. Raises models.paths.PathError when the plan has no path for it."""
    out = []
    for path in walker.paths(src_node, dst_ip):
        nodes = path_nodes(path, walker.plan) or [src_node]
        bad = outside_nodes(walker.plan, nodes, policy)
        if bad:
            out.append({"path": nodes, "links": [h.link for h in path], "outside": bad})
    return out
