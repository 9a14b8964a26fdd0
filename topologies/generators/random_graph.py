"""``random_graph``: seeded random router graphs (networkx): Erdos-Renyi G(n, p), Waxman, or
Barabasi-Albert preferential attachment; each router with its host(s)."""

from __future__ import annotations

from typing import Literal

import networkx as nx
from pydantic import Field, validate_call

from models.unit_fields import MAX_SEED
from topologies.generators._build import Builder, GeneratorParamError, add_routed_graph
from topologies.spec import TopologySpec

__all__ = ["random_graph"]

_RAISE = {"erdos_renyi": "p", "waxman": "alpha", "barabasi_albert": "m"}


def _graph(model: str, n: int, p: float, alpha: float, beta: float, m: int,
           seed: int) -> nx.Graph:
    if model == "erdos_renyi":
        return nx.gnp_random_graph(n, p, seed=seed)
    if model == "waxman":  # P(u, v) = beta * exp(-d(u, v) / (alpha * L)), networkx's naming
        return nx.waxman_graph(n, beta=beta, alpha=alpha, seed=seed)
    if m >= n:
        raise GeneratorParamError("m", f"m={m} must be below n={n} (each new router attaches "
                                       "to m existing ones)")
    return nx.barabasi_albert_graph(n, m, seed=seed)


@validate_call
def random_graph(model: Literal["erdos_renyi", "waxman", "barabasi_albert"] = "erdos_renyi",
                 n: int = Field(default=16, ge=2, le=512),
                 seed: int = Field(default=1, ge=0, le=MAX_SEED),
                 p: float = Field(default=0.3, gt=0, le=1),
                 alpha: float = Field(default=0.4, gt=0, le=10),
                 beta: float = Field(default=0.6, gt=0, le=1),
                 m: int = Field(default=2, ge=1, le=64),
                 hosts_per_router: int = Field(default=1, ge=1, le=64),
                 fabric: str | None = None, host_link: str | None = None,
                 ecmp_hash: Literal["l3", "l4"] = "l4", name: str = "random") -> TopologySpec:
    """Routers ``n1..n<n>`` joined as the ``model`` graph drawn with ``seed`` (the same seed,
    the same graph): ``erdos_renyi`` uses ``p`` (probability of each link), ``waxman``
    ``alpha``/``beta`` (networkx.waxman_graph: beta scales the link probability, alpha the
    distance it decays over, points in the unit square), ``barabasi_albert`` ``m`` (links
    of each new router). ``hosts_per_router`` hosts ``n<i>-h<k>`` each.

    Raises :class:`GeneratorParamError` when the drawn graph is not connected (naming the
    parameter to raise, or another seed) or m >= n.
    """
    g = _graph(model, n, p, alpha, beta, m, seed)
    parts = nx.number_connected_components(g)
    if parts > 1:
        key = _RAISE[model]
        raise GeneratorParamError(key, f"the {model} graph of n={n}, seed={seed} falls into "
                                       f"{parts} parts (a lab must be connected); raise "
                                       f"{key} or try another seed")
    routers = [f"n{i + 1}" for i in range(n)]
    b = Builder()
    add_routed_graph(b, routers, [(routers[u], routers[v]) for u, v in sorted(g.edges)],
                     hosts_per_router, fabric, host_link, ecmp_hash)
    return b.spec(name, f"{model} random graph: {n} routers, {g.number_of_edges()} links, "
                        f"seed {seed}")
