"""The resolved lab plan: what the runtime (testbed/) realises, with nothing left to infer.

A :class:`LabPlan` is produced by topologies/ (from a file or a generator) after validation,
defaults, addressing and routing; it is pure data, needs no root, and is JSON-serialisable with
:func:`plan_to_dict`. Node names are at most :data:`MAX_NODE_NAME` characters of
``[a-z0-9_-]``; interface names at most 15 characters (IFNAMSIZ-1).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from models.shaping import GilbertElliott, Shaping
from models.sysctl_keys import key_problem, value_problem
from models.trace import LinkTrace, TraceStep
from models.units import BufferSize

__all__ = [
    "NodeKind", "NODE_KINDS", "EcmpHash", "LoadBalancing", "LOAD_BALANCINGS", "Datapath",
    "OvsDatapath", "DelayLine", "DELAY_LINES",
    "MAX_IFNAME", "MAX_NODE_NAME",
    "Endpoint", "LinkPlan", "NextHop", "Route", "SourceRoutes", "NodePlan", "LabPlan",
    "FrrRouting", "frr_problems", "FRR_PROTOCOLS", "flowlet_gap_problem",
    "plan_to_dict", "plan_from_dict", "PlanError", "plan_problems", "NAME_RE", "IFNAME_RE",
]

NodeKind = Literal["host", "switch", "router"]
NODE_KINDS: tuple[str, ...] = ("host", "switch", "router")
EcmpHash = Literal["l3", "l4"]
# how a router spreads traffic over the next hops of a multipath route: flow (the kernel's
# hash, ecmp_hash), packet (spraying, round robin) or flowlet (re-picked after an idle gap);
# testbed/routing/load_balance.py realises them
LoadBalancing = Literal["flow", "packet", "flowlet"]
LOAD_BALANCINGS: tuple[str, ...] = ("flow", "packet", "flowlet")


def flowlet_gap_problem(gap_s: float) -> str | None:
    """Why a flowlet gap of ``gap_s`` seconds cannot be realised, or None. Flowlets time out
    in nftables sets (testbed/routing/load_balance.py), whose timeouts nft takes in whole
    milliseconds; the kernel rounds them up to its tick (4 ms at CONFIG_HZ=250). Pure."""
    if gap_s >= 0.001 and abs(gap_s * 1000 - round(gap_s * 1000)) <= 1e-6:
        return None
    return (f"flowlet_gap {gap_s:g}s cannot be realised: flowlets time out in nftables "
            "sets, in whole milliseconds (the kernel rounds up to its tick, 4 ms at HZ=250); "
            "use a whole number of ms >= 1ms, or load_balancing: packet or flow")
Datapath = Literal["bridge", "ovs"]
OvsDatapath = Literal["auto", "system", "netdev"]
# which delay line holds a link's delay and impairments: netem (the kernel's qdisc), native
# (aitb's NFQUEUE helper, testbed/delay/nfqueue) or auto (netem where the kernel has it, else
# native)
DelayLine = Literal["auto", "netem", "native"]
DELAY_LINES: tuple[str, ...] = get_args(DelayLine)  # each name once, in the Literal
MAX_IFNAME = 15  # IFNAMSIZ (16) minus the terminating NUL, include/uapi/linux/if.h
MAX_NODE_NAME = 32
MAX_LINK_NAME = 64
# Names end up in argv (ip, tc, tcpdump), in Mininet's shell commands and in generated shell
# scripts (topologies/clab): only characters that no shell and no iproute2 parser treats
# specially. The topology reader checks the same rules with file, key and line.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
IFNAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_SYSCTL_RE = re.compile(r"[a-z0-9_]+(\.[a-z0-9_-]+)+")
_CC_RE = re.compile(r"[a-z0-9_]+")
_MAC_RE = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

IPv4If = ipaddress.IPv4Interface
IPv6If = ipaddress.IPv6Interface


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One end of a link: node, interface name inside that node, its addresses (or none: a
    switch port), and an optional fixed MAC address."""

    node: str
    ifname: str
    ipv4: IPv4If | None = None
    ipv6: IPv6If | None = None
    mac: str | None = None


