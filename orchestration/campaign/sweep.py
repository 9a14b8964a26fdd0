"""Sweep expansion (pure): a campaign's grid and zip -> points; a point's values set into a
copy of the base experiment mapping by dotted path."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from orchestration.campaign.spec import CampaignSpec

__all__ = ["Point", "Run", "PathError", "parse_path", "set_path", "expand", "runs", "plain",
           "point_document"]


class PathError(ValueError):
    """A dotted path does not fit the experiment mapping; the message says where it breaks,
    ``key`` (when known) is the swept key."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Point:
    """One point of the sweep: ``id`` (``p000``, ``p001``, ... in expansion order), its index,
    and swept key -> value (plain JSON types)."""

    id: str
    index: int
    values: dict[str, Any]

    def label(self) -> str:
        """``key=value, ...`` with each key's last part, for people."""
        return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in self.values.items())


@dataclass(frozen=True)
class Run:
    """One run: a point, a repetition ``rep`` (0-based) and the seed it uses."""

    point: Point
    rep: int
    seed: int

    @property
    def key(self) -> str:
        """``p003/rep1``: the run's name in the campaign state."""
        return f"{self.point.id}/rep{self.rep}"


def plain(value: Any) -> Any:
    """``value`` (possibly ruamel types) as plain JSON types (dict, list, str, int, float,
    bool, None)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def parse_path(key: str) -> tuple[str | int, ...]:
    """``"workloads.0.size"`` -> ``("workloads", 0, "size")``; parts of digits are list
    indices. Raises :class:`PathError` for an empty part."""
    parts = key.split(".")
    if any(p == "" for p in parts):
        raise PathError(f"{key!r} is not a dotted path (empty part)")
    return tuple(int(p) if p.isdigit() else p for p in parts)


def _step(node: Any, part: str | int, done: str, create: bool) -> Any:
    """The child ``part`` of ``node`` (creating an empty mapping if ``create`` and absent)."""
    if isinstance(node, list):
        if not isinstance(part, int):
            raise PathError(f"{done or 'the experiment'} is a list: index it with a number, "
                            f"not {part!r}")
        if not 0 <= part < len(node):
            raise PathError(f"{done} has {len(node)} item(s); index {part} does not exist")
        return node[part]
    if not isinstance(node, MutableMapping):
        raise PathError(f"{done} is a {type(node).__name__} ({node!r}), not a mapping or "
                        "list")
    if part not in node:
        if not create:
            raise PathError(f"{done or 'the experiment'} has no key {part!r}")
        node[part] = {}
    return node[part]


def set_path(doc: MutableMapping[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    """Set ``doc[path[0]][path[1]]... = value`` in place. Missing mapping keys on the way are
    created (the experiment validation then refuses unknown ones); list indices must exist.
    Raises :class:`PathError` saying which prefix of the path does not fit."""
    node: Any = doc
    for i, part in enumerate(path[:-1]):
        done = ".".join(str(p) for p in path[:i])
        node = _step(node, part, done, create=True)
    done = ".".join(str(p) for p in path[:-1])
    last = path[-1]
    if isinstance(node, list):
        _step(node, last, done, create=False)
        node[last] = value  # type: ignore[index]
    elif isinstance(node, MutableMapping):
        node[last] = value
    else:
        raise PathError(f"{done} is a {type(node).__name__} ({node!r}), not a mapping or list")


def expand(spec: CampaignSpec) -> list[Point]:
    """The points of ``spec``: the grid's cartesian product (last key fastest), each combined
    with every zip row; a campaign that sweeps nothing has one point, the base experiment."""
    grid_keys = list(spec.grid)
    combos = [dict(zip(grid_keys, vals, strict=True))
              for vals in itertools.product(*(spec.grid[k] for k in grid_keys))]
    zip_keys = list(spec.zip)
    rows = [dict(zip(zip_keys, vals, strict=True))
            for vals in zip(*(spec.zip[k] for k in zip_keys), strict=True)] or [{}]
    return [Point(f"p{i:03d}", i, plain({**c, **r}))
            for i, (c, r) in enumerate(itertools.product(combos, rows))]


def runs(spec: CampaignSpec, points: list[Point], seed_of: Mapping[str, int]) -> list[Run]:
    """Every run, repetition-major (all points once, then again), so that an interrupted
    campaign already holds a full sweep. ``seed_of``: point id -> its experiment's seed."""
    out = []
    for k in range(spec.repetitions):
        for p in points:
            base = seed_of[p.id]
            seed = {"fixed": base, "repetition": base + k,
                    "run": base + k * len(points) + p.index}[spec.seeds]
            out.append(Run(p, k, seed))
    return out


def point_document(base: Any, point: Point) -> Any:
    """A deep copy of the base experiment mapping ``base`` with ``point``'s values set.
    Raises :class:`PathError` (with its ``key``) for a path that does not fit."""
    doc = copy.deepcopy(base)
    for key, value in point.values.items():
        try:
            set_path(doc, parse_path(key), value)
        except PathError as exc:
            raise PathError(str(exc), key) from None
    return doc
