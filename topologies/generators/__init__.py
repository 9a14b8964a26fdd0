"""Topology generators: pure functions returning a :class:`TopologySpec`, which then goes through
the same validation and resolution as a file. The registry is explicit: add a generator by
adding one line to :data:`GENERATORS`."""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from models.errors import SpecError, SpecIssue
from models.specfile import issues_from_validation
from models.unit_fields import boolean_where_number
from topologies.generators._build import GeneratorParamError
from topologies.generators.dragonfly import dragonfly
from topologies.generators.edge_hierarchy import edge_hierarchy
from topologies.generators.edge_star import edge_star
from topologies.generators.fat_tree import fat_tree
from topologies.generators.full_mesh import full_mesh
from topologies.generators.hypercube import hypercube
from topologies.generators.leaf_spine import leaf_spine
from topologies.generators.multi_dc import multi_dc_leaf_spine
from topologies.generators.rail_optimized import rail_optimized
from topologies.generators.random_graph import random_graph
from topologies.generators.ring import ring
from topologies.generators.single_switch import single_switch
from topologies.generators.torus import torus
from topologies.profiles import known_profiles
from topologies.spec import TopologySpec

__all__ = ["GENERATORS", "build_spec", "expand", "profile_param_issues"]

GENERATORS: Mapping[str, Callable[..., TopologySpec]] = MappingProxyType({
    "multi_dc_leaf_spine": multi_dc_leaf_spine,
    "leaf_spine": leaf_spine,
    "edge_star": edge_star,
    "single_switch": single_switch,
    "fat_tree": fat_tree,
    "rail_optimized": rail_optimized,
    "torus": torus,
    "hypercube": hypercube,
    "dragonfly": dragonfly,
    "full_mesh": full_mesh,
    "ring": ring,
    "random_graph": random_graph,
    "edge_hierarchy": edge_hierarchy,
})


def _param_issues(exc: ValidationError, name: str, source: str) -> list[SpecIssue]:
    known = list(inspect.signature(GENERATORS[name]).parameters)
    return issues_from_validation(exc, None, source, ("generator", "params"), known=known)


def _hints(gen: Callable[..., TopologySpec]) -> dict[str, Any]:
    """``gen``'s parameter types (empty where they cannot be resolved: nothing checked)."""
    try:
        return typing.get_type_hints(gen, include_extras=True)
    except (NameError, TypeError):
        return {}


def build_spec(name: str, params: Mapping[str, Any], source: str = "<generator>"
               ) -> TopologySpec:
    """Run generator ``name`` with keyword ``params``.

    Raises :class:`SpecError` for an unknown generator (listing the valid ones) or bad
    parameters (key path ``generator.params.<param>``).
    """
    gen = GENERATORS.get(name)
    if gen is None:
        close = difflib.get_close_matches(str(name), list(GENERATORS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(SpecIssue(f"unknown generator {name!r}{hint}; known: "
                                  f"{', '.join(GENERATORS)}", file=source,
                                  key_path=("generator", "name")))
    hints = _hints(gen)  # true/false where a number is wanted (pydantic would take 1/0)
    found = {k: f for k, v in params.items()
             if (f := boolean_where_number(hints.get(k, Any), v)) is not None}
    bools = [SpecIssue(f"expected a number, got {str(b).lower()} (a boolean)", file=source,
                       key_path=("generator", "params", k, *where))
             for k, (where, b) in found.items()]
    if bools:
        raise SpecError(bools)
    try:
        return gen(**params)
    except ValidationError as exc:
        raise SpecError(_param_issues(exc, name, source)) from None
    except GeneratorParamError as exc:
        raise SpecError(SpecIssue(f"generator {name!r}, parameter {exc.param!r}: {exc}",
                                  file=source, key_path=("generator", "params", exc.param))
                        ) from None


def profile_param_issues(name: str, params: Mapping[str, Any], gen: TopologySpec,
                         profiles: Mapping[str, Any], source: str) -> list[SpecIssue]:
    """One issue per parameter of generator ``name`` that names a profile its generated
    links use (``fabric: fabric-10g``; in a list, e.g. edge_star's ``access``, per item)
    that is not in ``profiles`` (built-in and the file's): at ``generator.params.<key>``
    (the line of that key), where resolving would report it at every generated link."""
    used = {link.profile for link in gen.links if link.profile}
    if gen.defaults.link is not None and gen.defaults.link.profile:
        used.add(gen.defaults.link.profile)
    known = ", ".join(sorted(profiles))
    out = []
    for key, value in params.items():
        items = list(enumerate(value)) if isinstance(value, list | tuple) else [(None, value)]
        for j, v in items:
            if isinstance(v, str) and v in used and v not in profiles:
                out.append(SpecIssue(
                    f"generator {name!r}, parameter {key!r}: unknown profile {v!r}; known "
                    f"profiles: {known}", file=source,
                    key_path=("generator", "params", key, *(() if j is None else (j,)))))
    return out


def _merge_model(base: Any, over: Any) -> Any:
    """``over``'s set keys on top of ``base`` (both pydantic models of one type; nested models
    merged key by key)."""
    if base is None or over is None:
        return over if over is not None else base
    data = base.model_dump(exclude_none=True)
    for key in over.model_fields_set:
        value = getattr(over, key)
        if hasattr(value, "model_fields_set"):
            data[key] = _merge_model(getattr(base, key), value).model_dump(exclude_none=True)
        elif value is not None:
            data[key] = value.model_dump() if hasattr(value, "model_dump") else value
    return type(base).model_validate(data)


def expand(spec: TopologySpec, source: str) -> TopologySpec:
    """Replace ``spec.generator`` by what it generates. The file's name, description,
    addressing, profiles, groups and defaults override the generated ones; nodes and links in
    the file are added to the generated ones (a node name used by both is an error); the
    file's other top-level keys (delay_line, backend, load_balancing, flowlet_gap, and any
    added later) win over the generated spec's where the file sets them."""
    if spec.generator is None:
        return spec
    gen = build_spec(spec.generator.name, spec.generator.params, source)
    bad = profile_param_issues(spec.generator.name, spec.generator.params, gen,
                               known_profiles({**gen.profiles, **spec.profiles}), source)
    if bad:
        raise SpecError(bad)
    clash = sorted(set(gen.nodes) & set(spec.nodes))
    if clash:
        raise SpecError([SpecIssue(f"node {n!r} is also made by generator "
                                   f"{spec.generator.name!r}", file=source,
                                   key_path=("nodes", n)) for n in clash])
    merged = dict(
        name=spec.name, description=spec.description or gen.description,
        addressing=spec.addressing, profiles={**gen.profiles, **spec.profiles},
        groups={**gen.groups, **spec.groups}, defaults=_merge_model(gen.defaults, spec.defaults),
        nodes={**gen.nodes, **spec.nodes}, links=[*gen.links, *spec.links])
    for key in TopologySpec.model_fields:  # top-level scalars: the file's where it sets one
        if key not in merged and key != "generator":
            mine = getattr(spec, key)
            merged[key] = mine if mine is not None else getattr(gen, key)
    return TopologySpec(**merged)
