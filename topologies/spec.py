"""The topology file format as pydantic v2 models (the raw, unresolved spec).

A topology file (YAML) or a generator produces a :class:`TopologySpec`; ``topologies.resolve``
turns it into an addressed, routed, shaped :class:`models.plan.LabPlan`. Every model
forbids unknown keys, so a misspelt key is an error, not a silently ignored setting.

Unit strings ("10Gbit", "5ms", "0.1%", "100p") stay strings here; they are checked on input by
the parsers of :mod:`models.units` (the only place that reads units) and converted to
numbers when the spec is resolved (:mod:`topologies.shaping`).
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from models.errors import short_repr
from models.plan import DelayLine
from models.shaping import AQMS, JITTER_DISTRIBUTIONS
from models.unit_fields import SpecModel, described_unit, error_at
from models.units import (
    parse_buffer,
    parse_duration_s,
    parse_pct,
    parse_rate_bps,
)

__all__ = [
    "DEFAULT_IPV4_POOL", "DEFAULT_IPV6_POOL", "NAME_PATTERN",
    "ShapingSpec", "TraceSpec", "GilbertElliottSpec", "ProfileSpec", "LinkSpec", "LinkDefaults",
    "NodeSettings", "NodeSpec", "GroupSpec", "Defaults", "AddressingSpec", "GeneratorRef",
    "FrrSpec", "TopologySpec",
]

DEFAULT_IPV4_POOL = "198.18.0.0/15"  # RFC 2544 benchmarking range
DEFAULT_IPV6_POOL = "2001:2::/48"  # RFC 5180 benchmarking range
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
LAB_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]*$"


_unit = described_unit


Rate = _unit(parse_rate_bps, "Line rate, decimal bits per second (tc spelling).", "10Gbit")
Duration = _unit(parse_duration_s, "A duration with a unit (s, ms, us, ns).", "5ms")
Pct = _unit(parse_pct, "A percentage in [0%, 100%].", "0.1%")
Buffer = _unit(parse_buffer, "Queue limit: packets ('100p') or bytes ('256KiB').", "100p")
EcnThreshold = _unit(parse_buffer, "With ecn: true on a fifo buffer: DCTCP's marking threshold "
                     "K, packets ('20p') or bytes ('30KB'). An ECN-capable packet that finds "
                     "more than this queued when it arrives is marked CE.", "30KB")

JitterDist = Literal[JITTER_DISTRIBUTIONS]  # type: ignore[valid-type]
AqmName = Literal[AQMS]  # type: ignore[valid-type]
Kind = Literal["host", "switch", "router"]
LoadBalancingName = Literal["flow", "packet", "flowlet"]  # models.plan.LOAD_BALANCINGS


def _sysctl_value(value: object) -> object:
    """Numbers become strings (sysctl values are written as text); anything else is kept
    for the string check. A float that is not finite (``.inf``, ``.nan``) has no sysctl
    spelling and is refused here, not at deploy."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"a sysctl value must be a finite number or text; got {value}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # as models.plan refuses in any runtime value

SysctlValue = Annotated[str, BeforeValidator(_sysctl_value),
                        WithJsonSchema({"type": ["string", "integer", "number"]})]


