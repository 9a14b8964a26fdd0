"""ALTO network and cost maps of a resolved lab plan (pure; RFC 7285's JSON shapes).

An ALTO server tells applications what the network looks like without exposing its
internals: a **network map** groups endpoint addresses into PIDs (provider-defined
identifiers; here one PID per site, or per rack), and **cost maps** give a cost for every
ordered pair of PIDs under one cost type. The documents built here have the shapes of
RFC 7285 sections 11.2.1.6 (network map: ``meta.vtag`` {``resource-id``, ``tag``},
``network-map`` PID -> {``ipv4``: [prefix...], ``ipv6``: [...]}) and 11.2.3.6 (cost map:
``meta.dependent-vtags`` naming the network map, ``meta.cost-type`` {``cost-mode``,
``cost-metric``}, ``cost-map`` src PID -> dst PID -> cost); media types
:data:`MEDIA_NETWORKMAP` and :data:`MEDIA_COSTMAP` (RFC 7285 section 10.1).

**PIDs** (:func:`pids_of_plan`): ``by="site"`` one PID per site (:func:`models.paths.site_of`:
label ``site``, else ``group``, else ``default``); ``by="rack"`` one PID per first-hop node
of a host (its leaf or access switch). A PID's prefixes are its hosts' interface addresses as
host routes (/32, /128), so every lab address maps to exactly one PID.

**Costs** from the plan, along the route walk's first path (models.paths; the path of every
route's first next hop) for every ordered pair of distinct hosts, then aggregated per PID pair
as the worst host pair (max for costs, min for bandwidth: a consumer plans for the pair it may
get). Metrics (:data:`COST_METRICS`):

* ``hopcount``: IP hops, i.e. link directions sent by an L3 node (a host or router; an L2
  switch's forwarding is not an IP hop). RFC 9439 ``hopcount``.
* ``routingcost``: the sum over crossed link directions of ceil(reference / rate) with a
  reference of :data:`REFERENCE_BPS` (the OSPF convention of interface cost = reference
  bandwidth / interface bandwidth, RFC 2328 appendix C.3 leaves the value to configuration);
  an unshaped direction costs 1. RFC 7285 ``routingcost`` (its value is provider-defined).
* ``delay-ow``: configured one-way delay in milliseconds (the delay lines' sum: propagation
  only, no serialization or queueing). RFC 9439 ``delay-ow`` (milliseconds).
* ``bw-available``: the smallest configured rate on the path in kbit/s (RFC 9439
  ``bw-available``, kilobits per second); a pair whose path is entirely unshaped has no entry
  (RFC 7285 section 11.2.3.6: a pair without a defined cost is omitted).

A PID to itself is its worst pair of distinct hosts (0 and no bandwidth entry for a one-host
PID).

**Live costs** (:func:`live_cost_map`, from the counters during a run): the same paths with
each link direction's measured use (:class:`LinkUse`: the bits per second its sender's
interface sent in the last window, and the mean backlog of its qdiscs): ``bw-available``
becomes the smallest of (configured rate - measured rate, at least 0) on the path (RFC 9439
``bw-available``: the capacity minus the measured traffic); ``delay-ow`` the configured
delay plus each direction's queueing, backlog x 8 / rate (the bottleneck buffer being the one
place where a packet queues, docs/ARCHITECTURE.md decision 2; an unshaped direction adds
none). A direction without a measurement keeps its configured value.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from models.paths import Hop, PathWalker, site_of
from models.plan import LabPlan

__all__ = ["MEDIA_NETWORKMAP", "MEDIA_COSTMAP", "COST_METRICS", "REFERENCE_BPS", "PidBy",
           "AltoMaps", "pids_of_plan", "network_map", "cost_map", "alto_maps",
           "costs_of", "pid_of_address", "costmap_filename", "LinkUse", "LIVE_METRICS",
           "live_cost_map", "host_paths"]

MEDIA_NETWORKMAP = "application/alto-networkmap+json"
MEDIA_COSTMAP = "application/alto-costmap+json"
COST_METRICS: tuple[str, ...] = ("hopcount", "routingcost", "delay-ow", "bw-available")
REFERENCE_BPS = 100e9  # routingcost reference bandwidth: a 100 Gbit/s hop costs 1
NETWORK_MAP_ID = "networkmap"
PidBy = Literal["site", "rack"]
LIVE_METRICS: tuple[str, ...] = ("bw-available", "delay-ow")


@dataclass(frozen=True)
class LinkUse:
    """Measured use of one link direction: ``tx_bps`` bits/s its sender sent in the last
    window (None: not measured yet), ``backlog_bytes`` the mean backlog of its qdiscs."""

    tx_bps: float | None
    backlog_bytes: float = 0.0


Usage = Mapping[tuple[str, str], LinkUse]  # (sending node, its ifname) -> use


def pids_of_plan(plan: LabPlan, by: PidBy = "site") -> dict[str, str]:
    """Host name -> PID for every host of ``plan`` (module docstring: ``site`` or ``rack``).
    Raises ValueError for another ``by``."""
    if by == "site":
        return {h.name: site_of(plan, h.name) or "default" for h in plan.hosts()}
    if by == "rack":
        return {h.name: _first_hop(plan, h.name) for h in plan.hosts()}
    raise ValueError(f"unknown PID grouping {by!r}; known: site, rack")


def _first_hop(plan: LabPlan, host: str) -> str:
    links = plan.links_of(host)
    if not links:
        return host
    lk = links[0]
    return lk.b.node if lk.a.node == host else lk.a.node


def network_map(plan: LabPlan, pids: Mapping[str, str]) -> dict[str, Any]:
    """RFC 7285 network map of ``pids`` (host -> PID): every address of a host as a host
    prefix under its PID; ``meta.vtag.tag`` is the SHA-256 of the canonical map (64 hex
    characters, within RFC 7285's 64-character limit), so it changes exactly when the map
    does."""
    body: dict[str, dict[str, list[str]]] = {}
    for lk in plan.links:
        for ep in (lk.a, lk.b):
            if ep.node not in pids:
                continue
            entry = body.setdefault(pids[ep.node], {})
            for fam, ifa in (("ipv4", ep.ipv4), ("ipv6", ep.ipv6)):
                if ifa is not None:
                    entry.setdefault(fam, []).append(f"{ifa.ip}/{ifa.max_prefixlen}")
    body = {p: {f: sorted(v) for f, v in sorted(e.items())} for p, e in sorted(body.items())}
    tag = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return {"meta": {"vtag": {"resource-id": NETWORK_MAP_ID, "tag": tag}},
            "network-map": body}


def _hop_value(metric: str, hop: Hop, kind: Mapping[str, str],
               usage: Usage | None = None) -> float | None:
    rate = hop.shaping.rate_bps
    use = usage.get((hop.node, hop.ifname)) if usage is not None else None
    if metric == "hopcount":
        return 0.0 if kind[hop.node] == "switch" else 1.0
    if metric == "routingcost":
        return 1.0 if rate is None else float(max(1, math.ceil(REFERENCE_BPS / rate)))
    if metric == "delay-ow":
        queue_ms = use.backlog_bytes * 8 / rate * 1000.0 if use and rate else 0.0
        return hop.shaping.delay_s * 1000.0 + queue_ms
    if rate is None:
        return None
    if use is not None and use.tx_bps is not None:
        return max(0.0, rate - use.tx_bps) / 1000.0
    return rate / 1000.0


def _path_cost(metric: str, path: Sequence[Hop], kind: Mapping[str, str],
               usage: Usage | None = None) -> float | None:
    values = [_hop_value(metric, h, kind, usage) for h in path]
    if metric == "bw-available":
        known = [v for v in values if v is not None]
        return min(known) if known else None
    return sum(v for v in values if v is not None)


def _host_pairs(plan: LabPlan, hosts: Sequence[str]) -> dict[tuple[str, str], list[Hop]]:
    walker = PathWalker(plan)
    out = {}
    for a in hosts:
        for b in hosts:
            addr = plan.address_of(b)
            if a != b and addr is not None:
                out[(a, b)] = walker.paths(a, addr)[0]
    return out


def host_paths(plan: LabPlan, pids: Mapping[str, str]) -> dict[tuple[str, str], list[Hop]]:
    """(host, host) -> the route walk's first path for every ordered pair of distinct hosts
    of ``pids`` (computed once, reused by every refresh of :func:`live_cost_map`). Raises
    models.paths.PathError when a host cannot reach another."""
    return _host_pairs(plan, sorted(pids))


def live_cost_map(plan: LabPlan, pids: Mapping[str, str], metric: str,
                  vtag: Mapping[str, str], usage: Usage,
                  paths: Mapping[tuple[str, str], list[Hop]] | None = None) -> dict[str, Any]:
    """The cost map of ``metric`` (one of :data:`LIVE_METRICS`) under the measured ``usage``
    ((sending node, ifname) -> :class:`LinkUse`), as in the module docstring's live costs;
    ``paths`` from :func:`host_paths` (computed here when None). Raises ValueError for
    another metric."""
    if metric not in LIVE_METRICS:
        raise ValueError(f"no live cost for {metric!r}; live: {', '.join(LIVE_METRICS)}")
    return cost_map(plan, pids, metric, vtag, _pairs=paths, _usage=usage)


def cost_map(plan: LabPlan, pids: Mapping[str, str], metric: str, vtag: Mapping[str, str],
             *, _pairs: Mapping[tuple[str, str], list[Hop]] | None = None,
             _usage: Usage | None = None) -> dict[str, Any]:
    """RFC 7285 cost map (``cost-mode`` numerical) of ``metric`` between the PIDs of
    ``pids`` (host -> PID), depending on the network map whose ``meta.vtag`` is ``vtag``.
    Costs as in the module docstring (worst host pair). Raises ValueError for an unknown
    metric and models.paths.PathError when a host cannot reach another."""
    if metric not in COST_METRICS:
        raise ValueError(f"unknown cost metric {metric!r}; known: {', '.join(COST_METRICS)}")
    pairs = _pairs if _pairs is not None else _host_pairs(plan, sorted(pids))
    kind = {n.name: n.kind for n in plan.nodes}
    worst: Callable[[float, float], float] = min if metric == "bw-available" else max
    table: dict[str, dict[str, float]] = {p: {} for p in sorted(set(pids.values()))}
    for (a, b), path in pairs.items():
        value = _path_cost(metric, path, kind, _usage)
        if value is None:
            continue
        row = table[pids[a]]
        row[pids[b]] = worst(row[pids[b]], value) if pids[b] in row else value
    for p, row in table.items():
        if metric != "bw-available" and p not in row:
            row[p] = 0.0  # a one-host PID
    return {"meta": {"dependent-vtags": [dict(vtag)],
                     "cost-type": {"cost-mode": "numerical", "cost-metric": metric}},
            "cost-map": {p: dict(sorted(r.items())) for p, r in table.items()}}


@dataclass(frozen=True)
class AltoMaps:
    """A plan's ALTO documents: ``pids`` host -> PID, ``network_map`` and ``cost_maps``
    (cost metric -> cost map document), all JSON-ready."""

    pids: dict[str, str]
    network_map: dict[str, Any]
    cost_maps: dict[str, dict[str, Any]]


def alto_maps(plan: LabPlan, by: PidBy = "site",
              metrics: Sequence[str] = COST_METRICS) -> AltoMaps:
    """The network map and one cost map per metric of ``plan`` (pure). Raises as
    :func:`pids_of_plan` and :func:`cost_map` do."""
    pids = pids_of_plan(plan, by)
    nmap = network_map(plan, pids)
    pairs = _host_pairs(plan, sorted(pids))
    vtag = nmap["meta"]["vtag"]
    return AltoMaps(pids, nmap, {m: cost_map(plan, pids, m, vtag, _pairs=pairs)
                                 for m in metrics})


def costmap_filename(metric: str) -> str:
    """The file name of a cost map in a run's ``alto/`` directory: ``costmap-<metric>.json``."""
    return f"costmap-{metric}.json"


def costs_of(document: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    """(src PID, dst PID) -> cost of a cost map document; raises ValueError naming what is
    missing when ``document`` is not a numerical RFC 7285 cost map."""
    try:
        mode = document["meta"]["cost-type"]["cost-mode"]
        table = document["cost-map"]
    except (KeyError, TypeError):
        raise ValueError("not an ALTO cost map: needs meta.cost-type and cost-map") from None
    if mode != "numerical":
        raise ValueError(f"cost-mode {mode!r}: only numerical cost maps carry costs")
    return {(s, d): float(v) for s, row in table.items() for d, v in row.items()}


def pid_of_address(document: Mapping[str, Any], address: str) -> str | None:
    """The PID of ``address`` in a network map document by longest prefix match, or None
    when no prefix covers it (RFC 7285 section 11.2.1: a client maps its endpoints so)."""
    ip = ipaddress.ip_address(address)
    best: tuple[int, str | None] = (-1, None)
    for pid, fams in document["network-map"].items():
        for prefix in (*fams.get("ipv4", ()), *fams.get("ipv6", ())):
            net = ipaddress.ip_network(prefix, strict=False)
            if ip.version == net.version and ip in net and net.prefixlen > best[0]:
                best = (net.prefixlen, pid)
    return best[1]
