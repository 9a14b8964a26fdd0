"""Turn a PoP graph into an aitb topology (pure): routers, hosts, delays from distances.

Delay of a link = great-circle distance between its PoPs (haversine on a sphere of radius
6371.0 km, the IUGG mean Earth radius) x ``stretch`` (fibre routes are longer than the great
circle; 1.0 = the lower bound) x 5 us/km, the one-way delay of light in fibre (refractive
index about 1.47: 1e9 / (299792.458 / 1.47) = 4.9 us/km, rounded up as the usual planning
figure). Rates come from LinkSpeedRaw where the map gives it, else ``default_rate``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from models.errors import SpecError, SpecIssue
from models.units import format_rate
from topologies.generators import build_spec
from topologies.spec import TopologySpec
from topologies.wan.reader import Pop, WanGraph

__all__ = ["WanOptions", "Attachment", "wan_topology", "great_circle_km", "FIBRE_US_PER_KM",
           "EARTH_RADIUS_KM"]

FIBRE_US_PER_KM = 5.0
EARTH_RADIUS_KM = 6371.0


@dataclass(frozen=True, slots=True)
class Attachment:
    """Generator ``generator`` with ``params`` built beside PoP ``pop`` (id or label)."""

    pop: str
    generator: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WanOptions:
    """``stretch``: route-stretch factor (>= 1); ``delays``: False leaves delays out (a lab
    without delay runs without the delay line or the VM); ``missing_delay_us``: delay of a
    link with a PoP lacking coordinates (None: no delay); ``default_rate``: rate of links
    without LinkSpeedRaw (a unit string, None: unshaped); ``hosts_per_pop``: hosts behind
    every PoP router; ``attach``: fabrics or edge sites built beside chosen PoPs."""

    stretch: float = 1.0
    delays: bool = True
    missing_delay_us: float | None = None
    default_rate: str | None = "10Gbit"
    hosts_per_pop: int = 1
    attach: tuple[Attachment, ...] = ()
    name: str | None = None


def great_circle_km(a: Pop, b: Pop) -> float:
    """Haversine distance between two PoPs with coordinates, in km."""
    assert a.lat is not None and a.lon is not None and b.lat is not None and b.lon is not None
    p1, p2 = math.radians(a.lat), math.radians(b.lat)
    dp, dl = p2 - p1, math.radians(b.lon - a.lon)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def _names(pops: tuple[Pop, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    used: set[str] = set()
    for p in pops:
        base = re.sub(r"[^a-z0-9]+", "-", p.label.lower()).strip("-")[:20].strip("-")
        base = base or f"pop{p.id}"
        name, k = base, 2
        while name in used:
            name, k = f"{base[:17]}-{k}", k + 1
        used.add(name)
        out[p.id] = name
    return out


def wan_topology(g: WanGraph, opts: WanOptions, source: str
                 ) -> tuple[dict[str, Any], list[SpecIssue]]:
    """The topology mapping (as a topology file holds it) of ``g`` and the report: one issue
    per PoP without coordinates, per parallel link and per attachment. Raises
    :class:`SpecError` naming the option for a bad stretch or an attachment at an unknown
    PoP or with bad generator parameters."""
    if not opts.stretch >= 1.0:
        raise SpecError(SpecIssue(f"stretch {opts.stretch} must be at least 1 (a fibre route "
                                  "is never shorter than the great circle)", file=source,
                                  key_path=("--stretch",)))
    names = _names(g.pops)
    pops = {p.id: p for p in g.pops}
    report = [SpecIssue(f"PoP {p.label!r} (node {p.id!r}) has no coordinates: its links get "
                        + (f"{opts.missing_delay_us} us" if opts.missing_delay_us is not None
                           else "no delay"), file=source)
              for p in g.pops if p.lat is None]
    nodes: dict[str, Any] = {}
    links: list[dict[str, Any]] = []
    for p in g.pops:
        nodes[names[p.id]] = {"kind": "router", "labels": {"pop": p.label}}
        for k in range(1, opts.hosts_per_pop + 1):
            nodes[f"{names[p.id]}-h{k}"] = {"kind": "host", "labels": {"pop": p.label}}
            links.append({"endpoints": [f"{names[p.id]}-h{k}", names[p.id]]})
    for i, e in enumerate(g.edges):
        links.append(_link(e, pops, names, opts, i))
        if e.parallel:
            report.append(SpecIssue(f"link {pops[e.a].label!r} -- {pops[e.b].label!r} is "
                                    f"parallel link #{e.parallel + 1} of that pair (kept: "
                                    "ECMP over both)", file=source))
    profiles: dict[str, Any] = {}
    if opts.default_rate is not None:
        profiles["wan-default"] = {"rate": opts.default_rate}
    for n, att in enumerate(opts.attach, start=1):
        report.append(_attach(n, att, g, names, nodes, links, profiles, source))
    name = opts.name or re.sub(r"[^a-z0-9]+", "-", g.network.lower()).strip("-")[:32] or "wan"
    topo = {"name": name, "description": f"{g.network}: {len(g.pops)} PoPs, {len(g.edges)} "
                                          f"links (Internet Topology Zoo)",
            "profiles": profiles, "nodes": nodes, "links": links}
    return topo, report


def _link(e, pops: dict[str, Pop], names: dict[str, str], opts: WanOptions,
          index: int) -> dict[str, Any]:
    a, b = pops[e.a], pops[e.b]
    ends = [names[e.a], names[e.b]]
    if e.parallel:  # parallel links need their own interface names: wan<edge index>
        ends = [f"{n}:wan{index}" for n in ends]
    link: dict[str, Any] = {"endpoints": ends}
    if e.rate_bps is not None:
        link["rate"] = format_rate(e.rate_bps)
    elif opts.default_rate is not None:
        link["profile"] = "wan-default"
    if opts.delays:
        if a.lat is not None and b.lat is not None:
            us = great_circle_km(a, b) * opts.stretch * FIBRE_US_PER_KM
        else:
            us = opts.missing_delay_us
        if us is not None and us > 0:
            link["delay"] = f"{max(1, round(us))}us"
    return link


def _find_pop(att: Attachment, g: WanGraph, names: dict[str, str], source: str) -> Pop:
    want = att.pop.lower()
    for p in g.pops:
        if want in (p.id.lower(), p.label.lower(), names[p.id]):
            return p
    raise SpecError(SpecIssue(f"--attach {att.pop}={att.generator}: no PoP {att.pop!r}; PoPs: "
                              + ", ".join(sorted(names.values())), file=source,
                              key_path=("--attach",)))


def _top_tier(spec: TopologySpec) -> list[str]:
    """The routers farthest (in hops) from any host: spines, cores, borders. When every
    router has a host of its own (torus, ring...), the first router. A fabric without
    routers (a single switch) attaches by its switches, the same way."""
    adj: dict[str, set[str]] = {m: set() for m in spec.nodes}
    for lk in spec.links:
        a, b = (end.split(":")[0] for end in lk.endpoints)
        adj[a].add(b)
        adj[b].add(a)
    dist = {m: 0 for m, s in spec.nodes.items() if s.kind == "host"}
    frontier = list(dist)
    while frontier:
        nxt = []
        for m in frontier:
            for o in adj[m] - dist.keys():
                dist[o] = dist[m] + 1
                nxt.append(o)
        frontier = nxt
    routers = [m for m, s in spec.nodes.items() if s.kind == "router"] or \
        [m for m, s in spec.nodes.items() if s.kind == "switch"]
    far = max((dist.get(m, 0) for m in routers), default=0)
    return [m for m in routers if dist.get(m, 0) == far] if far > 1 else routers[:1]


def _attach(n: int, att: Attachment, g: WanGraph, names: dict[str, str],
            nodes: dict[str, Any], links: list[dict[str, Any]], profiles: dict[str, Any],
            source: str) -> SpecIssue:
    pop = _find_pop(att, g, names, source)
    spec = build_spec(att.generator, dict(att.params), f"{source} --attach {att.pop}")
    prefix = f"dc{n}-"
    top = _top_tier(spec)
    for m, s in spec.nodes.items():
        body = s.model_dump(exclude_none=True)
        body["labels"] = {**body.get("labels", {}), "site": f"dc{n}", "pop": pop.label}
        nodes[prefix + m] = body
    for name, prof in spec.profiles.items():
        profiles[prefix + name] = prof.model_dump(exclude_none=True)
    for lk in spec.links:
        body = lk.model_dump(exclude_none=True)
        body["endpoints"] = [prefix + end for end in lk.endpoints]
        if body.get("profile") in spec.profiles:  # built-in profiles keep their names
            body["profile"] = prefix + body["profile"]
        links.append(body)
    for m in top:
        links.append({"endpoints": [names[pop.id], prefix + m]})
    return SpecIssue(f"attached {att.generator} as {prefix}* at PoP {pop.label!r} "
                     f"({len(spec.nodes)} nodes, linked to {', '.join(prefix + m for m in top)})",
                     file=source)
