"""An imported topology as YAML text (ruamel.yaml), endpoints in flow style."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

__all__ = ["to_yaml"]


def _commented(value: Any, key: str | None = None) -> Any:
    if isinstance(value, Mapping):
        out = CommentedMap()
        for k, v in value.items():
            out[k] = _commented(v, k)
        return out
    if isinstance(value, Sequence) and not isinstance(value, str):
        seq = CommentedSeq(_commented(v) for v in value)
        if key == "endpoints":
            seq.fa.set_flow_style()
        return seq
    return value


def to_yaml(topology: Mapping[str, Any], header: Sequence[str] = ()) -> str:
    """``topology`` as block-style YAML with ``header`` lines as leading comments. Pure."""
    yaml = YAML(typ="rt")
    yaml.width = 100
    yaml.indent(mapping=2, sequence=4, offset=2)
    buf = io.StringIO()
    yaml.dump(_commented(topology), buf)
    lines = "".join(f"# {line}\n" if line else "#\n" for line in header)
    return lines + buf.getvalue()
