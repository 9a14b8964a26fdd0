"""aitb plan -> containerlab topology file + a shell script with the lab's network and shaping.

The topology (``<lab>.clab.yml``) has one containerlab node per aitb node (``kind: linux``
with a chosen image, or the containerlab kind and image an imported node came from) and one
brief link per aitb link with its MTU; every node carries the label ``aitb.kind`` so that the
file imports back to the same graph. containerlab reserves ``eth0`` for its management
network, so on a node that uses ``eth0`` every ``ethN`` becomes ``eth(N+1)``
(:func:`clab_plan`).

The script (``<lab>.aitb.sh``) runs on the containerlab host as root and applies, inside each
node's network namespace (containerlab names it ``clab-<lab>-<node>``): bridges, addresses,
forwarding, sysctls and routes (:func:`network_commands`), then the tc shaping, given as
commands by the caller (the recipe is the runtime's, testbed/tc/recipe.py, which this pure layer
does
not import). Both files are rendered from jinja2 templates in topologies/clab/templates/.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import jinja2

from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan, Route
from topologies.clab.kinds import DATAPATH_LABEL, FORWARD_LABEL
from topologies.clab.kinds import SWITCH_KINDS as HOST_BRIDGE_KINDS

__all__ = ["NodeCommand", "clab_plan", "network_commands", "vendor_nodes", "render_topology",
           "render_script",
           "DEFAULT_IMAGE", "KEEP_KINDS_LABELS"]

DEFAULT_IMAGE = "ghcr.io/srl-labs/network-multitool"  # Alpine with iproute2, iperf3, tcpdump
KEEP_KINDS_LABELS = ("clab.kind", "clab.image")
_ETH_RE = re.compile(r"eth([0-9]+)")


@dataclass(frozen=True, slots=True)
class NodeCommand:
    """A command to run inside node ``node``'s network namespace; ``section`` groups the
    script ("network" or "shaping")."""

    node: str
    argv: tuple[str, ...]
    section: str = "network"


def _shift_eth(name: str) -> str:
    m = _ETH_RE.fullmatch(name)
    return f"eth{int(m.group(1)) + 1}" if m else name


def _renamer(plan: LabPlan) -> Mapping[str, bool]:
    """Nodes whose interfaces are renamed (those with an eth0)."""
    return {n.name: any(lk.endpoint(n.name).ifname == "eth0" for lk in plan.links_of(n.name))
            for n in plan.nodes}


def clab_plan(plan: LabPlan) -> LabPlan:
    """``plan`` with interface names containerlab accepts: on every node that has an
    ``eth0`` (containerlab's management interface), ``ethN`` -> ``eth(N+1)`` for all N, in
    links and routes alike (a bijection, so no two interfaces clash). Pure."""
    shift = _renamer(plan)

    def ep(e: Endpoint) -> Endpoint:
        return replace(e, ifname=_shift_eth(e.ifname)) if shift[e.node] else e

    def node(n: NodePlan) -> NodePlan:
        if not shift[n.name]:
            return n
        routes = tuple(Route(r.dst, tuple(replace(h, ifname=_shift_eth(h.ifname))
                                          for h in r.nexthops)) for r in n.routes)
        return replace(n, routes=routes)

    links = tuple(replace(lk, a=ep(lk.a), b=ep(lk.b)) for lk in plan.links)
    return replace(plan, nodes=tuple(node(n) for n in plan.nodes), links=links)


def _switch_commands(node: NodePlan, ports: Sequence[str]) -> list[tuple[str, ...]]:
    cmds = [("ip", "link", "add", "br0", "type", "bridge",
             "stp_state", "1" if node.stp else "0")]
    cmds += [("ip", "link", "set", p, "master", "br0") for p in ports]
    return cmds + [("ip", "link", "set", "br0", "up")]


def _route_argv(route: Route) -> tuple[str, ...]:
    family = ("-6",) if route.dst.version == 6 else ()
    head = ("ip", *family, "route", "add", str(route.dst))
    if len(route.nexthops) == 1:
        h = route.nexthops[0]
        return head + (("via", str(h.via)) if h.via else ()) + ("dev", h.ifname)
    hops: tuple[str, ...] = ()
    for h in route.nexthops:
        hops += ("nexthop", *(("via", str(h.via)) if h.via else ()), "dev", h.ifname,
                 "weight", str(h.weight))
    return head + hops


def _sysctls(node: NodePlan, v6: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    if node.kind == "router" or node.forward:
        out["net.ipv4.ip_forward"] = "1"
        if v6:
            out["net.ipv6.conf.all.forwarding"] = "1"
        out["net.ipv4.fib_multipath_hash_policy"] = "1" if node.ecmp_hash == "l4" else "0"
    if node.tcp_congestion_control:
        out["net.ipv4.tcp_congestion_control"] = node.tcp_congestion_control
    return {**out, **node.sysctls}


def _node_commands(plan: LabPlan, node: NodePlan) -> list[tuple[str, ...]]:
    ends = [lk.endpoint(node.name) for lk in plan.links_of(node.name)]
    cmds = [("ip", "link", "set", e.ifname, "up") for e in ends]
    if node.kind == "switch":
        return cmds + _switch_commands(node, [e.ifname for e in ends])
    for e in ends:
        cmds += [("ip", "addr", "add", str(a), "dev", e.ifname) for a in (e.ipv4, e.ipv6) if a]
    cmds += [("ip", "addr", "add", str(a), "dev", "lo") for a in (node.lo_ipv4, node.lo_ipv6)
             if a]  # a forwarding host's node address
    v6 = any(e.ipv6 for e in ends)
    cmds += [("sysctl", "-qw", f"{k}={v}") for k, v in _sysctls(node, v6).items()]
    return cmds + [_route_argv(r) for r in node.routes]


def vendor_nodes(plan: LabPlan, keep_kinds: bool) -> set[str]:
    """Nodes exported with their containerlab kind (a network OS that configures itself from
    its startup config): with ``keep_kinds``, imported nodes whose ``clab.kind`` is neither
    ``linux`` nor a host bridge (``bridge``/``ovs-bridge`` live in the host's namespace, which
    aitb never touches: they stay Linux containers with a bridge inside)."""
    if not keep_kinds:
        return set()
    return {n.name for n in plan.nodes
            if n.labels.get("clab.kind") not in (None, "", "linux", *HOST_BRIDGE_KINDS)}


def network_commands(plan: LabPlan, wire_packets: bool = False,
                     skip: Collection[str] = ()) -> list[NodeCommand]:
    """Bridges, addresses, sysctls (forwarding, ECMP hash, congestion control) and routes of
    every node of ``plan`` but those in ``skip`` (see :func:`vendor_nodes`), as
    ``ip``/``sysctl`` commands to run inside the nodes, in order. wire_packets: also set
    ``gso_max_segs 1`` on every link end (aitb does so when a direction counts packets; see
    testbed.lab.layout.needs_wire_packets). Pure."""
    out = []
    for node in (n for n in plan.nodes if n.name not in skip):
        if wire_packets:
            out += [NodeCommand(node.name, ("ip", "link", "set", "dev", lk.endpoint(
                node.name).ifname, "gso_max_segs", "1")) for lk in plan.links_of(node.name)]
        out += [NodeCommand(node.name, argv) for argv in _node_commands(plan, node)]
    return out


class _Escaped(str):
    """Template output already escaped for its target language (a filter's result)."""

    __slots__ = ()


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _printable(text: str) -> str:
    """``text`` with every control character (newline included) as a ``\\xNN`` escape, so
    that it stays on its line (a comment of the script or of the YAML file)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _sh(value: object) -> _Escaped:
    return _Escaped(shlex.quote(_printable(str(value))))


def _yq(value: object) -> _Escaped:
    return _Escaped(json.dumps(value))  # a JSON string is a valid YAML double-quoted scalar


def _env(target: str) -> jinja2.Environment:
    """The jinja2 environment of the ``sh`` or ``yaml`` templates. Every ``{{ value }}`` goes
    through ``finalize``: a value a filter escaped stays as it is, any other is escaped for
    the target (shell word or YAML double-quoted scalar), so no template can put a user's
    string into the output unquoted (the autoescape of a non-HTML language)."""
    default = _sh if target == "sh" else _yq
    env = jinja2.Environment(loader=jinja2.PackageLoader("topologies.clab", "templates"),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False,
                             finalize=lambda v: v if isinstance(v, _Escaped) else default(v))
    env.filters["yq"] = _yq
    env.filters["sh"] = _sh
    env.filters["shargv"] = lambda argv: _Escaped(" ".join(_sh(a) for a in argv))
    return env


def _clab_node(node: NodePlan, image: str, keep_kinds: bool, vendor: bool) -> dict[str, Any]:
    labels = {k: v for k, v in node.labels.items() if v != ""}
    kind, img = "linux", node.image or image
    if vendor:
        kind, img = labels["clab.kind"], labels.get("clab.image", image)
    elif keep_kinds and labels.get("clab.image") and labels.get("clab.kind") == "linux":
        img = labels["clab.image"]
    labels["aitb.kind"] = node.kind
    if node.datapath != "bridge":  # OVS: forwarding without STP, see testbed/ovs/switches.py
        labels[DATAPATH_LABEL] = node.datapath
    if node.forward:  # a forwarding host (ip_forward and its node address: the script)
        labels[FORWARD_LABEL] = "true"
    return {"name": node.name, "kind": kind, "image": img, "group": node.group,
            "labels": labels}


def _clab_link(link: LinkPlan) -> dict[str, Any]:
    return {"a": f"{link.a.node}:{link.a.ifname}", "b": f"{link.b.node}:{link.b.ifname}",
            "mtu": link.mtu, "name": link.name}


def render_topology(plan: LabPlan, image: str = DEFAULT_IMAGE, keep_kinds: bool = False,
                    script_name: str = "") -> str:
    """The containerlab topology of ``plan`` (already passed through :func:`clab_plan`) as
    YAML text. image: container image of every node; keep_kinds: nodes imported from
    containerlab get their original kind and image back (labels ``clab.kind``,
    ``clab.image``; host bridges excepted, see :func:`vendor_nodes`). Pure."""
    vendor = vendor_nodes(plan, keep_kinds)
    return _env("yaml").get_template("topology.clab.yml.j2").render(
        name=plan.name, source=plan.source, script=script_name,
        nodes=[_clab_node(n, image, keep_kinds, n.name in vendor)
               for n in plan.nodes],
        links=[_clab_link(lk) for lk in plan.links])


def render_script(plan: LabPlan, commands: Sequence[NodeCommand], topology_name: str = "") -> str:
    """The shell script that runs ``commands`` (network, then shaping) inside containerlab's
    nodes of ``plan`` through ``ip netns exec``. Pure."""
    sections = [{"title": title, "commands": [c for c in commands if c.section == key]}
                for key, title in (("network", "bridges, addresses, sysctls, routes"),
                                   ("shaping", "link shaping (tc), aitb's recipe"))]
    return _env("sh").get_template("shaping.sh.j2").render(
        name=plan.name, source=plan.source, topology=topology_name, sections=sections)
