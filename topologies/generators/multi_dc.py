"""``multi_dc_leaf_spine``: several DCs, each a routed leaf-spine, joined by DCI links between
border routers."""

from __future__ import annotations

from itertools import combinations
from typing import Literal

from pydantic import Field, validate_call

from topologies.generators._build import Builder
from topologies.generators.leaf_spine import add_fabric
from topologies.spec import TopologySpec

__all__ = ["multi_dc_leaf_spine"]


def _dc_pairs(n_dcs: int, dci_topology: str) -> list[tuple[int, int]]:
    if dci_topology == "chain":
        return [(d, d + 1) for d in range(1, n_dcs)]
    if dci_topology == "ring":  # a chain closed back to dc1 (two DCs: one pair, not two)
        return [(d, d + 1) for d in range(1, n_dcs)] + ([(1, n_dcs)] if n_dcs > 2 else [])
    if dci_topology == "hub":  # hub-and-spoke: dc1 is the hub
        return [(1, d) for d in range(2, n_dcs + 1)]
    return list(combinations(range(1, n_dcs + 1), 2))


@validate_call
def multi_dc_leaf_spine(n_dcs: int = Field(default=2, ge=1, le=16),
                        spines: int = Field(default=2, ge=1, le=64),
                        leaves: int = Field(default=2, ge=1, le=256),
                        hosts_per_leaf: int = Field(default=2, ge=1, le=256),
                        borders: int = Field(default=1, ge=1, le=8),
                        dci: str | None = "dci-metro", fabric: str | None = None,
                        host_link: str | None = None,
                        dci_links_per_pair: int = Field(default=1, ge=1, le=16),
                        dci_topology: Literal["mesh", "chain", "ring", "hub"] = "mesh",
                        ecmp_hash: Literal["l3", "l4"] = "l4",
                        name: str = "multi-dc") -> TopologySpec:
    """``n_dcs`` DCs ``dc1..``; each a leaf-spine (``dcN-s*``, ``dcN-l*``, hosts ``dcN-l*-h*``)
    with ``borders`` border routers ``dcN-b*`` linked to every spine of their DC.

    DCI links (profile ``dci``, ``up`` = lower-numbered DC -> higher) join the border routers
    of every DC pair (``mesh``), of neighbouring DCs (``chain``), of neighbouring DCs and the
    last with the first (``ring``), or of dc1 (the hub) with every other DC (``hub``);
    ``dci_links_per_pair`` parallel links per pair go round-robin over the borders, interface
    ``dci-dc<M>-<k>`` on the border towards DC M. fabric/host_link: profiles inside a DC
    (border-spine links use ``fabric``). All fabric nodes are routers: loop-free at L2, ECMP
    over spines and parallel DCI links.
    """
    b = Builder()
    for d in range(1, n_dcs + 1):
        prefix = f"dc{d}-"
        spine_names = add_fabric(b, prefix, spines, leaves, hosts_per_leaf, fabric, host_link,
                                 ecmp_hash)
        for i in range(1, borders + 1):
            border = b.node(f"{prefix}b{i}", "router", ecmp_hash=ecmp_hash)
            for spine in spine_names:
                b.link(border, spine, profile=fabric)
        for node in [n for n in b.nodes if n.startswith(prefix)]:  # placement and
            b.nodes[node] = b.nodes[node].model_copy(  # hierarchical collectives group by site
                update={"labels": {**(b.nodes[node].labels or {}), "site": f"dc{d}"}})
    for x, y in _dc_pairs(n_dcs, dci_topology):
        for k in range(dci_links_per_pair):
            bi = k % borders + 1
            b.link(f"dc{x}-b{bi}:dci-dc{y}-{k + 1}", f"dc{y}-b{bi}:dci-dc{x}-{k + 1}",
                   profile=dci)
    return b.spec(name, f"{n_dcs} DCs x ({spines} spines, {leaves} leaves x {hosts_per_leaf} "
                        f"hosts), DCI {dci_topology}")
