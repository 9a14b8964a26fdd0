"""Turning pydantic's ``ValidationError`` into :class:`SpecIssue`s with key paths, readable
messages and line numbers taken from ruamel.yaml's position information."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from aitb.errors import SpecError, SpecIssue

__all__ = ["issues_from_validation", "line_of", "with_lines"]


def _unwrap(tp: Any) -> Any:
    """Strip Optional/Annotated/Union-with-None down to the one interesting type."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model that the value at ``loc`` is validated as (None if not a model)."""
    tp: Any = root
    for part in loc:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(str(part))
            if field is None:
                return None
            tp = field.annotation
        elif origin in (dict, Mapping):
            tp = typing.get_args(tp)[1]
        elif origin in (list, tuple, Sequence):
            tp = typing.get_args(tp)[0]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _unknown_key_message(root: type[BaseModel], loc: tuple) -> str:
    key = str(loc[-1])
    model = _model_at(root, loc[:-1])
    if model is None:
        return f"unknown key {key!r}"
    known = list(model.model_fields)
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key {key!r}{hint}; expected one of: {', '.join(known)}"


def _message(root: type[BaseModel], err: Mapping[str, Any]) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        return _unknown_key_message(root, tuple(err["loc"]))
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if kind == "missing":
        if err["loc"] and isinstance(err["loc"][-1], int):
            return "an item is missing here (endpoints need exactly two entries)"
        return "required key is missing"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a mapping of keys; got {err['input']!r}"
    if kind == "list_type" or kind == "tuple_type":
        return f"expected a list; got {err['input']!r}"
    if kind == "literal_error":
        return f"{msg}; got {err['input']!r}"
    if kind in ("string_pattern_mismatch", "string_too_long", "int_parsing", "int_type",
                "bool_parsing", "string_type", "greater_than_equal", "less_than_equal"):
        return f"{msg}; got {err['input']!r}"
    return msg


def _clean_loc(loc: Sequence[Any]) -> tuple[str | int, ...]:
    """Drop pydantic's internal location parts (function names, union member tags)."""
    return tuple(p for p in loc if isinstance(p, int) or not str(p).startswith(
        ("function-", "union[", "tagged-union[")))


def issues_from_validation(exc: ValidationError, root: type[BaseModel], source: str,
                           prefix: tuple[str | int, ...] = ()) -> list[SpecIssue]:
    """One :class:`SpecIssue` per pydantic error, key path ``prefix + loc``."""
    out = []
    for err in exc.errors(include_url=False):
        loc = _clean_loc(err["loc"])
        out.append(SpecIssue(_message(root, {**err, "loc": loc}), file=source,
                             key_path=(*prefix, *loc)))
    return out


def line_of(doc: Any, key_path: Sequence[str | int]) -> int | None:
    """1-based line of the deepest part of ``key_path`` found in a ruamel round-trip document
    (None for plain dicts or when not even the first key is there)."""
    line, node = None, doc
    for part in key_path:
        lc = getattr(node, "lc", None)
        try:
            if isinstance(node, Mapping) and part in node:
                line = lc.key(part)[0] + 1 if lc is not None else line
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                line = lc.item(part)[0] + 1 if lc is not None else line
            else:
                break
        except (KeyError, TypeError, AttributeError):  # no position recorded for this key
            break
        node = node[part]
    return line


def with_lines(exc: SpecError, doc: Any, source: str) -> SpecError:
    """A copy of ``exc`` whose issues carry ``source`` and the line found in ``doc``."""
    issues = [SpecIssue(i.message, file=i.file or source, key_path=i.key_path,
                        line=i.line or line_of(doc, i.key_path)) for i in exc.issues]
    return SpecError(issues)
