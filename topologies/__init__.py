"""Topologies: files and generators -> checked, addressed, routed, shaped :class:`LabPlan`.

Pure (no root, no network). The runtime and the CLI use these four functions:

* :func:`load_topology` -- a YAML file -> plan
* :func:`parse_topology` -- a mapping (e.g. embedded in an experiment file) -> spec
* :func:`resolve` -- spec -> plan
* :func:`generate` -- a registered generator with parameters -> plan

All raise :class:`models.errors.SpecError` listing every problem found, each with file,
key path and (for files) line number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.errors import SpecError
from models.plan import LabPlan
from models.specfile import Ref, with_lines
from topologies.generators import GENERATORS, build_spec, profile_param_issues
from topologies.loader import parse_topology, read_yaml
from topologies.profiles import known_profiles
from topologies.resolve import resolve
from topologies.spec import TopologySpec

__all__ = ["load_topology", "parse_topology", "resolve", "generate", "GENERATORS",
           "TopologySpec", "SpecError"]


def load_topology(path: str | Path, *, ref: Ref | None = None) -> LabPlan:
    """Read, check and resolve the topology file ``path`` (YAML).

    Returns the :class:`LabPlan`. Raises :class:`SpecError` with every problem (missing file,
    YAML syntax, unknown key, bad unit, dangling endpoint, unreachable hosts, ...), each
    naming the file, key path and line. Reads only ``path`` (a regular file, within the limits
    of models.specfile); creates nothing. ``ref``: the key that named ``path`` (an experiment's
    ``topology.file``), where problems opening the file are reported.
    """
    source = str(path)
    doc, issues = read_yaml(path, ref=ref)
    try:
        plan = resolve(parse_topology(doc, source), source)
    except SpecError as exc:
        issues += with_lines(exc, doc, source).issues
    if issues:
        raise SpecError(issues)
    return plan


def generate(name: str, **params: Any) -> LabPlan:
    """Resolve generator ``name`` (one of :data:`GENERATORS`) called with ``params``.

    Raises :class:`SpecError` for an unknown generator (listing the known ones), bad
    parameters, or a topology that does not resolve.
    """
    source = f"<generator {name}>"
    spec = build_spec(name, params, source)
    bad = profile_param_issues(name, params, spec, known_profiles(spec.profiles), source)
    if bad:
        raise SpecError(bad)
    return resolve(spec, source)
