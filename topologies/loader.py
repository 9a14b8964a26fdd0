"""Reading topology files: YAML (through models.specfile, keeping line numbers) ->
:class:`TopologySpec`.

Every problem becomes a :class:`SpecIssue` with file, key path and line; all of them are
collected into one :class:`SpecError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from models.errors import SpecError, SpecIssue
from models.specfile import Ref, issues_from_validation, load_yaml, with_lines
from topologies.lenient import structural_issues
from topologies.spec import TopologySpec

__all__ = ["read_yaml", "parse_topology", "TOPOLOGY_TOP"]

TOPOLOGY_TOP = "a topology: a mapping with name, nodes and links"


def read_yaml(path: str | Path, expected: str = TOPOLOGY_TOP, *, ref: Ref | None = None
              ) -> tuple[Any, list[SpecIssue]]:
    """:func:`models.specfile.load_yaml` with a topology as the default ``expected``."""
    return load_yaml(path, expected, ref=ref)


def parse_topology(data: Mapping[str, Any], source: str) -> TopologySpec:
    """Validate a topology mapping (from YAML, JSON, or embedded in an experiment file).

    Raises :class:`SpecError` with every problem pydantic finds (unknown key, wrong type, bad
    unit, value out of range) and the structural problems of the parts that are valid (see
    :mod:`topologies.lenient`), each with key path and, for ruamel documents, line number.
    """
    try:
        return TopologySpec.model_validate(data)
    except ValidationError as exc:
        issues = issues_from_validation(exc, TopologySpec, source)
        seen = {(i.key_path, i.message) for i in issues}
        issues += [i for i in structural_issues(data) if (i.key_path, i.message) not in seen]
        raise with_lines(SpecError(issues), data, source) from None