class _Strict(SpecModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GilbertElliottSpec(_Strict):
    """Gilbert-Elliott burst loss (netem ``loss gemodel p r 1-h 1-k``), all percent strings."""

    p: _unit(parse_pct, "P(good -> bad), percent.", "1%", required=True)  # type: ignore[valid-type]
    r: Pct = Field(default=None, description="P(bad -> good), percent; default 100%.")
    bad_loss: Pct = Field(default=None, description="Loss in the bad state (1-h); default 100%.")
    good_loss: Pct = Field(default=None, description="Loss in the good state (1-k); default 0%.")


class TraceSpec(_Strict):
    """The direction follows a trace file (formats: :mod:`models.trace`), read at load time."""

    file: str = Field(min_length=1, description="Trace file; relative to the topology file.")
    format: Literal["aitb", "mahimahi"] = Field(
        default="aitb", description="aitb rows (t, rate, delay, loss with units) or mahimahi's "
        "packet-delivery trace (mm-link(1)).")
    loop: bool = Field(default=False, description="Start again after the trace's end (else "
                       "the last step's values stay).")
    window: Duration = Field(default=None, description="mahimahi only: one rate step per "
                             "window (default 100ms, at least 10ms).")


class ShapingSpec(_Strict):
    """What one direction of a link does, as written in a file (every key optional)."""

    rate: Rate
    delay: Duration
    jitter: Duration
    jitter_distribution: JitterDist | None = None
    jitter_reorder: bool | None = Field(
        default=None, description="true: jitter may reorder packets (each leaves at its own "
        "arrival + drawn delay, netem's behaviour without a rate); default false: jitter keeps "
        "the direction's FIFO order, a packet leaves no earlier than the one before it.")
    delay_correlation: Pct
    loss: Pct
    loss_gemodel: GilbertElliottSpec | None = None
    reorder: Pct
    duplicate: Pct
    corrupt: Pct
    buffer: Buffer
    aqm: AqmName | None = None
    ecn: bool | None = None
    ecn_threshold: EcnThreshold
    trace: TraceSpec | None = Field(default=None, description="Time-varying values from a "
                                    "trace file, over the values above.")


class ProfileSpec(ShapingSpec):
    """A named shaping profile: symmetric keys, and ``up`` (a->b) / ``down`` (b->a) overrides."""

    description: str | None = None
    up: ShapingSpec | None = Field(default=None, description="What endpoint a sends to b.")
    down: ShapingSpec | None = Field(default=None, description="What endpoint b sends to a.")


_Mtu = Annotated[int, Field(ge=68, le=65535, description="Link MTU in bytes.")]
_Cost = Annotated[int, Field(ge=1, le=65535, description="Routing cost (default 1).")]
_DelayLine = DelayLine  # models.plan: the one list of delay-line names


class LinkDefaults(ShapingSpec):
    """``defaults.link``: applied to every link below its own settings and its profile's."""

    profile: str | None = None
    mtu: _Mtu | None = None
    cost: _Cost | None = None


class LinkSpec(ShapingSpec):
    """A link between two nodes: ``endpoints: [a, b]`` or ``["a:ifname", "b:ifname"]``.

    Shaping precedence for each direction, most specific first: ``a_to_b``/``b_to_a`` on the
    link, the link's own keys, the profile's ``up``/``down``, the profile's keys, then
    ``defaults.link`` (its profile below its own keys).
    """

    endpoints: tuple[str, str] = Field(description="The two ends: 'node' or 'node:ifname'.")
    name: str | None = Field(default=None, description="Link name; default 'a-b'.")
    profile: str | None = None
    a_to_b: ShapingSpec | None = None
    b_to_a: ShapingSpec | None = None
    mtu: _Mtu | None = None
    cost: _Cost | None = None
    delay_line: _DelayLine | None = Field(
        default=None, description="This link's delay line (overrides the top-level key).")


class NodeSettings(_Strict):
    """Settings a node takes from itself, else its group, else ``defaults.<kind>``."""

    tcp_congestion_control: str | None = Field(
        default=None, pattern=r"^[a-z0-9_]+$", examples=["cubic", "bbr"],
        description="net.ipv4.tcp_congestion_control inside the node (hosts and routers).")
    sysctls: dict[str, SysctlValue] | None = Field(
        default=None, description="sysctl key -> value inside the node; merged key by key. "
        "net.* keys only (the tree that is per network namespace), and only those a fresh "
        "namespace on this kernel has and may write (checked before the lab exists).")
    ecmp_hash: Literal["l3", "l4"] | None = Field(
        default=None, description="Routers: multipath hash over addresses (l3) or ports (l4).")
    stp: bool | None = Field(default=None, description="Switches: run STP on the bridge.")
    load_balancing: LoadBalancingName | None = Field(
        default=None, description="Routers and forwarding hosts: how traffic is spread over "
        "the next hops of a multipath route: flow (the kernel's hash, ecmp_hash; default), "
        "packet (spraying, each packet to the next next hop) or flowlet (a flow's path "
        "re-picked after it was idle flowlet_gap).")
    flowlet_gap: Duration = Field(
        default=None, description="With load_balancing: flowlet, the idle time after which a "
        "flow may take another path.")
    forward: bool | None = Field(
        default=None, description="Hosts: forward packets and route for others (the nodes "
        "of a direct-connect fabric such as a torus of hosts); the host gets a node address "
        "on its loopback, its traffic address, reachable over each of its links.")
    ranks_per_host: int | None = Field(
        default=None, ge=1, le=64, description="Hosts: a server running up to this many "
        "ranks, the k-th rank placed on it (in rank order) bound to its k-th NIC (its k-th "
        "link): that NIC's address is the rank's source and listen address, and the host "
        "routes traffic from each NIC's address out of that NIC (per-source tables).")
    datapath: Literal["bridge", "ovs"] | None = Field(
        default=None, description="Switches: Linux bridge (default) or Open vSwitch (aitb "
        "computes its flows: shortest paths, ECMP through select groups).")
    ovs_datapath: Literal["auto", "system", "netdev"] | None = Field(
        default=None, description="OVS switches: the kernel's openvswitch datapath (system), "
        "OVS's user-space one (netdev), or system where the kernel has it, else netdev (auto, "
        "the default).")
    flows: list[str] | None = Field(
        default=None, description="OVS switches: extra OpenFlow rules (ovs-ofctl add-flow "
        "syntax), added after aitb's own.", examples=[["priority=200,udp,actions=drop"]])
    labels: dict[str, str] | None = None
    image: str | None = Field(
        default=None, min_length=1, examples=["aitb-busybox:1"],
        description="Hosts: run the node as a container of this (local) docker image; its "
                    "network namespace gets the node's links, shaping and capture.")
    command: list[str] | None = Field(
        default=None, min_length=1, examples=[["python3", "/app/serve.py"]],
        description="Container hosts: argv replacing the image's CMD; it must keep running "
                    "for the lab's lifetime.")
    environment: dict[str, SysctlValue] | None = Field(
        default=None, description="Container hosts: environment variables of the container; "
                                  "merged key by key over group and defaults.")
    binds: dict[str, str] | None = Field(
        default=None, examples=[{"/srv/data": "/data", "/srv/out": "/out:rw"}],
        description="Container hosts: absolute host path -> container path, read-only unless "
                    "the container path ends in ':rw'; the host path must exist.")

    @model_validator(mode="after")
    def _no_control_characters(self) -> NodeSettings:
        # these values reach a runtime (docker, ovs-ofctl, sysctl) as text: a NUL or other
        # control character is refused here, at its key and line, not later at the plan
        for name in ("sysctls", "flows", "labels", "image", "command", "environment", "binds"):
            value = getattr(self, name)
            items = (value.items() if isinstance(value, dict) else enumerate(value)
                     if isinstance(value, list) else [((), value)] if value else [])
            for key, text in items:
                where = (name,) if key == () else (name, key)
                for part in (key, text) if isinstance(key, str) else (text,):
                    if isinstance(part, str) and _CONTROL.search(part):
                        raise error_at(where, f"{short_repr(part)} must be text without "
                                       "control characters")
        return self


class NodeSpec(NodeSettings):
    """A node; ``kind`` may come from its group."""

    kind: Kind | None = None
    group: str | None = None


class GroupSpec(NodeSettings):
    """A named group of nodes sharing settings (and optionally their kind)."""

    kind: Kind | None = None


class Defaults(_Strict):
    """Defaults per link and per node kind."""

    link: LinkDefaults | None = None
    host: NodeSettings | None = None
    router: NodeSettings | None = None
    switch: NodeSettings | None = None


class AddressingSpec(_Strict):
    """Where addresses come from."""

    ipv4_pool: ipaddress.IPv4Network = Field(
        default=ipaddress.IPv4Network(DEFAULT_IPV4_POOL),
        description="Pool for every subnet, inside RFC 2544's 198.18.0.0/15 (the default).")
    ipv6: bool = Field(default=False, description="Also give every interface an IPv6 address.")
    ipv6_pool: ipaddress.IPv6Network = Field(
        default=ipaddress.IPv6Network(DEFAULT_IPV6_POOL),
        description="IPv6 pool inside 2001:2::/48 (RFC 5180); a /64 per segment.")

    @field_validator("ipv4_pool", "ipv6_pool")
    @classmethod
    def _inside_benchmark_range(cls, net: ipaddress.IPv4Network | ipaddress.IPv6Network
                                ) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        allowed = ipaddress.ip_network(DEFAULT_IPV4_POOL if net.version == 4
                                       else DEFAULT_IPV6_POOL)
        if not net.subnet_of(allowed):  # type: ignore[arg-type]
            raise ValueError(f"{net} is outside {allowed}: lab addresses come from the "
                             "benchmarking range so they never clash with real networks")
        return net


class GeneratorRef(_Strict):
    """Build nodes and links with a registered generator instead of listing them."""

    name: str = Field(description="A generator name, e.g. multi_dc_leaf_spine.")
    params: dict[str, Any] = Field(default_factory=dict, description="Its keyword arguments.")


class FrrSpec(_Strict):
    """``routing: {kind: frr, ...}``: FRRouting daemons route the routers (``routing: frr``
    is this with every default); hosts keep static routes to their routers."""

    kind: Literal["frr"] = Field(description="The routing daemons: frr (FRRouting).")
    protocol: Literal["bgp", "ospf"] = Field(
        default="bgp", description="bgp: eBGP, one private ASN per router, a numbered session "
        "per router-to-router link, multipath on; ospf: OSPFv2 area 0 over point-to-point "
        "interfaces.")
    peering: Literal["numbered", "unnumbered"] = Field(
        default="numbered", description="bgp: each session configured with the link's IPv4 "
        "addresses and the peer's ASN (numbered), or by interface only (unnumbered: FRR finds "
        "the peer, the other end of a /31, else its IPv6 link-local address).")
    bfd: bool = Field(default=True, description="BFD on every BGP session / OSPF adjacency.")
    bfd_interval: Duration = Field(default=None, description="BFD transmit and receive "
                                   "interval, whole ms in [10ms, 60s]; default 100ms.")
    bfd_multiplier: int | None = Field(default=None, description="BFD detect multiplier "
                                       "(packets missed until down), [2, 255]; default 3.")
    bgp_keepalive: Duration = Field(default=None, description="BGP keepalive, whole seconds; "
                                    "default 3s.")
    bgp_hold: Duration = Field(default=None, description="BGP hold time, whole seconds, 0 or "
                               ">= 3s and >= keepalive; default 9s.")
    ospf_hello: Duration = Field(default=None, description="OSPF hello interval, whole "
                                 "seconds; default 1s.")
    ospf_dead: Duration = Field(default=None, description="OSPF dead interval, whole seconds "
                                "> hello; default 4s.")
    converge_timeout: Duration = Field(default=None, description="Longest wait at bring-up "
                                       "for every router to have a route to every link "
                                       "subnet; default 60s.")
    settle: Duration = Field(default=None, description="After a link event, a router counts "
                             "as converged once its forwarding table stayed unchanged this "
                             "long; default 1s.")


def _routing_word(value: object) -> object:
    """``routing: frr`` is ``{kind: frr}``; ``routing: static`` is no routing daemon."""
    if value == "frr":
        return {"kind": "frr"}
    if value == "static":
        return None
    if isinstance(value, str):
        raise ValueError(f"routing {value!r} is not static, frr or a mapping with kind: frr")
    return value


RoutingValue = Annotated[FrrSpec | None, BeforeValidator(_routing_word)]


class TopologySpec(_Strict):
    """A whole topology file."""

    name: str = Field(pattern=LAB_NAME_PATTERN, max_length=32, description="Lab name.")
    description: str | None = None
    addressing: AddressingSpec = Field(default_factory=AddressingSpec)
    profiles: dict[str, ProfileSpec] = Field(default_factory=dict)
    defaults: Defaults = Field(default_factory=Defaults)
    groups: dict[str, GroupSpec] = Field(default_factory=dict)
    nodes: dict[str, NodeSpec] = Field(default_factory=dict)
    links: list[LinkSpec] = Field(default_factory=list)
    generator: GeneratorRef | None = None
    delay_line: _DelayLine | None = Field(
        default=None, description="What holds the links' delay and impairments: netem (the "
        "kernel's qdisc), native (aitb's NFQUEUE helper, for kernels without netem) or auto "
        "(default: netem where the kernel has it, else native); a link's own key overrides it.")
    load_balancing: LoadBalancingName | None = Field(
        default=None, description="Default load_balancing of every router and forwarding "
        "host (below defaults.<kind>, groups and nodes): flow, packet or flowlet.")
    flowlet_gap: Duration = Field(
        default=None, description="Default flowlet_gap of the nodes with load_balancing: "
        "flowlet.")
    routing: RoutingValue = Field(
        default=None, description="How routers get their routes: static (default: the plan's "
        "shortest-path routes, installed once) or frr (FRRouting daemons in every router "
        "namespace: `frr` or a mapping with kind: frr and protocol, bfd, timers).",
        examples=["frr", {"kind": "frr", "protocol": "ospf", "bfd": False}])
    backend: Literal["native", "mininet"] | None = Field(
        default=None, description="Runtime that realises the lab: native (aitb's own "
        "namespaces) or mininet (Mininet's nodes, aitb's shaping); `--backend` overrides it.")
    cluster: dict[str, Any] | None = Field(
        default=None, description="The machines the lab spans, over SSH and VXLAN "
        "(machines: name, ssh, user, key, site, underlay; underlay_mtu; place; deploy). "
        "Checked where the lab is brought up (orchestration/cluster/spec.py); an "
        "experiment's own cluster: section replaces it.")