@dataclass(frozen=True, slots=True)
class LinkPlan:
    """A point-to-point link (one veth pair): ``a_to_b`` shapes what ``a`` sends to ``b``.
    delay_line: the delay line asked for (:data:`DelayLine`); the runtime resolves ``auto``
    when the lab is brought up (testbed/delay/nfqueue/choose.py)."""

    name: str
    a: Endpoint
    b: Endpoint
    a_to_b: Shaping = field(default_factory=Shaping)
    b_to_a: Shaping = field(default_factory=Shaping)
    mtu: int = 1500
    delay_line: DelayLine = "auto"

    def endpoint(self, node: str) -> Endpoint:
        """The endpoint on ``node``; raises KeyError if the link does not touch it."""
        if self.a.node == node:
            return self.a
        if self.b.node == node:
            return self.b
        raise KeyError(f"link {self.name} does not touch node {node}")

    def egress(self, node: str) -> Shaping:
        """The shaping of what ``node`` sends on this link."""
        return self.a_to_b if node == self.a.node else self.b_to_a


@dataclass(frozen=True, slots=True)
class NextHop:
    """A next hop: gateway address (``None`` for on-link) and the outgoing interface."""

    ifname: str
    via: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    weight: int = 1


@dataclass(frozen=True, slots=True)
class Route:
    """A static route; several next hops make an equal-cost multipath route."""

    dst: ipaddress.IPv4Network | ipaddress.IPv6Network
    nexthops: tuple[NextHop, ...]


@dataclass(frozen=True, slots=True)
class SourceRoutes:
    """Policy routing of a multi-NIC host: traffic whose source is the address of interface
    ``ifname`` is routed by ``routes`` alone (``ip rule from <address> lookup <table>``,
    testbed/routing/source_routing.py), so it leaves by that interface; ``routes`` holds the
    interface's own subnet on-link and the shortest paths through its gateways only."""

    ifname: str
    routes: tuple[Route, ...]


@dataclass(frozen=True, slots=True)
class NodePlan:
    """An emulated node. ``host``: an end system; ``router``: forwards (ip_forward=1);
    ``switch``: an L2 Linux bridge over its ports.

    sysctls: applied inside the node's namespace (keys as in ``sysctl -a``, for example
    ``net.ipv4.tcp_rmem``; ``net.*`` only, the per-namespace tree, and triples such as
    tcp_rmem in order, :mod:`models.sysctl_keys`);
    tcp_congestion_control: ``net.ipv4.tcp_congestion_control``;
    ecmp_hash: ``net.ipv4.fib_multipath_hash_policy`` 0 (l3) or 1 (l4); stp: switches only;
    rto_min_s: TCP's minimum retransmission timeout as a locked RTAX_RTO_MIN route metric on
    every route of the node (planned and connected; the kernel keeps whole milliseconds), None
    = the kernel's default (200 ms, include/net/tcp.h TCP_RTO_MIN); image: hosts only, a
    container image (docker) whose container holds the node's network namespace, None for a
    plain namespace.
    datapath (switches): ``bridge`` (a Linux bridge) or ``ovs`` (Open vSwitch, forwarding
    computed by aitb: shortest paths, equal-cost ones through select groups, floods along a
    spanning tree; see testbed/ovs/flows.py); flows (ovs switches): extra OpenFlow rules in
    ``ovs-ofctl add-flow`` syntax, added after aitb's own; ovs_datapath (ovs switches):
    ``system`` (the kernel's openvswitch datapath), ``netdev`` (OVS's user-space datapath) or
    ``auto`` (system where the kernel has it, else netdev; see testbed/ovs/datapath.py).
    command, environment, binds (container hosts only): argv replacing the image's CMD (None:
    the image's own), the container's environment, and bind mounts host path ->
    ``"<container path>:ro"`` or ``":rw"``.
    load_balancing (routers and forwarding hosts): ``flow`` (the kernel's multipath hash,
    ecmp_hash), ``packet`` (each packet to the next next hop of a multipath route, round
    robin) or ``flowlet`` (a flow's path re-picked after it was idle ``flowlet_gap_s``
    seconds; None with the other policies); see testbed/routing/load_balance.py.
    source_routes (multi-NIC hosts): per NIC, the routes of traffic from its address
    (:class:`SourceRoutes`); empty for other nodes. ranks_per_host (hosts): the host is a
    server running up to this many ranks, the k-th rank placed on it (in rank order) bound to
    its k-th NIC (source and listen address; :func:`models.paths.rank_addresses`); None: ranks
    share the host's addresses.
    """

    name: str
    kind: NodeKind
    routes: tuple[Route, ...] = ()
    sysctls: Mapping[str, str] = field(default_factory=dict)
    tcp_congestion_control: str | None = None
    ecmp_hash: EcmpHash = "l3"
    stp: bool = False
    group: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    rto_min_s: float | None = None
    image: str | None = None
    datapath: Datapath = "bridge"
    flows: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    binds: Mapping[str, str] = field(default_factory=dict)
    ovs_datapath: OvsDatapath = "auto"
    forward: bool = False
    lo_ipv4: IPv4If | None = None
    lo_ipv6: IPv6If | None = None
    load_balancing: LoadBalancing = "flow"
    flowlet_gap_s: float | None = None
    source_routes: tuple[SourceRoutes, ...] = ()
    ranks_per_host: int | None = None


