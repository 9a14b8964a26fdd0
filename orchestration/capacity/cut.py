"""Where to cut a lab over ``k`` machines. Pure.

By site (a node's label ``site``, else its ``group``: models.paths.site_of) when the lab has at
least ``k`` sites: whole sites go to machines, largest first onto the machine with the fewest
nodes (greedy list scheduling, Graham 1969), so no site is split and the cut links are the
links between sites (in the generated fabrics: the DCI links). Otherwise a balanced minimum
cut by recursive Kernighan-Lin bisection (networkx.algorithms.community.kernighan_lin_bisection;
B. W. Kernighan and S. Lin, Bell System Technical Journal 49(2), 1970), edges weighted by
link rate (bit/s; unshaped links weigh as the fastest shaped one), so that the capacity
crossing machines is small and every machine gets an equal share of nodes; without networkx,
contiguous slices of a breadth-first order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from models.paths import site_of
from models.plan import LabPlan, LinkPlan

__all__ = ["Cut", "cut"]


@dataclass(frozen=True)
class Cut:
    """A placement: ``parts`` (one tuple of node names per machine), ``by`` (``site``,
    ``min-cut`` or ``bfs``), the links whose ends land on different machines and their
    summed rate (bit/s, the larger direction of each)."""

    parts: tuple[tuple[str, ...], ...]
    by: str
    cut_links: tuple[str, ...]
    cut_bps: float


def _rate(lk: LinkPlan) -> float:
    return float(max(lk.a_to_b.rate_bps or 0, lk.b_to_a.rate_bps or 0))


def _finish(plan: LabPlan, parts: list[list[str]], by: str) -> Cut:
    where = {n: i for i, part in enumerate(parts) for n in part}
    crossing = [lk for lk in plan.links if where[lk.a.node] != where[lk.b.node]]
    return Cut(tuple(tuple(sorted(p)) for p in parts), by, tuple(lk.name for lk in crossing),
               sum(_rate(lk) for lk in crossing))


def _by_site(plan: LabPlan, k: int) -> list[list[str]] | None:
    sites: dict[str, list[str]] = {}
    for n in plan.nodes:
        site = site_of(plan, n.name)
        if site is None:
            return None
        sites.setdefault(site, []).append(n.name)
    if len(sites) < k:
        return None
    parts: list[list[str]] = [[] for _ in range(k)]
    for _site, names in sorted(sites.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        min(parts, key=len).extend(names)
    return parts


def _bfs(plan: LabPlan) -> list[str]:
    nbrs: dict[str, list[str]] = {n.name: [] for n in plan.nodes}
    for lk in plan.links:
        nbrs[lk.a.node].append(lk.b.node)
        nbrs[lk.b.node].append(lk.a.node)
    seen, order = set(), []
    for start in nbrs:
        if start in seen:
            continue
        queue = deque([start])
        seen.add(start)
        while queue:
            n = queue.popleft()
            order.append(n)
            for m in nbrs[n]:
                if m not in seen:
                    seen.add(m)
                    queue.append(m)
    return order


def _slices(order: list[str], k: int) -> list[list[str]]:
    size = -(-len(order) // k)
    return [order[i * size:(i + 1) * size] for i in range(k)]


def _bisect(graph, nodes: list[str], k: int, seed: int) -> list[list[str]]:
    """Split ``nodes`` into ``k`` parts of near-equal size by recursive KL bisection."""
    from networkx.algorithms.community import kernighan_lin_bisection

    if k == 1 or len(nodes) <= 1:
        return [nodes]
    k1 = k // 2
    n1 = round(len(nodes) * k1 / k)
    sub = graph.subgraph(nodes)
    start = (set(nodes[:n1]), set(nodes[n1:]))  # BFS order: a local first guess
    a, b = kernighan_lin_bisection(sub, partition=start, weight="weight", seed=seed)
    if len(a) != n1:  # KL swaps pairs, so sizes hold; it may return the halves swapped
        a, b = b, a
    order = {n: i for i, n in enumerate(nodes)}
    left, right = sorted(a, key=order.get), sorted(b, key=order.get)
    return _bisect(graph, left, k1, seed) + _bisect(graph, right, k - k1, seed)


def cut(plan: LabPlan, k: int) -> Cut:
    """Place ``plan``'s nodes on ``k`` machines (module docstring; at most one machine per
    node); ``k`` >= 1."""
    if k < 1:
        raise ValueError(f"machines must be >= 1, not {k}")
    k = min(k, len(plan.nodes))
    if k == 1:
        return _finish(plan, [[n.name for n in plan.nodes]], "none")
    parts = _by_site(plan, k)
    if parts is not None:
        return _finish(plan, parts, "site")
    order = _bfs(plan)
    try:
        import networkx as nx
    except ImportError:
        return _finish(plan, _slices(order, k), "bfs")
    top = max((_rate(lk) for lk in plan.links), default=1.0) or 1.0
    graph = nx.Graph()
    graph.add_nodes_from(order)
    for lk in plan.links:
        w = _rate(lk) or top
        prev = graph.get_edge_data(lk.a.node, lk.b.node, {}).get("weight", 0.0)
        graph.add_edge(lk.a.node, lk.b.node, weight=prev + w)
    return _finish(plan, _bisect(graph, order, k, seed=0), "min-cut")
