"""containerlab links, brief and extended forms -> point-to-point links between lab nodes.

Forms (containerlab links/link.go, link_brief.go @ 39ff2b7):

* brief: ``endpoints: ["a:e1-1", "b:eth1"]``; an end on the special node ``host``,
  ``mgmt-net`` or ``macvlan`` makes it a host, management-network or macvlan link;
* extended: ``type: veth`` with ``endpoints: [{node, interface, mac}, ...]``;
  ``type: host | mgmt-net | macvlan`` with one ``endpoint`` and a ``host-interface``;
  ``type: vxlan | vxlan-stitch`` with one ``endpoint`` and a ``remote``;
  ``type: dummy`` with one ``endpoint`` (an interface with no peer).

veth links become aitb links. Links that leave the lab (host, mgmt-net, macvlan, vxlan) are
refused (lab traffic never reaches the host's interfaces), or dropped with a warning when the
caller allows it; dummy interfaces carry no traffic and are dropped with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from models.errors import SpecIssue

__all__ = ["ClabLink", "LinkScan", "scan_links", "EXTERNAL_TYPES", "CLAB_DEFAULT_MTU"]

CLAB_DEFAULT_MTU = 9500  # containerlab's DefaultLinkMTU (constants/containerlab.go)
EXTERNAL_TYPES: Mapping[str, str] = {
    "host": "connects the node to an interface in the host's own network namespace",
    "mgmt-net": "connects the node to containerlab's management network on the host",
    "macvlan": "attaches the node to a real interface of the host (macvlan)",
    "vxlan": "tunnels to a remote machine (VXLAN)",
    "vxlan-stitch": "tunnels to a remote machine (VXLAN stitched to a veth)",
    "veth-stitch": "stitches a veth to a host-side interface",
}
BRIEF_SPECIALS = ("host", "mgmt-net", "macvlan")
IGNORED_LINK_KEYS = ("labels", "vars", "ipv4", "ipv6")
IGNORED_END_KEYS = ("mac", "ipv4", "ipv6", "vars")


@dataclass(frozen=True, slots=True)
class ClabLink:
    """A veth link of the file: ``index`` in ``topology.links``, ends (node, interface)."""

    index: int
    a: tuple[str, str]
    b: tuple[str, str]
    mtu: int


@dataclass
class LinkScan:
    """Result of :func:`scan_links`: the veth links, warnings (dropped links), problems that
    refuse the import, and the ignored keys seen (addresses, MACs, vars) with a count."""

    links: list[ClabLink] = field(default_factory=list)
    warnings: list[SpecIssue] = field(default_factory=list)
    issues: list[SpecIssue] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)


def _path(i: int, *rest: str | int) -> tuple[str | int, ...]:
    return ("topology", "links", i, *rest)


def _brief_end(text: Any, path: tuple) -> tuple[str, str] | SpecIssue:
    if not isinstance(text, str) or text.count(":") < 1:
        return SpecIssue(f"endpoint {text!r} is not 'node:interface'", key_path=path)
    node, _, ifname = text.partition(":")
    if not node or not ifname:
        return SpecIssue(f"endpoint {text!r} is not 'node:interface'", key_path=path)
    return node, ifname


def _mapping_end(end: Any, path: tuple, scan: LinkScan) -> tuple[str, str] | SpecIssue:
    if not isinstance(end, Mapping) or not end.get("node") or not end.get("interface"):
        return SpecIssue("endpoint must be a mapping with 'node' and 'interface'", key_path=path)
    for key in IGNORED_END_KEYS:
        if key in end:
            scan.ignored[f"endpoint {key}"] = scan.ignored.get(f"endpoint {key}", 0) + 1
    return str(end["node"]), str(end["interface"])


class _Scanner:
    def __init__(self, nodes: Sequence[str], allow_external: bool) -> None:
        self.nodes = set(nodes)
        self.allow_external = allow_external
        self.scan = LinkScan()

    def external(self, i: int, kind: str, where: str) -> None:
        reason = f"a {kind} link {EXTERNAL_TYPES[kind]} ({where})"
        if self.allow_external:
            self.scan.warnings.append(SpecIssue(f"dropped: {reason}", key_path=_path(i)))
        else:
            self.scan.issues.append(SpecIssue(
                f"cannot be mapped: {reason}; aitb keeps lab traffic inside the lab (pass "
                "--drop-external to import without such links)", key_path=_path(i)))

    def veth(self, i: int, ends: list[tuple[str, str] | SpecIssue], mtu: Any) -> None:
        good = [e for e in ends if not isinstance(e, SpecIssue)]
        self.scan.issues += [e for e in ends if isinstance(e, SpecIssue)]
        for j, (node, _) in enumerate(good):
            if node not in self.nodes:
                self.scan.issues.append(SpecIssue(
                    f"endpoint names node {node!r}, which is not defined under topology.nodes",
                    key_path=_path(i, "endpoints", j)))
        if len(good) != 2 or any(n not in self.nodes for n, _ in good):
            return
        if mtu is not None and (not isinstance(mtu, int) or isinstance(mtu, bool)):
            self.scan.issues.append(SpecIssue(f"mtu {mtu!r} is not an integer",
                                              key_path=_path(i, "mtu")))
            return
        self.scan.links.append(ClabLink(i, good[0], good[1],
                                        CLAB_DEFAULT_MTU if mtu is None else mtu))

    def brief(self, i: int, link: Mapping[str, Any]) -> None:
        ends = link.get("endpoints")
        if not isinstance(ends, list) or len(ends) != 2:
            self.scan.issues.append(SpecIssue("a link needs exactly 2 endpoints",
                                              key_path=_path(i, "endpoints")))
            return
        parsed = [_brief_end(e, _path(i, "endpoints", j)) for j, e in enumerate(ends)]
        for end in parsed:
            if not isinstance(end, SpecIssue) and end[0] in BRIEF_SPECIALS:
                self.external(i, end[0], f"endpoint '{end[0]}:{end[1]}'")
                return
        self.veth(i, parsed, link.get("mtu"))

    def extended(self, i: int, link: Mapping[str, Any], kind: str) -> None:
        if kind == "veth":
            ends = link.get("endpoints")
            if not isinstance(ends, list) or len(ends) != 2:
                self.scan.issues.append(SpecIssue("a veth link needs exactly 2 endpoints",
                                                  key_path=_path(i, "endpoints")))
                return
            self.veth(i, [_mapping_end(e, _path(i, "endpoints", j), self.scan)
                          for j, e in enumerate(ends)], link.get("mtu"))
            return
        if kind != "dummy" and kind not in EXTERNAL_TYPES:
            self.scan.issues.append(SpecIssue(
                f"unknown link type {kind!r}; containerlab's types: veth, dummy, "
                f"{', '.join(EXTERNAL_TYPES)}", key_path=_path(i, "type")))
            return
        end = _mapping_end(link.get("endpoint"), _path(i, "endpoint"), self.scan)
        if isinstance(end, SpecIssue):
            self.scan.issues.append(end)
        elif kind == "dummy":
            self.scan.warnings.append(SpecIssue(
                f"dropped: dummy interface {end[1]!r} of node {end[0]!r} has no peer and "
                "carries no traffic", key_path=_path(i)))
        else:
            self.external(i, kind, f"node {end[0]!r} interface {end[1]!r}")

    def link(self, i: int, link: Any) -> None:
        if not isinstance(link, Mapping):
            self.scan.issues.append(SpecIssue("a link must be a mapping", key_path=_path(i)))
            return
        for key in IGNORED_LINK_KEYS:
            if key in link:
                self.scan.ignored[f"link {key}"] = self.scan.ignored.get(f"link {key}", 0) + 1
        kind = link.get("type")
        if kind is None:
            self.brief(i, link)
        else:
            self.extended(i, link, str(kind).strip().lower())


def scan_links(links: Any, nodes: Sequence[str], allow_external: bool = False) -> LinkScan:
    """Read ``topology.links`` of a containerlab file.

    Args: links: the list as read from YAML (None for none); nodes: the names defined under
    ``topology.nodes``; allow_external: drop links that leave the lab with a warning instead
    of refusing them. Returns a :class:`LinkScan` whose issues name the key path
    (``topology.links[i]...``), the link type, node and interface. Pure; never raises.
    """
    scanner = _Scanner(nodes, allow_external)
    if links is None:
        return scanner.scan
    if not isinstance(links, list):
        scanner.scan.issues.append(SpecIssue("topology.links must be a list",
                                             key_path=("topology", "links")))
        return scanner.scan
    for i, link in enumerate(links):
        scanner.link(i, link)
    return scanner.scan