FRR_PROTOCOLS: tuple[str, ...] = ("bgp", "ospf")


@dataclass(frozen=True, slots=True)
class FrrRouting:
    """``routing: frr``: FRRouting daemons in every router namespace (testbed/routing/frr.py)
    compute
    the routers' routes instead of the plan's static ones (hosts keep theirs).

    protocol: ``bgp`` (eBGP, one private ASN per router, a session per router-to-router
    link) or ``ospf`` (area 0, point-to-point interfaces); peering (bgp): ``numbered``
    (each session configured with the link's IPv4 addresses and the peer's ASN) or
    ``unnumbered`` (configured by interface only, ``neighbor IF interface remote-as
    external``: FRR finds the peer itself, the other address of a /30 or /31, else the IPv6
    link-local one);
    bfd: BFD on every session/adjacency with ``bfd_interval_s`` (transmit and receive
    interval, seconds, whole milliseconds in [0.01, 60]) and ``bfd_multiplier`` (missed
    packets until down); bgp_keepalive_s / bgp_hold_s: BGP timers (whole seconds, hold 0 or
    >= 3 and >= keepalive, RFC 4271 4.2); ospf_hello_s / ospf_dead_s: OSPF timers (whole
    seconds, dead > hello); converge_timeout_s: how long bring-up waits for every router's
    forwarding table to hold a route to every link subnet; settle_s: how long a router's
    table must stay unchanged after an event to count as converged again."""

    protocol: str = "bgp"
    peering: str = "numbered"
    bfd: bool = True
    bfd_interval_s: float = 0.1
    bfd_multiplier: int = 3
    bgp_keepalive_s: int = 3
    bgp_hold_s: int = 9
    ospf_hello_s: int = 1
    ospf_dead_s: int = 4
    converge_timeout_s: float = 60.0
    settle_s: float = 1.0


def frr_problems(r: FrrRouting) -> list[str]:
    """What is wrong with the values of ``r`` (the keys named as in a topology file's
    ``routing:``); empty when sound. Pure."""
    out = []
    if r.protocol not in FRR_PROTOCOLS:
        out.append(f"protocol {_short(r.protocol)} is not one of {', '.join(FRR_PROTOCOLS)}")
    if r.peering not in ("numbered", "unnumbered"):
        out.append(f"peering {_short(r.peering)} is not one of numbered, unnumbered")
    ms = r.bfd_interval_s * 1000
    if not (10 <= ms <= 60000) or abs(ms - round(ms)) > 1e-6:
        out.append(f"bfd_interval {r.bfd_interval_s:g}s must be whole milliseconds in "
                   "[10ms, 60s] (FRR's transmit/receive-interval range)")
    if not 2 <= r.bfd_multiplier <= 255:
        out.append(f"bfd_multiplier {r.bfd_multiplier} must be in [2, 255]")
    if not 1 <= r.bgp_keepalive_s <= 65535:
        out.append(f"bgp_keepalive {r.bgp_keepalive_s}s must be whole seconds in [1s, 65535s]")
    if r.bgp_hold_s != 0 and not (3 <= r.bgp_hold_s <= 65535 and r.bgp_hold_s >= r.bgp_keepalive_s):
        out.append(f"bgp_hold {r.bgp_hold_s}s must be 0 or whole seconds >= 3s and >= "
                   f"bgp_keepalive ({r.bgp_keepalive_s}s) (RFC 4271 section 4.2)")
    if not 1 <= r.ospf_hello_s <= 65535:
        out.append(f"ospf_hello {r.ospf_hello_s}s must be whole seconds in [1s, 65535s]")
    if not r.ospf_hello_s < r.ospf_dead_s <= 65535:
        out.append(f"ospf_dead {r.ospf_dead_s}s must be whole seconds > ospf_hello "
                   f"({r.ospf_hello_s}s)")
    if not r.converge_timeout_s > 0:
        out.append(f"converge_timeout {r.converge_timeout_s:g}s must be > 0")
    if not r.settle_s > 0:
        out.append(f"settle {r.settle_s:g}s must be > 0")
    return out


