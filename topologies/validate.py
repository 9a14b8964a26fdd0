"""Checks of a parsed :class:`TopologySpec` that pydantic cannot express: names, references,
endpoints, duplicates. Every check collects :class:`SpecIssue`s (key path set, file and line
filled in later by the loader) instead of stopping at the first problem.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping

from models.errors import SpecIssue
from models.plan import IFNAME_RE, MAX_IFNAME, MAX_NODE_NAME, NAME_RE, flowlet_gap_problem
from models.sysctl_keys import key_problem, value_problem
from models.units import parse_duration_s
from topologies.container_keys import check_container_keys
from topologies.spec import NodeSettings, ProfileSpec, TopologySpec

__all__ = ["NAME_RE", "IFNAME_RE", "split_endpoint", "node_kind", "check_spec"]

SYSCTL_RE = re.compile(r"[a-z0-9_]+(\.[a-z0-9_-]+)+")
_FORWARDING = re.compile(r"net\.ipv4\.ip_forward|net\.ipv[46]\.conf\.[^.]+\.forwarding")
_NAME_RULE = ("lower-case letters, digits, '-' and '_', starting with a letter or digit "
              "(iproute2 rejects '/', spaces, ':' and '@')")


def split_endpoint(text: str) -> tuple[str, str | None]:
    """``"h1:eth1"`` -> ``("h1", "eth1")``; ``"h1"`` -> ``("h1", None)``."""
    node, sep, ifname = text.partition(":")
    return node, (ifname if sep else None)


def node_kind(spec: TopologySpec, name: str) -> str | None:
    """The kind of node ``name``: its own, else its group's; None if neither says."""
    node = spec.nodes[name]
    if node.kind:
        return node.kind
    group = spec.groups.get(node.group) if node.group else None
    return group.kind if group else None


def _name_issue(name: str, what: str, limit: int, path: tuple) -> Iterator[SpecIssue]:
    if not NAME_RE.fullmatch(name):
        yield SpecIssue(f"{what} {name!r} is not a valid name: use {_NAME_RULE}", key_path=path)
    if len(name) > limit:
        yield SpecIssue(f"{what} {name!r} is {len(name)} characters long; at most {limit}",
                        key_path=path)


def _check_nodes(spec: TopologySpec) -> Iterator[SpecIssue]:
    for name, node in spec.nodes.items():
        path = ("nodes", name)
        yield from _name_issue(name, "node name", MAX_NODE_NAME, path)
        group = spec.groups.get(node.group) if node.group else None
        if node.group and group is None:
            yield SpecIssue(f"unknown group {node.group!r}; known groups: "
                            f"{', '.join(spec.groups) or '(none defined)'}",
                            key_path=(*path, "group"))
        if node.kind and group and group.kind and group.kind != node.kind:
            yield SpecIssue(f"node is a {node.kind} but its group {node.group!r} is for "
                            f"{group.kind}s", key_path=(*path, "kind"))
        kind = node_kind(spec, name)
        if kind is None:
            yield SpecIssue("node has no kind; set kind: host, switch or router (here or in "
                            "its group)", key_path=path)
            continue
        yield from _check_settings(node, kind, path)
        if group:
            yield from _check_settings(group, kind, ("groups", node.group))
        if kind == "switch":
            yield from _check_flows([node, group, spec.defaults.switch], path)
        yield from check_container_keys([node, group, getattr(spec.defaults, kind)], kind,
                                        path, [path, ("groups", node.group),
                                               ("defaults", kind)])


def _check_flows(layers: list[NodeSettings | None], path: tuple) -> Iterator[SpecIssue]:
    """Flows, ovs_datapath, ecmp_hash and load_balancing (from any layer) of a switch need the
    datapath it ends up with to be ovs; load_balancing there is flow only."""
    def first(key: str) -> object:
        return next((getattr(x, key) for x in layers
                     if x is not None and getattr(x, key) is not None), None)
    for key in ("flows", "ovs_datapath"):
        if first(key) and first("datapath") != "ovs":
            verb = "need" if key == "flows" else "needs"
            yield SpecIssue(f"{key} {verb} datapath: ovs (here, in the group or in "
                            "defaults.switch)", key_path=(*path, key))
    # equal-cost ports exist on OVS switches only (select groups, testbed/ovs/flows.py); a
    # Linux bridge forwards by MAC learning over one spanning tree
    if first("ecmp_hash") and first("datapath") != "ovs":
        yield SpecIssue("ecmp_hash applies to routers, forwarding hosts and OVS switches "
                        "(datapath: ovs), not to a Linux-bridge switch",
                        key_path=(*path, "ecmp_hash"))
    lb = first("load_balancing")
    if lb and first("datapath") != "ovs":
        yield SpecIssue("load_balancing applies to routers, forwarding hosts and OVS switches "
                        "(datapath: ovs), not to a Linux-bridge switch",
                        key_path=(*path, "load_balancing"))
    elif lb and lb != "flow":
        yield SpecIssue(f"load_balancing {lb} cannot be realised on an OVS switch: its select "
                        "groups pick a port by a hash of each packet's fields (ecmp_hash), so a "
                        "flow keeps one port; OVS has no per-packet or round-robin choice. Use "
                        "flow here, or routers for packet and flowlet",
                        key_path=(*path, "load_balancing"))


