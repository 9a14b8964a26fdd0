"""Reading topology files: YAML (ruamel.yaml, keeping line numbers) -> :class:`TopologySpec`.

Every problem becomes a :class:`SpecIssue` with file, key path and line; all of them are
collected into one :class:`SpecError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, SequenceNode

from aitb.errors import SpecError, SpecIssue
from topologies.issues import issues_from_validation, with_lines
from topologies.lenient import structural_issues
from topologies.spec import TopologySpec

__all__ = ["read_yaml", "parse_topology"]


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = True  # duplicates are found and reported by _duplicate_keys
    return yaml


def _duplicate_keys(node: Node | None, path: tuple) -> Iterator[SpecIssue]:
    if isinstance(node, MappingNode):
        first: dict[Any, int] = {}
        for key, value in node.value:
            name, line = key.value, key.start_mark.line + 1
            if name in first:
                what = "node name" if path == ("nodes",) else "key"
                yield SpecIssue(f"duplicate {what} {name!r} (first on line {first[name]})",
                                key_path=(*path, name), line=line)
            first.setdefault(name, line)
            yield from _duplicate_keys(value, (*path, name))
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            yield from _duplicate_keys(item, (*path, i))


def _syntax_issue(exc: YAMLError, source: str) -> SpecIssue:
    if isinstance(exc, MarkedYAMLError) and exc.problem_mark is not None:
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        return SpecIssue(f"YAML syntax error: {what}", file=source,
                         line=exc.problem_mark.line + 1)
    return SpecIssue(f"YAML syntax error: {exc}", file=source)


TOPOLOGY_TOP = "a topology: a mapping with name, nodes and links"
_YAML_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number",
               bool: "true or false"}


def read_yaml(path: str | Path, expected: str = TOPOLOGY_TOP) -> tuple[Any, list[SpecIssue]]:
    """Read ``path`` as YAML. Returns the round-trip document (mappings remember the line of
    every key) and the duplicate keys found. Raises :class:`SpecError` naming the file when it
    is missing, unreadable, not YAML, or not a mapping at the top (the message says what was
    ``expected``, e.g. "an experiment: a mapping with name, topology and workloads")."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(SpecIssue("file not found", file=source)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(SpecIssue(f"cannot read the file: {exc}", file=source)) from None
    yaml = _yaml()
    try:
        dups = [SpecIssue(i.message, file=source, key_path=i.key_path, line=i.line)
                for i in _duplicate_keys(yaml.compose(text), ())]
        doc = yaml.load(text)
    except YAMLError as exc:
        raise SpecError(_syntax_issue(exc, source)) from None
    if not isinstance(doc, Mapping):
        got = "an empty file" if doc is None else next(
            (word for kind, word in _YAML_KINDS.items() if isinstance(doc, kind)), "a scalar")
        raise SpecError(SpecIssue(f"expected {expected}; got {got}", file=source, line=1))
    return doc, dups


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
