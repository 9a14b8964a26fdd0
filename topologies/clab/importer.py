"""containerlab topology file -> aitb topology (a mapping ready to write as YAML).

parse (ruamel, line numbers) -> check shape -> node settings by containerlab's precedence ->
kinds mapped to host/router/switch -> links (brief and extended forms) -> aitb names ->
the aitb topology, checked by aitb's own loader and resolver before it is returned.
Everything that cannot be mapped is refused as one :class:`SpecError` listing every reason
with file, key path, line and node; what is mapped with a loss is returned as warnings.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.errors import SpecError, SpecIssue
from models.plan import LabPlan
from models.specfile import line_of
from topologies.clab.kinds import DATAPATH_LABEL, FORWARD_LABEL, KindMapping, map_kind
from topologies.clab.links import ClabLink, LinkScan, scan_links
from topologies.clab.names import ifname, lab_name, node_name, unique_names
from topologies.clab.nodes import ClabNode, resolve_nodes
from topologies.loader import parse_topology, read_yaml
from topologies.resolve import resolve

__all__ = ["ImportResult", "import_clab", "import_clab_doc"]

ORIGIN_LABELS = ("clab.kind", "clab.image", "clab.name")


@dataclass(frozen=True, slots=True)
class ImportResult:
    """An imported topology: ``topology`` (mapping for YAML), its resolved ``plan``, and the
    ``warnings`` (what was mapped or dropped with a loss), each naming key path and nodes."""

    topology: dict[str, Any]
    plan: LabPlan
    warnings: list[SpecIssue]


def _shape_issues(doc: Mapping[str, Any]) -> list[SpecIssue]:
    issues = []
    if not isinstance(doc.get("name"), str | int) or not str(doc.get("name")):
        issues.append(SpecIssue("a containerlab file needs a name", key_path=("name",)))
    topo = doc.get("topology")
    if not isinstance(topo, Mapping):
        return issues + [SpecIssue("a containerlab file needs a topology mapping",
                                   key_path=("topology",))]
    if not isinstance(topo.get("nodes"), Mapping) or not topo["nodes"]:
        issues.append(SpecIssue("topology.nodes must be a mapping of node names",
                                key_path=("topology", "nodes")))
    for key in ("kinds", "groups", "nodes"):
        for name, body in (topo.get(key) or {}).items() if isinstance(topo.get(key),
                                                                       Mapping) else ():
            if body is not None and not isinstance(body, Mapping):
                issues.append(SpecIssue(f"{key[:-1]} {name!r} must be a mapping",
                                        key_path=("topology", key, name)))
    for key in ("kinds", "groups", "defaults"):
        if topo.get(key) is not None and not isinstance(topo[key], Mapping):
            issues.append(SpecIssue(f"topology.{key} must be a mapping",
                                    key_path=("topology", key)))
    return issues


def _kinds(nodes: Mapping[str, ClabNode], linked: set[str], forced: Mapping[str, str]
           ) -> tuple[dict[str, KindMapping], list[SpecIssue]]:
    out, issues = {}, []
    for name, node in nodes.items():
        path = ("topology", "nodes", name)
        labels = {**node.labels, **({"aitb.kind": forced[name]} if name in forced else {})}
        if node.kind is None:
            issues.append(SpecIssue(f"node {name!r} has no kind (set it on the node, its group, "
                                    "or topology.defaults)", key_path=path))
            continue
        try:
            out[name] = map_kind(str(node.kind), node.image, labels)
        except ValueError as exc:
            issues.append(SpecIssue(f"node {name!r}: {exc}", key_path=(*path, "kind")))
        mode = str(node.network_mode or "")
        if name in linked and (mode == "host" or mode.startswith("container:")):
            issues.append(SpecIssue(
                f"node {name!r} has network-mode {mode!r}: its interfaces would live in "
                "another namespace (the host's or a container's), which aitb never touches",
                key_path=(*path, "network-mode")))
    return out, issues


def _kind_warnings(kinds: Mapping[str, KindMapping], nodes: Mapping[str, ClabNode],
                   keep: set[str]) -> list[SpecIssue]:
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, m in kinds.items():
        if m.warn and name in keep:
            groups[(m.why, m.kind)].append(name)
    return [SpecIssue(f"{why}: nodes {', '.join(names)} mapped to {kind}s",
                      key_path=("topology", "nodes")) for (why, kind), names in groups.items()]


def _summary_warnings(nodes: Mapping[str, ClabNode], scan: LinkScan, keep: set[str]
                      ) -> list[SpecIssue]:
    used = Counter(s for n in keep for s in nodes[n].container_settings)
    out = []
    if used:
        listed = ", ".join(f"{k} ({v} node{'s' if v > 1 else ''})" for k, v in used.items())
        out.append(SpecIssue(f"container settings ignored (aitb runs no images): {listed}",
                             key_path=("topology", "nodes")))
    if scan.ignored:
        listed = ", ".join(f"{k} ({v})" for k, v in scan.ignored.items())
        out.append(SpecIssue(f"link settings ignored (aitb assigns its own addresses from "
                             f"198.18.0.0/15 and MACs): {listed}", key_path=("topology", "links")))
    return out


def _rename_issues(nodes: list[str]) -> tuple[dict[str, str], list[SpecIssue], list[SpecIssue]]:
    mapping, clashes = unique_names(nodes, node_name)
    issues = [SpecIssue(f"nodes {', '.join(map(repr, olds))} all become {new!r} in aitb's "
                        "lower-case alphabet; rename one", key_path=("topology", "nodes"))
              for new, olds in clashes.items()]
    warnings = [SpecIssue(f"node {old!r} renamed {new!r} (aitb node names are "
                          "[a-z0-9_-], at most 32 characters)", key_path=("topology", "nodes", old))
                for old, new in mapping.items() if old != new]
    return mapping, issues, warnings


def _ifnames(links: list[ClabLink]) -> tuple[dict[tuple[str, str], str | None], list[SpecIssue]]:
    out: dict[tuple[str, str], str | None] = {}
    taken: dict[tuple[str, str], str] = {}  # (node, new name) -> the original it came from
    warnings = []
    for end in (e for lk in links for e in (lk.a, lk.b)):
        new = ifname(end[1])
        if new is not None and taken.setdefault((end[0], new), end[1]) != end[1]:
            new = None  # two original names became one; the same name twice stays (refused)
        out[end] = new
        if new != end[1]:
            what = f"renamed {new!r}" if new else "renamed by aitb (ethN)"
            warnings.append(SpecIssue(f"interface {end[1]!r} of node {end[0]!r} {what}: Linux "
                                      "and aitb take [a-z0-9_.-], at most 15 characters",
                                      key_path=("topology", "links")))
    return out, warnings


def _node_entry(node: ClabNode, kind: KindMapping, new_name: str, group: str | None
                ) -> dict[str, Any]:
    labels = {k: v for k, v in node.labels.items() if k not in ORIGIN_LABELS}
    labels["clab.kind"] = str(node.kind)
    if node.image:
        labels["clab.image"] = str(node.image)
    if new_name != node.name:
        labels["clab.name"] = node.name
    datapath = labels.pop(DATAPATH_LABEL, None)  # written by the export of an OVS switch
    forward = labels.pop(FORWARD_LABEL, None) == "true"  # by the export of a forwarding host
    return {"kind": kind.kind, **({"group": group} if group else {}),
            **({"datapath": datapath} if datapath and kind.kind == "switch" else {}),
            **({"forward": True} if forward and kind.kind == "host" else {}),
            "labels": labels}


def _build(doc: Mapping[str, Any], nodes: Mapping[str, ClabNode], kinds: dict[str, KindMapping],
           links: list[ClabLink], names: Mapping[str, str], source: str
           ) -> tuple[dict[str, Any], list[SpecIssue]]:
    ifn, warnings = _ifnames(links)
    keep = [n for n in nodes if n in {e[0] for lk in links for e in (lk.a, lk.b)}]
    groups = sorted({node_name(nodes[n].group) for n in keep if nodes[n].group})

    def end(e: tuple[str, str]) -> str:
        return names[e[0]] + (f":{ifn[e]}" if ifn[e] else "")

    topo = {
        "name": lab_name(str(doc["name"])),
        "description": f"imported from the containerlab file {Path(source).name}",
        **({"groups": {g: {} for g in groups}} if groups else {}),
        "nodes": {names[n]: _node_entry(nodes[n], kinds[n], names[n],
                                        node_name(nodes[n].group) if nodes[n].group else None)
                  for n in keep},
        "links": [{"endpoints": [end(lk.a), end(lk.b)], "mtu": lk.mtu} for lk in links],
    }
    return topo, warnings


def _unlinked_warning(dropped: list[str]) -> list[SpecIssue]:
    if not dropped:
        return []
    return [SpecIssue(f"dropped {len(dropped)} node(s) without data links (containerlab gives "
                      f"them only its management network, which aitb does not emulate): "
                      f"{', '.join(dropped)}", key_path=("topology", "nodes"))]


def _placed(doc: Any, source: str, issues: list[SpecIssue]) -> list[SpecIssue]:
    return [SpecIssue(i.message, file=source, key_path=i.key_path,
                      line=i.line or line_of(doc, i.key_path)) for i in issues]


def _check(doc: Any, source: str, issues: list[SpecIssue]) -> None:
    if issues:
        raise SpecError(_placed(doc, source, issues))


def import_clab_doc(doc: Mapping[str, Any], source: str, *, drop_external: bool = False,
                    kinds: Mapping[str, str] | None = None) -> ImportResult:
    """Import a containerlab topology already read as a mapping (see :func:`import_clab`)."""
    _check(doc, source, _shape_issues(doc))
    topo = doc["topology"]
    nodes = resolve_nodes(topo)
    scan = scan_links(topo.get("links"), list(nodes), allow_external=drop_external)
    linked = {e[0] for lk in scan.links for e in (lk.a, lk.b)}
    unknown = [n for n in (kinds or {}) if n not in nodes]
    issues = [SpecIssue(f"--kind names node {n!r}, which is not in the file") for n in unknown]
    mapped, kind_issues = _kinds({n: v for n, v in nodes.items() if n in linked}, linked,
                                 kinds or {})
    names, name_issues, renames = _rename_issues([n for n in nodes if n in linked])
    _check(doc, source, issues + kind_issues + scan.issues + name_issues)
    if not scan.links:
        _check(doc, source, [SpecIssue(
            f"no links between lab nodes (nodes {', '.join(nodes)} have only containerlab's "
            "management network): nothing for aitb to emulate", key_path=("topology", "links"))])
    out, if_warnings = _build(doc, nodes, mapped, scan.links, names, source)
    warnings = (_kind_warnings(mapped, nodes, linked) + scan.warnings
                + _unlinked_warning([n for n in nodes if n not in linked]) + renames
                + if_warnings + _summary_warnings(nodes, scan, linked))
    plan = _resolve(out, source, doc, scan.links, names)
    return ImportResult(out, plan, _placed(doc, source, warnings))


def _clab_path(path: tuple, links: list[ClabLink], names: Mapping[str, str]) -> tuple:
    """A key path of the generated topology as a key path of the containerlab file."""
    if len(path) >= 2 and path[0] == "links" and isinstance(path[1], int) \
            and path[1] < len(links):
        return ("topology", "links", links[path[1]].index, *path[2:])
    original = {new: old for old, new in names.items()}
    if len(path) >= 2 and path[0] == "nodes" and path[1] in original:
        return ("topology", "nodes", original[path[1]], *path[2:])
    return path


def _resolve(topo: dict[str, Any], source: str, doc: Any, links: list[ClabLink],
             names: Mapping[str, str]) -> LabPlan:
    where = f"{source} (imported)"
    try:
        return resolve(parse_topology(topo, where), where)
    except SpecError as exc:
        raise SpecError(_placed(doc, source, [
            SpecIssue(f"the imported topology does not resolve: {i.message}",
                      key_path=_clab_path(i.key_path, links, names)) for i in exc.issues])
                        ) from None


def import_clab(path: str | Path, *, drop_external: bool = False,
                kinds: Mapping[str, str] | None = None) -> ImportResult:
    """Read the containerlab topology file ``path`` and return it as an aitb topology.

    Args: drop_external: drop links that leave the lab (host, mgmt-net, macvlan, vxlan) with
    a warning instead of refusing the file; kinds: containerlab node name -> aitb kind
    (host|router|switch), overriding the mapping (like the node label ``aitb.kind``).
    Returns an :class:`ImportResult`. Raises :class:`SpecError` listing every reason the file
    cannot be imported (file, line, key path, node). Reads only ``path``; writes nothing.
    """
    source = str(path)
    doc, dups = read_yaml(path, "a containerlab topology: a mapping with name and topology")
    if dups:
        raise SpecError(dups)
    return import_clab_doc(doc, source, drop_external=drop_external, kinds=kinds)