def _check_settings(settings: NodeSettings, kind: str, path: tuple) -> Iterator[SpecIssue]:
    if settings.stp is not None and kind != "switch":
        yield SpecIssue(f"stp applies to switches only, not to a {kind}", key_path=(*path, "stp"))
    if settings.image is not None and kind != "host":
        yield SpecIssue(f"image applies to hosts only (container hosts), not to a {kind}",
                        key_path=(*path, "image"))
    for key in ("datapath", "flows", "ovs_datapath"):
        if getattr(settings, key) is not None and kind != "switch":
            yield SpecIssue(f"{key} applies to switches only, not to a {kind}",
                            key_path=(*path, key))
    if settings.forward is not None and kind != "host":
        yield SpecIssue(f"forward applies to hosts only, not to a {kind} (a router always "
                        "forwards, a switch bridges)", key_path=(*path, "forward"))
    if settings.ranks_per_host is not None and kind != "host":
        yield SpecIssue(f"ranks_per_host applies to hosts only, not to a {kind}",
                        key_path=(*path, "ranks_per_host"))
    if settings.ranks_per_host is not None and settings.forward:
        yield SpecIssue("ranks_per_host binds ranks to NICs, and a forwarding host has one "
                        "traffic address (its node address); drop one of forward and "
                        "ranks_per_host", key_path=(*path, "ranks_per_host"))
    for key, value in (settings.sysctls or {}).items():
        where = (*path, "sysctls", key)
        if not SYSCTL_RE.fullmatch(key):
            yield SpecIssue(f"{key!r} is not a sysctl key like 'net.ipv4.tcp_rmem'",
                            key_path=where)
        elif (why := key_problem(key) or value_problem(key, value)) is not None:
            yield SpecIssue(why, key_path=where)
        elif kind == "host" and _FORWARDING.fullmatch(key) and str(value) != "0":
            yield SpecIssue("set forward: true on a host that forwards (it then gets the "
                            "routes and node address it needs), not the sysctl",
                            key_path=where)


def _check_load_balancing(spec: TopologySpec) -> Iterator[SpecIssue]:
    """flowlet needs a flowlet_gap > 0 that nftables can time (from any layer,
    :func:`models.plan.flowlet_gap_problem`); a flowlet_gap needs flowlet."""
    if spec.flowlet_gap is not None:
        yield from _positive(spec.flowlet_gap, ("flowlet_gap",))
    for name, node in spec.nodes.items():
        kind = node_kind(spec, name)
        if kind is None or kind == "switch":
            continue
        group = spec.groups.get(node.group) if node.group else None
        layers = [(node, ("nodes", name)), (group, ("groups", node.group)),
                  (getattr(spec.defaults, kind), ("defaults", kind))]
        layers = [(x, p) for x, p in layers if x is not None]
        lb = next(((x.load_balancing, p) for x, p in layers if x.load_balancing), None)
        fwd = next((x.forward for x, _ in layers if x.forward is not None), False)
        if lb is None and spec.load_balancing and (kind == "router" or fwd):
            lb = (spec.load_balancing, ())
        gap = next(((x.flowlet_gap, p) for x, p in layers if x.flowlet_gap is not None), None)
        if gap is not None:
            yield from _positive(gap[0], (*gap[1], "flowlet_gap"))
        if lb is not None and lb[0] == "flowlet" and gap is None and spec.flowlet_gap is None:
            yield SpecIssue(f"node {name}: load_balancing flowlet needs flowlet_gap (the idle "
                            "time after which a flow may move, e.g. 1s)",
                            key_path=(*lb[1], "load_balancing"))
        elif gap is not None and (lb is None or lb[0] != "flowlet"):
            yield SpecIssue(f"node {name}: flowlet_gap needs load_balancing: flowlet (it is "
                            f"{lb[0] if lb else 'flow'})", key_path=(*gap[1], "flowlet_gap"))


def _positive(value: object, path: tuple) -> Iterator[SpecIssue]:
    gap_s = parse_duration_s(value)
    if gap_s <= 0:
        yield SpecIssue(f"flowlet_gap {value!r} must be a duration > 0", key_path=path)
    elif (why := flowlet_gap_problem(gap_s)) is not None:  # before the lab exists
        yield SpecIssue(why, key_path=path)