@dataclass(frozen=True, slots=True)
class LabPlan:
    """Everything the runtime needs to bring a lab up; ``source`` names where it came from;
    ``traces``: the link directions whose shaping follows a trace (testbed/live/trace_player.py);
    ``routing``: None for the plan's static routes everywhere, else the FRRouting daemons that
    route the routers (:class:`FrrRouting`)."""

    name: str
    nodes: tuple[NodePlan, ...]
    links: tuple[LinkPlan, ...]
    source: str = "<generated>"
    traces: tuple[LinkTrace, ...] = ()
    routing: FrrRouting | None = None

    def __post_init__(self) -> None:
        problems = plan_problems(self)
        if problems:
            raise PlanError(problems)

    def node(self, name: str) -> NodePlan:
        """The node called ``name``; raises KeyError naming it if absent."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in lab {self.name!r}")

    def links_of(self, node: str) -> list[LinkPlan]:
        """The links that touch ``node``, in plan order."""
        return [lk for lk in self.links if node in (lk.a.node, lk.b.node)]

    def hosts(self) -> list[NodePlan]:
        """The nodes of kind host, in plan order."""
        return [n for n in self.nodes if n.kind == "host"]

    def address_of(self, node: str) -> ipaddress.IPv4Address | None:
        """The address of ``node`` for traffic, or None: a forwarding host's loopback node
        address, else its first IPv4 address in link order."""
        for n in self.nodes:
            if n.name == node and n.lo_ipv4 is not None:
                return n.lo_ipv4.ip
        for lk in self.links_of(node):
            ep = lk.endpoint(node)
            if ep.ipv4 is not None:
                return ep.ipv4.ip
        return None


class PlanError(ValueError):
    """A lab plan with a name or value no runtime may receive (a shell or iproute2 would read
    it as syntax); ``problems`` lists each, naming node, link or key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = problems[:10] + ([f"... and {len(problems) - 10} more"] if len(problems) > 10
                                 else [])
        super().__init__("; ".join(shown))


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _name_problem(value: object, what: str, regex: re.Pattern[str], limit: int) -> list[str]:
    if not isinstance(value, str) or not regex.fullmatch(value) or len(value) > limit:
        return [f"{what} {_short(value)} is not a valid name (at most {limit} characters of "
                f"{regex.pattern})"]
    return []


def _text_problem(value: object, what: str) -> list[str]:
    if not isinstance(value, str) or _CONTROL_RE.search(value):
        return [f"{what} {_short(value)} must be text without control characters"]
    return []


