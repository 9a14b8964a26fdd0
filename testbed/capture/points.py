"""Which interfaces a run captures on (pure: plan in, list out; no root).

``"bottleneck"`` (the default) is where queues build and packets are lost, by these rules, in
plan order, each interface once:

1. **DCI links**: both ends of every DCI link (models.paths.dci_links: the two nodes lie
   in different sites, by node label ``site``, else ``group``, when both ends have one; or an
   end's interface is named ``dci-*``).
2. **Fan-in toward a host**: a switch or router port whose egress toward a host is shaped
   (rate set): where incast converges (the last hop of every flow to that host).
3. **Rate drops**: a switch or router egress that is shaped and slower than the fastest rate
   arriving at that node over its other links (traffic comes in faster than it can leave, as
   on a slower edge or DCI link). An unshaped direction counts as infinitely fast.

A host's own egress is not chosen for its rate: tcpdump on one end of a link sees both
directions, so the switch/router end of an edge link (rule 2) also shows the host's uplink.

If no interface qualifies (a lab without any shaping), rule 2 applies to unshaped ports too.
``"all"`` is every link interface of every node; an explicit list names ``node:ifname``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from models.errors import SpecError, SpecIssue
from models.paths import dci_links
from models.plan import LabPlan, LinkPlan

__all__ = ["CapturePoint", "select_interfaces", "bottleneck_interfaces"]

FORWARDING = ("switch", "router")


@dataclass(frozen=True, slots=True)
class CapturePoint:
    """One interface to capture on: node, interface name, the plan link it belongs to."""

    node: str
    ifname: str
    link: str


def _rate(value: int | None) -> float:
    return math.inf if value is None else float(value)


def _directions(plan: LabPlan):
    """(link, tx node, tx ifname, rx node, egress rate bit/s or inf) of every direction."""
    for lk in plan.links:
        yield lk, lk.a.node, lk.a.ifname, lk.b.node, _rate(lk.a_to_b.rate_bps)
        yield lk, lk.b.node, lk.b.ifname, lk.a.node, _rate(lk.b_to_a.rate_bps)


def _fastest(rates: list[float]) -> float:
    return max(rates, default=0.0)


def bottleneck_interfaces(plan: LabPlan) -> list[CapturePoint]:
    """The ``"bottleneck"`` selection of ``plan`` (rules in the module docstring)."""
    kind = {n.name: n.kind for n in plan.nodes}
    dirs = list(_directions(plan))
    into: dict[str, list[tuple[str, float]]] = {n.name: [] for n in plan.nodes}
    for lk, _, _, rx, rate in dirs:  # node -> [(link name, rate arriving over it)]
        into[rx].append((lk.name, rate))
    chosen: dict[tuple[str, str], CapturePoint] = {}
    dci = dci_links(plan)

    def pick(lk: LinkPlan, node: str, ifname: str) -> None:
        chosen.setdefault((node, ifname), CapturePoint(node, ifname, lk.name))

    for lk, tx, ifname, rx, rate in dirs:
        if lk.name in dci:
            pick(lk, tx, ifname)
        elif math.isfinite(rate) and kind[tx] in FORWARDING and kind[rx] == "host":
            pick(lk, tx, ifname)
        elif math.isfinite(rate) and kind[tx] in FORWARDING and rate < _fastest(
                [r for name, r in into[tx] if name != lk.name]):
            pick(lk, tx, ifname)
    if not chosen:
        for lk, tx, ifname, rx, _ in dirs:
            if kind[tx] in FORWARDING and kind[rx] == "host":
                pick(lk, tx, ifname)
    return _in_plan_order(plan, chosen)


def _in_plan_order(plan: LabPlan, chosen: dict[tuple[str, str], CapturePoint]
                   ) -> list[CapturePoint]:
    order = [(ep.node, ep.ifname) for lk in plan.links for ep in (lk.a, lk.b)]
    return [chosen[k] for k in order if k in chosen]


def _all(plan: LabPlan) -> list[CapturePoint]:
    return [CapturePoint(ep.node, ep.ifname, lk.name) for lk in plan.links
            for ep in (lk.a, lk.b)]


def select_interfaces(plan: LabPlan, selection: str | Sequence[str],
                      key_path: tuple[str | int, ...] = ("capture", "interfaces")
                      ) -> list[CapturePoint]:
    """The capture points of ``selection``: ``"bottleneck"``, ``"all"`` or a list of
    ``"node:ifname"``. Raises SpecError at ``key_path`` (plus the list index) for an unknown
    keyword, a malformed entry, an unknown node or an interface the node does not have (the
    message lists what it has), or an entry given twice."""
    if isinstance(selection, str):
        if selection == "bottleneck":
            return bottleneck_interfaces(plan)
        if selection == "all":
            return _all(plan)
        raise SpecError(SpecIssue(f"unknown interface selection {selection!r}; use "
                                  "bottleneck, all or a list of node:ifname",
                                  key_path=key_path))
    by_key = {(p.node, p.ifname): p for p in _all(plan)}
    issues, points = [], []
    for i, entry in enumerate(selection):
        point, problem = _one(plan, by_key, entry)
        if problem is None and point in points:
            problem = f"{entry!r} is listed twice"
        if problem is not None:
            issues.append(SpecIssue(problem, key_path=(*key_path, i)))
        elif point is not None:
            points.append(point)
    if issues:
        raise SpecError(issues)
    return points


def _one(plan: LabPlan, by_key: dict[tuple[str, str], CapturePoint], entry: object
         ) -> tuple[CapturePoint | None, str | None]:
    if not isinstance(entry, str) or entry.count(":") != 1:
        return None, f"{entry!r} is not node:ifname"
    node, ifname = entry.split(":")
    if node not in {n.name for n in plan.nodes}:
        return None, f"unknown node {node!r} in {entry!r}"
    if (node, ifname) not in by_key:
        have = sorted(p.ifname for p in by_key.values() if p.node == node)
        return None, f"node {node} has no interface {ifname!r}; it has {', '.join(have)}"
    return by_key[(node, ifname)], None
