"""spec -> :class:`LabPlan`: generator expansion, checks, shaping, addressing, routing.

Every stage collects all the problems it finds; the first stage with problems raises them
together as one :class:`SpecError` (later stages need the earlier ones to be sound).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from models.errors import SpecError, SpecIssue
from models.plan import Endpoint, FrrRouting, LabPlan, LinkPlan, NodePlan, PlanError, frr_problems
from models.units import parse_duration_s
from topologies.addressing import Segment, allocate, check_segments, find_segments
from topologies.generators import expand
from topologies.graph import Edge, Port, build_edges
from topologies.nodes import node_plans, setting_key_path
from topologies.profiles import known_profiles
from topologies.routing import RoutingResult, compute_routes
from topologies.spec import FrrSpec, TopologySpec
from topologies.traces import link_traces
from topologies.validate import check_spec

__all__ = ["resolve"]

MAX_PAIRS_SHOWN = 10
LOOPBACK = "lo"  # the interface of a forwarding host's node address


class _Stage:
    """Raises the issues of a stage, with ``source`` and generated items explained."""

    def __init__(self, source: str, generated_links: int, generated_nodes: set[str]) -> None:
        self.source = source
        self.n_links = generated_links
        self.gen_nodes = generated_nodes

    def _place(self, issue: SpecIssue) -> SpecIssue:
        path, msg = issue.key_path, issue.message
        if len(path) >= 2 and path[0] == "links" and isinstance(path[1], int) and self.n_links:
            if path[1] < self.n_links:
                path, msg = ("generator",), f"generated links[{path[1]}]: {msg}"
            else:
                path = ("links", path[1] - self.n_links, *path[2:])
        elif len(path) >= 2 and path[0] == "nodes" and path[1] in self.gen_nodes:
            path, msg = ("generator",), f"generated node {path[1]}: {msg}"
        return SpecIssue(msg, file=issue.file or self.source, key_path=path, line=issue.line)

    def check(self, issues: Sequence[SpecIssue]) -> None:
        if issues:
            raise SpecError([self._place(i) for i in issues])


def _unreachable(plan_nodes: dict[str, NodePlan], segments: list[Segment],
                 rr: RoutingResult) -> list[SpecIssue]:
    """Host pairs where one cannot reach the other's traffic address (a forwarding host's
    node address, else its first one)."""
    primary: dict[str, int] = {}
    # numbered as in routing: the segments that got a subnet, in order
    for k, seg in enumerate(s for s in segments if s.v4 is not None):
        for p in seg.ports:
            if seg.loopback:
                primary[p.node] = k
            else:
                primary.setdefault(p.node, k)
    hosts = [n for n, p in plan_nodes.items() if p.kind == "host" and n in primary]
    on_seg: dict[int, list[str]] = {}
    for h in hosts:
        on_seg.setdefault(primary[h], []).append(h)
    bad: set[tuple[str, str]] = set()
    all_segs = set(on_seg)
    for a in hosts:
        for k in all_segs - rr.reach[a]:
            bad.update(tuple(sorted((a, b))) for b in on_seg[k])  # type: ignore[misc]
    pairs = sorted(bad)
    out = [SpecIssue(f"hosts {a} and {b} cannot reach each other (hosts do not forward "
                     "unless they set forward: true; connect them through a router or "
                     "switch, or make the hosts between them forward)", key_path=("nodes", a))
           for a, b in pairs[:MAX_PAIRS_SHOWN]]
    if len(pairs) > MAX_PAIRS_SHOWN:
        out.append(SpecIssue(f"... and {len(pairs) - MAX_PAIRS_SHOWN} more unreachable host "
                             "pairs", key_path=("links",)))
    return out


def _rank_nic_issues(spec: TopologySpec, nodes: dict[str, NodePlan], edges: list[Edge]
                     ) -> list[SpecIssue]:
    """Hosts whose ranks_per_host exceeds their NICs (links), or that forward; each at the
    key that set it (the node's own, its group's or ``defaults.host``), one issue per key
    and problem naming the hosts."""
    nics: dict[str, int] = {}
    for e in edges:
        for port in (e.a, e.b):
            nics[port.node] = nics.get(port.node, 0) + 1
    found: dict[tuple[tuple[str, ...], str], list[str]] = {}
    for name, p in nodes.items():
        if p.ranks_per_host is None:
            continue
        where = setting_key_path(spec, name, "ranks_per_host")
        if p.forward:
            what = ("ranks_per_host binds ranks to NICs, but the node forwards (forward: "
                    "true gives it one traffic address)")
        elif p.ranks_per_host > nics.get(name, 0):
            n = nics.get(name, 0)
            what = (f"ranks_per_host {p.ranks_per_host} needs as many NICs, and {{}} "
                    f"{n} link(s); use at most {n} or link it more")
        else:
            continue
        found.setdefault((where, what), []).append(name)
    out = []
    for (where, what), names in found.items():
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        label = "node" if len(names) == 1 else "nodes"
        what = what.format("the node has" if len(names) == 1 else "each has")
        out.append(SpecIssue(f"{label} {', '.join(names[:3])}{more}: {what}", key_path=where))
    return out


def _link_plans(edges: list[Edge], addr: dict, spec: TopologySpec) -> tuple[LinkPlan, ...]:
    def ep(port: Port) -> Endpoint:
        v4, v6 = addr.get(port, (None, None))
        return Endpoint(node=port.node, ifname=port.ifname, ipv4=v4, ipv6=v6)

    def line(e: Edge) -> str:  # the link's own key, else the file's, else auto
        return spec.links[e.index].delay_line or spec.delay_line or "auto"

    return tuple(LinkPlan(name=e.name, a=ep(e.a), b=ep(e.b), a_to_b=e.a_to_b, b_to_a=e.b_to_a,
                          mtu=e.mtu, delay_line=line(e)) for e in edges)


_FRR_SECONDS = ("bgp_keepalive", "bgp_hold", "ospf_hello", "ospf_dead")


def _frr_routing(spec: TopologySpec, nodes: dict[str, NodePlan]
                 ) -> tuple[FrrRouting | None, list[SpecIssue]]:
    """The plan's :class:`FrrRouting` from ``routing:`` (None: static), with every problem
    as an issue naming the key: timers that are not whole seconds or out of range, and
    what FRR labs do not support (IPv6 addressing, forwarding hosts, load_balancing other
    than flow, no router at all)."""
    r: FrrSpec | None = spec.routing
    if r is None:
        return None, []
    issues: list[SpecIssue] = []
    values: dict[str, object] = {"protocol": r.protocol, "bfd": r.bfd, "peering": r.peering}
    for key in _FRR_SECONDS:
        text = getattr(r, key)
        if text is None:
            continue
        secs = parse_duration_s(text)
        if abs(secs - round(secs)) > 1e-9:
            issues.append(SpecIssue(f"{key} {text} must be whole seconds (FRR's timers "
                                    "count seconds)", key_path=("routing", key)))
        values[f"{key}_s"] = round(secs)
    for key in ("bfd_interval", "converge_timeout", "settle"):
        text = getattr(r, key)
        if text is not None:
            values[f"{key}_s"] = parse_duration_s(text)
    if r.bfd_multiplier is not None:
        values["bfd_multiplier"] = r.bfd_multiplier
    frr = FrrRouting(**values)  # type: ignore[arg-type]
    for p in frr_problems(frr):
        key = p.split(" ", 1)[0]
        issues.append(SpecIssue(p, key_path=("routing", key)))
    if spec.addressing.ipv6:
        issues.append(SpecIssue("routing: frr routes IPv4 only; set addressing.ipv6: false "
                                "or routing: static", key_path=("routing",)))
    if not any(p.kind == "router" for p in nodes.values()):
        issues.append(SpecIssue("routing: frr needs at least one router (its daemons run in "
                                "the routers' namespaces)", key_path=("routing",)))
    for name, p in nodes.items():
        if p.forward:
            issues.append(SpecIssue("forwarding hosts route statically; routing: frr runs "
                                    "daemons in routers only", key_path=("nodes", name,
                                                                         "forward")))
        if p.kind == "router" and p.load_balancing != "flow":
            issues.append(SpecIssue(f"load_balancing {p.load_balancing} needs the plan's "
                                    "static multipath routes; with routing: frr only flow",
                                    key_path=("nodes", name, "load_balancing")))
    return frr, issues


def resolve(spec: TopologySpec, source: str = "<spec>", base_dir: Path | None = None
            ) -> LabPlan:
    """Resolve ``spec`` into a :class:`LabPlan` ready for the runtime (no root; reads only the
    trace files that links name).

    source: file name or description used in error messages and kept in ``plan.source``.
    base_dir: where relative trace file paths start (default: the directory of ``source``).
    Raises :class:`SpecError` listing every problem of the first failing stage.
    """
    n_file_links, file_nodes = len(spec.links), set(spec.nodes)
    spec = expand(spec, source)
    stage = _Stage(source, len(spec.links) - n_file_links, set(spec.nodes) - file_nodes)
    profiles = known_profiles(spec.profiles)
    stage.check(check_spec(spec, profiles))
    nodes = node_plans(spec)
    routing, issues = _frr_routing(spec, nodes)
    stage.check(issues)
    edges, issues = build_edges(spec, profiles)
    stage.check(issues)
    stage.check(_rank_nic_issues(spec, nodes, edges))
    traces, issues = link_traces(spec, profiles, edges, base_dir or Path(source).parent, source)
    stage.check(issues)
    kinds = {n: p.kind for n, p in nodes.items()}
    segments = find_segments(edges, kinds)
    # an OVS switch floods along aitb's spanning tree (testbed/ovs/flows.py): loops are safe
    stage.check(check_segments(segments, edges, {n: p.stp or p.datapath == "ovs"
                                                 for n, p in nodes.items()}))
    # a forwarding host: a router for routing, with its node address on its loopback
    forwarders = [n for n, p in nodes.items() if p.forward]
    segments += [Segment(order=len(segments) + i, ports=[Port(n, LOOPBACK)], loopback=True)
                 for i, n in enumerate(forwarders)]
    addr, issues = allocate(segments, spec.addressing)
    stage.check(issues)
    cost = {port: e.cost for e in edges for port in (e.a, e.b)}
    cost.update({Port(n, LOOPBACK): 0 for n in forwarders})
    pools = (spec.addressing.ipv4_pool, spec.addressing.ipv6_pool if spec.addressing.ipv6
             else None)
    rr = compute_routes(segments, {**kinds, **dict.fromkeys(forwarders, "router")}, cost,
                        addr, pools, [n for n, p in nodes.items() if p.ranks_per_host])
    stage.check(_unreachable(nodes, segments, rr))
    lo = {n: addr[Port(n, LOOPBACK)] for n in forwarders}
    plan_nodes = tuple(replace(p, routes=rr.routes.get(name, ()),
                               source_routes=rr.source_routes.get(name, ()),
                               lo_ipv4=lo[name][0] if name in lo else None,
                               lo_ipv6=lo[name][1] if name in lo else None)
                       for name, p in nodes.items())
    try:
        return LabPlan(name=spec.name, nodes=plan_nodes, links=_link_plans(edges, addr, spec),
                       source=source, traces=traces, routing=routing)
    except PlanError as exc:  # what the spec checks above let through (free-text values)
        raise SpecError([SpecIssue(p, file=source) for p in exc.problems]) from None
