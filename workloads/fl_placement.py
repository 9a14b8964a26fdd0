"""Placement of hierarchical FL over sites (pure): one cluster per site.

Sites come from :func:`workloads.placement.sites_of_plan` (hosts grouped by their ``site``
label, in plan order). The first site holds the global aggregator (rank 0, its first host);
each following site is one cluster: its first host is the cluster aggregator (rank j for
cluster j = 1..k), its other hosts the cluster's clients. Client c (rank k + c, the layout of
workloads.federated) belongs to cluster (c-1) mod k and is its ((c-1) // k + 1)-th client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from models.errors import SpecError, SpecIssue

__all__ = ["place_clusters"]


def place_clusters(clusters: int, clients: int, sites: Mapping[str, Sequence[str]],
                   key: str = "placement") -> dict[int, str]:
    """``{rank: host}`` for ``clusters`` clusters of ``clients`` clients in all.

    Raises :class:`SpecError` naming ``key`` when there are not ``clusters`` + 1 sites, or a
    cluster's site has fewer hosts than its aggregator and clients need (stating both).
    """
    names = list(sites)
    if len(names) != clusters + 1:
        raise SpecError(SpecIssue(
            f"hierarchical FL with {clusters} cluster(s) places one cluster per site after "
            f"the global aggregator's site: it needs {clusters + 1} sites, the lab has "
            f"{len(names)} ({', '.join(n or '<unlabelled>' for n in names)}); label hosts "
            "with a 'site' or list hosts explicitly", key_path=(key,)))
    out = {0: sites[names[0]][0]}
    for j in range(1, clusters + 1):
        hosts = sites[names[j]]
        need = 1 + len(range(j, clients + 1, clusters))
        if len(hosts) < need:
            raise SpecError(SpecIssue(
                f"cluster {j} (site {names[j]}) needs {need} hosts (aggregator and clients), "
                f"the site has {len(hosts)}", key_path=(key,)))
        out[j] = hosts[0]
    for c in range(1, clients + 1):
        j = 1 + (c - 1) % clusters
        out[clusters + c] = sites[names[j]][1 + (c - 1) // clusters]
    return out