def _check_defaults(spec: TopologySpec) -> Iterator[SpecIssue]:
    for kind in ("host", "router", "switch"):
        settings = getattr(spec.defaults, kind)
        if settings is not None:
            yield from _check_settings(settings, kind, ("defaults", kind))
    for name in spec.groups:
        yield from _name_issue(name, "group name", MAX_NODE_NAME, ("groups", name))


def _unknown_profile(name: str, profiles: Mapping[str, ProfileSpec], path: tuple) -> SpecIssue:
    return SpecIssue(f"unknown profile {name!r}; known profiles: {', '.join(sorted(profiles))}",
                     key_path=path)


def _check_endpoint(spec: TopologySpec, text: str, path: tuple) -> Iterator[SpecIssue]:
    node, ifname = split_endpoint(text)
    if node not in spec.nodes:
        yield SpecIssue(f"endpoint {text!r} names node {node!r}, which is not defined under "
                        "nodes", key_path=path)
    if ifname is None:
        return
    if not IFNAME_RE.fullmatch(ifname) or ifname == "lo":
        yield SpecIssue(f"interface name {ifname!r} is not valid: use lower-case letters, "
                        "digits, '-', '_' and '.' (not 'lo')", key_path=path)
    elif ifname == "br0" or ifname.startswith("ifb"):
        yield SpecIssue(f"interface name {ifname!r} is reserved: aitb names a switch's bridge "
                        "'br0' and the delay lines' devices 'ifb...'", key_path=path)
    if len(ifname) > MAX_IFNAME:
        yield SpecIssue(f"interface name {ifname!r} is {len(ifname)} characters long; Linux "
                        f"allows at most {MAX_IFNAME} (IFNAMSIZ)", key_path=path)


def _check_links(spec: TopologySpec, profiles: Mapping[str, ProfileSpec]) -> Iterator[SpecIssue]:
    seen: dict[frozenset, int] = {}
    for i, link in enumerate(spec.links):
        path = ("links", i)
        for j, end in enumerate(link.endpoints):
            yield from _check_endpoint(spec, end, (*path, "endpoints", j))
        a, b = (split_endpoint(e) for e in link.endpoints)
        if a[0] == b[0]:
            yield SpecIssue(f"link connects node {a[0]!r} to itself", key_path=(*path, "endpoints"))
        key = frozenset((a, b))
        if key in seen:
            yield SpecIssue(f"duplicate link: same endpoints as links[{seen[key]}]; for parallel "
                            "links name the interfaces, e.g. ['r1:dci1', 'r2:dci1']",
                            key_path=(*path, "endpoints"))
        seen.setdefault(key, i)
        if link.profile and link.profile not in profiles:
            yield _unknown_profile(link.profile, profiles, (*path, "profile"))
        if link.name is not None:
            yield from _name_issue(link.name, "link name", 64, (*path, "name"))


def _check_explicit_ifnames(spec: TopologySpec) -> Iterator[SpecIssue]:
    used: Counter[tuple[str, str]] = Counter()
    for i, link in enumerate(spec.links):
        for j, end in enumerate(link.endpoints):
            node, ifname = split_endpoint(end)
            if ifname is not None:
                used[(node, ifname)] += 1
                if used[(node, ifname)] == 2:
                    yield SpecIssue(f"interface {ifname!r} of node {node!r} is used by more "
                                    "than one link", key_path=("links", i, "endpoints", j))


def _check_hosts_linked(spec: TopologySpec) -> Iterator[SpecIssue]:
    linked = {split_endpoint(e)[0] for link in spec.links for e in link.endpoints}
    for name in spec.nodes:
        if node_kind(spec, name) == "host" and name not in linked:
            yield SpecIssue("host has no links; connect it or remove it",
                            key_path=("nodes", name))


def check_spec(spec: TopologySpec, profiles: Mapping[str, ProfileSpec]) -> list[SpecIssue]:
    """Every structural problem of ``spec``; ``profiles`` are all profiles known (built-in and
    the file's). Returns the issues found (empty when none); never raises."""
    issues = [*_check_nodes(spec), *_check_defaults(spec), *_check_load_balancing(spec),
              *_check_links(spec, profiles),
              *_check_explicit_ifnames(spec), *_check_hosts_linked(spec)]
    link_default = spec.defaults.link
    if link_default and link_default.profile and link_default.profile not in profiles:
        issues.append(_unknown_profile(link_default.profile, profiles,
                                       ("defaults", "link", "profile")))
    if not spec.nodes:  # at `generator:` where the file gives one (null) and no `nodes:`
        given = getattr(spec, "model_fields_set", set())
        at = ("generator",) if "generator" in given and "nodes" not in given else ("nodes",)
        issues.append(SpecIssue("the topology has no nodes", key_path=at))
    return issues
