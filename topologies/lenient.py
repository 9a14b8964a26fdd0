"""Structural checks on a file that pydantic rejected, so one run reports everything.

When a file has, say, an unknown key in one node, the whole spec cannot be built; but the
other nodes and links are still worth checking (dangling endpoints, bad names, duplicates).
This builds a partial spec from the parts that validate on their own, with placeholders for
the parts that do not, runs :func:`topologies.validate.check_spec` on it, and drops whatever
it says about the broken parts (pydantic already reported those).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from models.errors import SpecIssue
from topologies.profiles import known_profiles
from topologies.spec import Defaults, GroupSpec, LinkSpec, NodeSpec, ProfileSpec, TopologySpec
from topologies.validate import check_spec

__all__ = ["structural_issues"]

_KINDS = ("host", "switch", "router")


def _items(data: Mapping[str, Any], key: str, model: type[BaseModel],
           broken: set[tuple]) -> dict[str, Any]:
    raw = data.get(key) or {}
    if not isinstance(raw, Mapping):
        broken.add((key,))
        return {}
    out: dict[str, Any] = {}
    for name, value in raw.items():
        try:
            out[str(name)] = model.model_validate(value)
        except ValidationError:
            broken.add((key, str(name)))
            kind = value.get("kind") if isinstance(value, Mapping) else None
            out[str(name)] = (NodeSpec(kind=kind if kind in _KINDS else None)
                              if model is NodeSpec else model())
    return out


def _links(data: Mapping[str, Any], broken: set[tuple]) -> tuple[list[LinkSpec], list[int]]:
    raw = data.get("links") or []
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        broken.add(("links",))
        return [], []
    links, index = [], []
    for i, value in enumerate(raw):
        try:
            links.append(LinkSpec.model_validate(value))
        except ValidationError:
            ends = value.get("endpoints") if isinstance(value, Mapping) else None
            try:  # keep the endpoints so that host-has-no-links is not reported falsely
                links.append(LinkSpec(endpoints=ends))  # type: ignore[arg-type]
            except ValidationError:
                broken.add(("links", i))
                continue
        index.append(i)
    return links, index


def _remap(issue: SpecIssue, index: list[int]) -> SpecIssue:
    path = issue.key_path
    if len(path) >= 2 and path[0] == "links" and isinstance(path[1], int):
        path = ("links", index[path[1]], *path[2:])
    return SpecIssue(issue.message, file=issue.file, key_path=path, line=issue.line)


def structural_issues(data: Mapping[str, Any]) -> list[SpecIssue]:
    """Issues :func:`check_spec` finds in the parts of ``data`` that validate on their own.

    Returns [] for files naming a generator (its parameters decide the structure).
    """
    if data.get("generator") is not None:
        return []
    broken: set[tuple] = set()
    try:
        defaults = Defaults.model_validate(data.get("defaults") or {})
    except ValidationError:
        defaults, broken = Defaults(), broken | {("defaults",)}
    profiles = _items(data, "profiles", ProfileSpec, broken)
    links, index = _links(data, broken)
    spec = TopologySpec.model_construct(
        name="partial", profiles=profiles, groups=_items(data, "groups", GroupSpec, broken),
        nodes=_items(data, "nodes", NodeSpec, broken), links=links, defaults=defaults,
        generator=None)
    found = [_remap(i, index) for i in check_spec(spec, known_profiles(profiles))]
    return [i for i in found if not any(i.key_path[:len(b)] == b for b in broken)
            and not (("nodes",) in broken and i.key_path == ("nodes",))]
