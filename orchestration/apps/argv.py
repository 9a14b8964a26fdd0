"""``kind: app`` entries -> per-node argv and environment, placeholders filled in (pure; all
checks before a lab exists; errors name the experiment file, ``workloads[i].<key>`` and the
node). See :mod:`orchestration.apps.entries` for the entry and its placeholders."""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field

from models.errors import SpecError, SpecIssue
from models.paths import host_addresses, peer_addresses
from models.plan import LabPlan
from orchestration.apps.entries import AppEntry

__all__ = ["PLACEHOLDERS", "AppRank", "AppPlan", "build_app", "fill"]

PLACEHOLDERS = ("node", "rank", "world_size", "master_addr", "addr:<node>", "src_addr:<node>",
                "addrs:<node>")


@dataclass(frozen=True)
class AppRank:
    """What one node runs: its rank, argv and extra environment (placeholders filled)."""

    rank: int
    node: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AppPlan:
    """A ``kind: app`` workload ready to run: ``ranks`` in rank order, ``timeout_s`` seconds
    for all of them (from their common start), ``image`` per node (None: namespace host)."""

    name: str
    ranks: tuple[AppRank, ...]
    timeout_s: float
    images: Mapping[str, str | None] = field(default_factory=dict)


def _problem(source: str, index: int, key: tuple[str | int, ...], message: str) -> SpecIssue:
    return SpecIssue(message, file=source, key_path=("workloads", index, *key))


def fill(text: str, values: Mapping[str, str], addresses: Mapping[str, str],
         sources: Mapping[str, str] | None = None,
         every: Mapping[str, list[str]] | None = None) -> str:
    """``text`` with its placeholders replaced: ``{name}`` from ``values``, ``{addr:NODE}``
    from ``addresses`` (node -> the address to reach it at), ``{src_addr:NODE}`` from
    ``sources`` (node -> this node's own address towards it; default: this node's
    ``addresses`` entry, ``values["node"]``), ``{addrs:NODE}`` from ``every`` (node -> all its
    addresses, comma-separated; default its ``addresses`` entry); ``{{``/``}}`` are literal
    braces. Raises ValueError naming
    the bad placeholder (unknown name, unknown node, conversion or format given, unbalanced
    brace)."""
    out = []
    for literal, name, spec, conv in string.Formatter().parse(text):
        out.append(literal)
        if name is None:
            continue
        if conv is not None:
            raise ValueError(f"placeholder {{{name}!{conv}}}: no conversions allowed")
        if name in ("addr", "src_addr", "addrs"):
            if spec not in addresses:
                raise ValueError(f"placeholder {{{name}:{spec}}}: {spec!r} is not a host "
                                 f"with a lab address ({', '.join(sorted(addresses))})")
            if name == "addr":
                out.append(addresses[spec])
            elif name == "addrs":
                out.append(",".join((every or {}).get(spec, [addresses[spec]])))
            elif spec in (sources or {}):
                out.append((sources or {})[spec])
            elif values.get("node") in addresses:
                out.append(addresses[values["node"]])
            else:
                raise ValueError(f"placeholder {{src_addr:{spec}}}: this node has no lab "
                                 "address")
        elif name in values and not spec:
            out.append(values[name])
        else:
            raise ValueError(f"unknown placeholder {{{name}{':' + spec if spec else ''}}}; "
                             f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
    return "".join(out)


def _parse(text: str) -> list[tuple[str, str | None, str | None, str | None]]:
    """``string.Formatter().parse`` of ``text``, [] when it is malformed (fill reports it)."""
    try:
        return list(string.Formatter().parse(text))
    except ValueError:
        return []


def _nodes(source: str, index: int, plan: LabPlan, nodes: list[str]) -> list[SpecIssue]:
    hosts = {h.name for h in plan.hosts()}
    issues = [_problem(source, index, ("nodes", i), f"node {n!r} is not a host of lab "
                       f"{plan.name}; hosts are {', '.join(sorted(hosts))}")
              for i, n in enumerate(nodes) if n not in hosts]
    twice = sorted({n for n in nodes if nodes.count(n) > 1})
    if twice:
        issues.append(_problem(source, index, ("nodes",), f"listed twice: {', '.join(twice)} "
                               "(one process per node)"))
    return issues


def _rank(e: AppEntry, rank: int, node: str, addresses: Mapping[str, str], source: str,
          index: int, issues: list[SpecIssue], pairs: Mapping[tuple[str, str], tuple[str, str]],
          every: Mapping[str, list[str]]) -> AppRank:
    # multi-NIC hosts: each peer at its NIC nearest to this node, from this node's NIC
    # towards it (models.paths.peer_addresses, as replay's agents use)
    mine = {h: pairs[(node, h)][1] for h in addresses if (node, h) in pairs}
    here = {**addresses, **mine}
    sources = {h: pairs[(node, h)][0] for h in addresses if (node, h) in pairs}
    values = {"node": node, "rank": str(rank), "world_size": str(len(e.nodes)),
              "master_addr": here[e.nodes[0]]}

    def one(key: tuple[str | int, ...], text: str) -> str:
        try:
            return fill(text, values, here, sources, every)
        except ValueError as exc:
            issues.append(_problem(source, index, key, f"node {node}: {exc}"))
            return text
    argv = tuple(one(("command", i), a) for i, a in enumerate(e.command))
    env = {k: one(("env", k), v) for k, v in e.env.items()}
    return AppRank(rank, node, argv, env)


def build_app(e: AppEntry, index: int, plan: LabPlan, source: str) -> AppPlan:
    """The :class:`AppPlan` of entry ``workloads[index]`` on ``plan``. Raises SpecError naming
    ``source``, the key (``nodes[i]``, ``command[i]``, ``env.KEY``) and the node for an unknown
    or repeated node, a node without a lab address, or a bad placeholder."""
    issues = _nodes(source, index, plan, e.nodes)
    if issues:
        raise SpecError(issues)
    addresses = {h.name: str(plan.address_of(h.name)) for h in plan.hosts()
                 if plan.address_of(h.name) is not None}
    missing = [n for n in e.nodes if n not in addresses]
    if missing:
        raise SpecError(_problem(source, index, ("nodes",), f"node {missing[0]} has no IPv4 lab "
                                 "address (it has no link)"))
    refs = [spec for text in (*e.command, *e.env.values())
            for _, name, spec, _ in _parse(text) if name in ("addr", "src_addr", "addrs")]
    names = list(dict.fromkeys([*e.nodes, *(r for r in refs if r in addresses)]))
    pairs = peer_addresses(plan, names)
    every = {h: host_addresses(plan, h) for h in names}
    ranks = tuple(_rank(e, r, n, addresses, source, index, issues, pairs, every)
                  for r, n in enumerate(e.nodes))
    if issues:
        raise SpecError(issues)
    return AppPlan(e.name or "app", ranks, float(e.timeout),
                   {n: plan.node(n).image for n in e.nodes})
