"""Read Internet Topology Zoo maps (GraphML or GML) into a plain PoP graph (pure; reads one file).

The Zoo (S. Knight et al., "The Internet Topology Zoo", IEEE JSAC 29(9), 2011) publishes each
network as GraphML: nodes with ``label``, ``Latitude``, ``Longitude`` (degrees, doubles) and
``Country``; edges sometimes with ``LinkSpeedRaw`` (bit/s), ``LinkLabel``, and a ``key`` when
two PoPs have parallel links. networkx reads the graph; a first pass over the XML checks every
``<data>`` against its ``<key>`` declaration, so that a bad file is refused with file, node or
edge, and key named (networkx alone says only "could not convert string to float").
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from models.errors import SpecError, SpecIssue

__all__ = ["Pop", "WanEdge", "WanGraph", "read_wan"]

_NS = "{http://graphml.graphdrawing.org/xmlns}"
_NUMERIC = {"int", "long", "float", "double"}


@dataclass(frozen=True, slots=True)
class Pop:
    """A point of presence: ``id`` as in the file, ``label`` (the id when the file has none),
    ``lat``/``lon`` in degrees (None: the file gives no usable coordinates)."""

    id: str
    label: str
    lat: float | None
    lon: float | None


@dataclass(frozen=True, slots=True)
class WanEdge:
    """A link between PoPs ``a`` and ``b`` (ids); ``rate_bps`` from LinkSpeedRaw (None: not
    given); ``label`` the LinkLabel; ``parallel`` its index among links of the same pair."""

    a: str
    b: str
    rate_bps: int | None
    label: str
    parallel: int


@dataclass(frozen=True, slots=True)
class WanGraph:
    """The PoPs and links of one map; ``network`` its name (the graph label or the file stem)."""

    network: str
    pops: tuple[Pop, ...]
    edges: tuple[WanEdge, ...]


def read_wan(path: str | Path) -> WanGraph:
    """Read the GraphML (``.graphml``) or GML (``.gml``) map at ``path``.

    Raises :class:`SpecError` naming the file, the node or edge and the key for an edge
    whose end is not a node of the file, an undeclared data key, a non-numeric value of a
    numeric key (coordinates, LinkSpeedRaw), a coordinate outside its range, or a file
    networkx cannot parse; nothing else happens.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".graphml", ".gml"):
        raise SpecError(f"unknown map format {suffix!r}; expected .graphml or .gml",
                        file=str(path))
    if suffix == ".graphml":
        _check_graphml(path)
    try:
        g = (nx.read_graphml(path, force_multigraph=True) if suffix == ".graphml"
             else nx.read_gml(path, label="id"))
    except (OSError, ET.ParseError, nx.NetworkXError, ValueError, KeyError) as exc:
        raise SpecError(f"cannot read the map: {exc}", file=str(path)) from None
    return _graph(path, nx.MultiGraph(g))


def _check_graphml(path: Path) -> None:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SpecError(f"cannot read the map: {exc}", file=str(path)) from None
    keys = {k.get("id"): (k.get("attr.name"), k.get("attr.type"), k.get("for"))
            for k in root.iter(f"{_NS}key")}
    issues = []
    ids = {el.get("id") for el in root.iter(f"{_NS}node")}
    for tag in ("node", "edge"):
        for el in root.iter(f"{_NS}{tag}"):
            where = _where(tag, el)
            if tag == "edge":
                issues += _check_ends(path, where, el, ids)
            for d in el.findall(f"{_NS}data"):
                issues += _check_data(path, where, d, keys)
    if issues:
        raise SpecError(issues)


def _where(tag: str, el: ET.Element) -> str:
    if tag == "node":
        return f"node {el.get('id')!r}"
    return f"edge {el.get('source')!r} -- {el.get('target')!r}"


def _check_ends(path: Path, where: str, el: ET.Element, ids: set[str | None]
                ) -> list[SpecIssue]:
    """An edge whose source or target is no ``<node id=...>`` of the file: networkx would
    add a bare node for it (a PoP without name or coordinates) instead of refusing."""
    return [SpecIssue(f"{where}: {end} node {el.get(end)!r} is not defined in the map "
                      f"(no <node id={el.get(end)!r}>)", file=str(path))
            for end in ("source", "target") if el.get(end) not in ids]


def _check_data(path: Path, where: str, d: ET.Element,
                keys: dict[str | None, tuple[str | None, str | None, str | None]]
                ) -> list[SpecIssue]:
    key = d.get("key")
    if key not in keys:
        return [SpecIssue(f"{where}: data key {key!r} has no <key> declaration",
                          file=str(path))]
    name, typ, _ = keys[key]
    text = (d.text or "").strip()
    if typ in _NUMERIC:
        try:
            float(text)
        except ValueError:
            return [SpecIssue(f"{where}: key {name!r} ({typ}) has the non-numeric value "
                              f"{text!r}", file=str(path))]
    return []


def _coord(path: Path, pop_id: str, data: dict, key: str, limit: float) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise SpecError(SpecIssue(f"node {pop_id!r}: key {key!r} is not a number: {value!r}",
                                  file=str(path)))
    if abs(value) > limit:
        raise SpecError(SpecIssue(f"node {pop_id!r}: key {key!r} = {value} is outside "
                                  f"-{limit}..{limit} degrees", file=str(path)))
    return float(value)


def _rate(path: Path, where: str, data: dict) -> int | None:
    value = data.get("LinkSpeedRaw")
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise SpecError(SpecIssue(f"{where}: key 'LinkSpeedRaw' must be a positive number of "
                                  f"bit/s, got {value!r}", file=str(path)))
    return round(value)


def _graph(path: Path, g: nx.MultiGraph) -> WanGraph:
    pops = []
    for n, data in g.nodes(data=True):
        lat = _coord(path, str(n), data, "Latitude", 90)
        lon = _coord(path, str(n), data, "Longitude", 180)
        if lat is None or lon is None:
            lat = lon = None
        pops.append(Pop(str(n), str(data.get("label") or n), lat, lon))
    edges = []
    seen: dict[frozenset[str], int] = {}
    for a, b, data in g.edges(data=True):
        pair = frozenset((str(a), str(b)))
        k = seen.get(pair, 0)
        seen[pair] = k + 1
        edges.append(WanEdge(str(a), str(b), _rate(path, f"edge {a!r} -- {b!r}", data),
                             str(data.get("LinkLabel") or ""), k))
    return WanGraph(str(g.graph.get("label") or g.graph.get("Network") or path.stem),
                    tuple(pops), tuple(edges))