def _node_problems(n: NodePlan) -> list[str]:
    where = f"node {_short(n.name)}"
    out = _name_problem(n.name, "node name", NAME_RE, MAX_NODE_NAME)
    if n.kind not in NODE_KINDS:
        out.append(f"{where}: kind {_short(n.kind)} is not one of {', '.join(NODE_KINDS)}")
    if n.group is not None:
        out += _name_problem(n.group, f"{where}: group", NAME_RE, MAX_NODE_NAME)
    if n.tcp_congestion_control is not None:
        out += _name_problem(n.tcp_congestion_control, f"{where}: tcp_congestion_control",
                             _CC_RE, 32)
    for key, value in n.sysctls.items():
        named = _name_problem(key, f"{where}: sysctl", _SYSCTL_RE, 128)
        out += named + _text_problem(value, f"{where}: sysctl {_short(key)} value")
        if not named and (why := key_problem(key) or value_problem(key, value)) is not None:
            out.append(f"{where}: {why}")
    if (n.forward or n.lo_ipv4 is not None or n.lo_ipv6 is not None) and n.kind != "host":
        out.append(f"{where}: forward and a loopback node address are for hosts only "
                   f"(a {n.kind} {'forwards anyway' if n.kind == 'router' else 'is L2'})")
    if n.load_balancing not in LOAD_BALANCINGS:
        out.append(f"{where}: load_balancing {_short(n.load_balancing)} is not one of "
                   f"{', '.join(LOAD_BALANCINGS)}")
    elif n.load_balancing != "flow" and n.kind == "switch":
        out.append(f"{where}: load_balancing {n.load_balancing} is for routers and "
                   "forwarding hosts, not a switch")
    if (n.flowlet_gap_s is None) != (n.load_balancing != "flowlet") or (
            n.flowlet_gap_s is not None and not n.flowlet_gap_s > 0):
        out.append(f"{where}: flowlet_gap_s {n.flowlet_gap_s!r} must be a duration > 0 "
                   "exactly when load_balancing is flowlet")
    for r in (*n.routes, *(r for sr in n.source_routes for r in sr.routes)):
        for h in r.nexthops:
            out += _name_problem(h.ifname, f"{where}: route interface", IFNAME_RE, MAX_IFNAME)
    for sr in n.source_routes:
        out += _name_problem(sr.ifname, f"{where}: source-routed interface", IFNAME_RE,
                             MAX_IFNAME)
    if n.source_routes and (n.kind != "host" or n.forward):
        out.append(f"{where}: source routes are for multi-NIC hosts that do not forward")
    if n.ranks_per_host is not None and (n.kind != "host" or n.forward
                                         or not n.ranks_per_host >= 1):
        out.append(f"{where}: ranks_per_host {n.ranks_per_host!r} must be a whole number >= 1 "
                   "on a host that does not forward")
    for text in (*n.flows, *(n.command or ()), *n.environment, *n.environment.values(),
                 *n.binds, *n.binds.values(), *n.labels, *n.labels.values(), n.image or ""):
        out += _text_problem(text, f"{where}: value")
    return out


def _endpoint_problems(ep: Endpoint, link: str) -> list[str]:
    out = _name_problem(ep.ifname, f"link {link}: interface", IFNAME_RE, MAX_IFNAME)
    if ep.ifname == "lo":
        out.append(f"link {link}: interface name 'lo' is the loopback device")
    if ep.mac is not None and not (isinstance(ep.mac, str) and _MAC_RE.fullmatch(ep.mac)):
        out.append(f"link {link}: mac {_short(ep.mac)} is not like 02:00:00:00:00:01")
    return out


def plan_problems(plan: LabPlan) -> list[str]:
    """Every name or value of ``plan`` that must not reach an argv, a shell or iproute2: lab,
    node, group and interface names (:data:`NAME_RE`, :data:`IFNAME_RE`, IFNAMSIZ), link
    names and free text (no control characters), sysctl keys (``net.*`` only) and triple
    values, MAC addresses, endpoints that
    name no node. Empty for a valid plan. Pure."""
    out = _name_problem(plan.name, "lab name", NAME_RE, MAX_NODE_NAME)
    names = set()
    for n in plan.nodes:
        out += _node_problems(n)
        names.add(n.name)
    for lk in plan.links:
        link = _short(lk.name)
        if not isinstance(lk.name, str) or len(lk.name) > MAX_LINK_NAME:
            out.append(f"link name {link} is longer than {MAX_LINK_NAME} characters")
        out += _text_problem(lk.name, "link name")
        if lk.delay_line not in DELAY_LINES:
            out.append(f"link {link}: delay_line {_short(lk.delay_line)} is not one of "
                       f"{', '.join(DELAY_LINES)}")
        for ep in (lk.a, lk.b):
            out += _endpoint_problems(ep, link)
            if ep.node not in names:
                out.append(f"link {link}: endpoint names node {_short(ep.node)}, not in the plan")
    for tr in plan.traces:  # the link may be absent: probes replace links by a subset
        if tr.direction not in ("a_to_b", "b_to_a"):
            out.append(f"trace {_short(tr.file)}: direction {_short(tr.direction)} is not "
                       "a_to_b or b_to_a")
    if plan.routing is not None:
        out += [f"routing: {p}" for p in frr_problems(plan.routing)]
    return out


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, ipaddress._BaseAddress | ipaddress._BaseNetwork):  # noqa: SLF001
        return str(value)
    if isinstance(value, ipaddress.IPv4Interface | ipaddress.IPv6Interface):
        return str(value)
    return value


