"""``leaf_spine``: one routed leaf-spine fabric (Clos), hosts under leaves, ECMP over spines."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, validate_call

from models.units import UnitError, format_rate, parse_rate_bps
from topologies.generators._build import Builder, GeneratorParamError
from topologies.spec import ProfileSpec, TopologySpec

__all__ = ["leaf_spine", "add_fabric"]


def add_fabric(b: Builder, prefix: str, spines: int, leaves: int, hosts_per_leaf: int,
               fabric: str | None, host_link: str | None, ecmp_hash: str) -> list[str]:
    """Add a routed fabric to ``b``: spines ``{prefix}s1..``, leaves ``{prefix}l1..``, hosts
    ``{prefix}l<j>-h<k>``; every leaf links to every spine (``fabric`` profile), hosts to their
    leaf (``host_link`` profile, ``up`` = host -> leaf). Host links come first, leaf by leaf, so
    each leaf's host subnets are contiguous. Returns the spine names."""
    spine_names = [b.node(f"{prefix}s{i}", "router", ecmp_hash=ecmp_hash)
                   for i in range(1, spines + 1)]
    leaf_names = [b.node(f"{prefix}l{j}", "router", ecmp_hash=ecmp_hash)
                  for j in range(1, leaves + 1)]
    for leaf in leaf_names:
        for k in range(1, hosts_per_leaf + 1):
            b.link(b.node(f"{leaf}-h{k}", "host"), leaf, profile=host_link)
    for leaf in leaf_names:
        for spine in spine_names:
            b.link(leaf, spine, profile=fabric)
    return spine_names


@validate_call
def leaf_spine(spines: int = Field(default=4, ge=1, le=64),
               leaves: int = Field(default=16, ge=1, le=256),
               hosts_per_leaf: int = Field(default=16, ge=1, le=256),
               fabric: str | None = None, host_link: str | None = None,
               ecmp_hash: Literal["l3", "l4"] = "l4", name: str = "leaf-spine",
               oversubscription: float | None = Field(default=None, gt=0, le=64),
               host_rate: str | None = None) -> TopologySpec:
    """One DC: ``leaves`` x ``hosts_per_leaf`` hosts, every leaf linked to every spine.

    Defaults give the benchmark fabric: 16 leaves x 16 hosts, 4 spines = 256 hosts, 64 fabric
    links. fabric/host_link: profile names (None: unshaped); ecmp_hash: routers' multipath hash.
    Leaves and spines are routers, so the fabric is loop-free at L2 and a leaf reaches another
    leaf's hosts over every spine (ECMP).

    ``oversubscription`` (with ``host_rate``, e.g. "25Gbit"): the ratio of a leaf's host-facing
    capacity to its spine-facing capacity; the generator adds profiles ``host`` (host_rate) and
    ``fabric`` (hosts_per_leaf * host_rate / (spines * oversubscription), whole bit/s) and uses
    them for the host and fabric links. Raises :class:`GeneratorParamError` when only one of
    the two is given, or together with ``fabric``/``host_link``.
    """
    b = Builder()
    profiles = _oversubscribed(spines, hosts_per_leaf, oversubscription, host_rate,
                               fabric, host_link)
    if profiles:
        fabric, host_link = "fabric", "host"
    add_fabric(b, "", spines, leaves, hosts_per_leaf, fabric, host_link, ecmp_hash)
    ratio = f", oversubscription {oversubscription}:1" if profiles else ""
    return b.spec(name, f"leaf-spine: {spines} spines, {leaves} leaves x {hosts_per_leaf} "
                        f"hosts{ratio}", profiles=profiles)


def _oversubscribed(spines: int, hosts_per_leaf: int, ratio: float | None,
                    host_rate: str | None, fabric: str | None,
                    host_link: str | None) -> dict[str, ProfileSpec]:
    if ratio is None and host_rate is None:
        return {}
    if ratio is None or host_rate is None:
        missing = "host_rate" if ratio is not None else "oversubscription"
        raise GeneratorParamError(missing, "oversubscription and host_rate go together "
                                           "(e.g. oversubscription: 3, host_rate: 25Gbit)")
    if fabric is not None or host_link is not None:
        raise GeneratorParamError("oversubscription", "with oversubscription the generator "
                                  "makes the fabric and host profiles; drop fabric/host_link")
    try:
        host_bps = parse_rate_bps(host_rate)
    except UnitError as exc:
        raise GeneratorParamError("host_rate", str(exc)) from None
    fabric_bps = round(hosts_per_leaf * host_bps / (spines * ratio))
    return {"host": ProfileSpec(rate=format_rate(host_bps)),
            "fabric": ProfileSpec(rate=format_rate(fabric_bps))}
