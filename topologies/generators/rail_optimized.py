"""``rail_optimized``: a rail-optimized GPU cluster (the layout of NVIDIA's DGX SuperPOD
reference architecture): NIC i of every server on rail leaf i, the rails joined by spines."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, validate_call

from topologies.generators._build import Builder
from topologies.spec import TopologySpec

__all__ = ["rail_optimized"]


@validate_call
def rail_optimized(servers: int = Field(default=4, ge=1, le=128),
                   rails: int = Field(default=8, ge=1, le=16),
                   spines: int = Field(default=2, ge=1, le=64), nvlink: bool = True,
                   fabric: str | None = None, rail_link: str | None = None,
                   intra: str | None = None, ecmp_hash: Literal["l3", "l4"] = "l4",
                   server_as_host: bool = False,
                   name: str = "rail-optimized") -> TopologySpec:
    """``servers`` servers of ``rails`` GPUs each. GPU j of server i is host ``s<i>g<j>``
    with its own NIC on rail leaf router ``rail<j>`` (``rail_link``); every rail leaf links to
    every spine ``sp<k>`` (``fabric``). With ``nvlink`` each server has a router ``s<i>nv``
    (the NVSwitch) linked to each of its GPUs (``intra``), so GPUs of one server talk through
    it and GPUs of the same rail through their rail leaf; other pairs cross a spine.

    A server is modelled as its GPUs: host ``s<k>g<i>`` has GPU i's rail NIC and its
    NVLink port, one address each; rank i of a server goes on NIC i by placing it on
    ``s<k>g<i>``. Replay reaches every peer over the NIC nearest to it
    (:func:`models.paths.peer_addresses`): GPUs of one server over the NVSwitch, the same GPU
    of two servers over their rail leaf, others over rail and spine.

    With ``server_as_host`` a server is ONE host ``s<i>`` (one namespace) with ``rails`` NICs,
    NIC j on rail leaf ``rail<j>``, and ``ranks_per_host: rails``: the j-th rank placed on it
    is bound to NIC j (source and listen address) and per-source tables keep its traffic on
    rail j (:func:`models.paths.rank_addresses`). Ranks of one server then talk inside the host
    (loopback, not shaped), so ``nvlink`` and ``intra`` do not apply.
    """
    b = Builder()
    spine_names = [b.node(f"sp{k}", "router", ecmp_hash=ecmp_hash)
                   for k in range(1, spines + 1)]
    leaves = [b.node(f"rail{j}", "router", ecmp_hash=ecmp_hash) for j in range(1, rails + 1)]
    for i in range(1, servers + 1):
        labels = {"site": f"s{i}"}
        if server_as_host:
            host = b.node(f"s{i}", "host", labels=labels, ranks_per_host=rails)
            for leaf in leaves:
                b.link(host, leaf, profile=rail_link)
            continue
        gpus = [b.node(f"s{i}g{j}", "host", labels=labels) for j in range(1, rails + 1)]
        for gpu, leaf in zip(gpus, leaves, strict=True):
            b.link(gpu, leaf, profile=rail_link)
        if nvlink:
            nv = b.node(f"s{i}nv", "router", ecmp_hash=ecmp_hash, labels=labels)
            for gpu in gpus:
                b.link(gpu, nv, profile=intra)
    for leaf in leaves:
        for spine in spine_names:
            b.link(leaf, spine, profile=fabric)
    return b.spec(name, f"rail-optimized: {servers} servers x {rails} rails, {spines} spines")