def plan_to_dict(plan: LabPlan) -> dict[str, Any]:
    """A JSON-ready dict of ``plan`` (addresses as strings); inverse of :func:`plan_from_dict`."""
    return _jsonable(plan)


def _shaping_from(d: Mapping[str, Any]) -> Shaping:
    d = dict(d)
    for key in ("buffer", "ecn_threshold"):
        if d.get(key) is not None:
            d[key] = BufferSize(**d[key])
    if d.get("loss_gemodel") is not None:
        d["loss_gemodel"] = GilbertElliott(**d["loss_gemodel"])
    return Shaping(**d)


def _endpoint_from(d: Mapping[str, Any]) -> Endpoint:
    return Endpoint(node=d["node"], ifname=d["ifname"],
                    ipv4=ipaddress.IPv4Interface(d["ipv4"]) if d.get("ipv4") else None,
                    ipv6=ipaddress.IPv6Interface(d["ipv6"]) if d.get("ipv6") else None,
                    mac=d.get("mac"))


def _route_from(d: Mapping[str, Any]) -> Route:
    hops = tuple(NextHop(ifname=h["ifname"],
                         via=ipaddress.ip_address(h["via"]) if h.get("via") else None,
                         weight=h.get("weight", 1)) for h in d["nexthops"])
    return Route(dst=ipaddress.ip_network(d["dst"]), nexthops=hops)


def plan_from_dict(d: Mapping[str, Any]) -> LabPlan:
    """Rebuild a :class:`LabPlan` from :func:`plan_to_dict` output (for example a run's
    ``plan.json``). Raises KeyError/TypeError/ValueError on a malformed dict, :class:`PlanError`
    (a ValueError) naming every name no runtime may receive (:func:`plan_problems`)."""
    nodes = tuple(
        NodePlan(**{**n, "routes": tuple(_route_from(r) for r in n.get("routes", ())),
                    "source_routes": tuple(
                        SourceRoutes(s["ifname"], tuple(_route_from(r) for r in s["routes"]))
                        for s in n.get("source_routes", ())),
                    "lo_ipv4": ipaddress.IPv4Interface(n["lo_ipv4"]) if n.get("lo_ipv4")
                    else None,
                    "lo_ipv6": ipaddress.IPv6Interface(n["lo_ipv6"]) if n.get("lo_ipv6")
                    else None,
                    "flows": tuple(n.get("flows", ())),
                    "command": tuple(n["command"]) if n.get("command") else None})
        for n in d["nodes"])
    links = tuple(
        LinkPlan(name=lk["name"], a=_endpoint_from(lk["a"]), b=_endpoint_from(lk["b"]),
                 a_to_b=_shaping_from(lk["a_to_b"]), b_to_a=_shaping_from(lk["b_to_a"]),
                 mtu=lk.get("mtu", 1500), delay_line=lk.get("delay_line", "auto"))
        for lk in d["links"])
    traces = tuple(LinkTrace(**{**t, "steps": tuple(TraceStep(**s) for s in t["steps"])})
                   for t in d.get("traces", ()))
    routing = FrrRouting(**d["routing"]) if d.get("routing") else None
    return LabPlan(name=d["name"], nodes=nodes, links=links, source=d.get("source", "<dict>"),
                   traces=traces, routing=routing)
