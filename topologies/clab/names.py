"""containerlab names -> aitb names: node, group and lab names in aitb's alphabet, interface
names that Linux and aitb accept. Every rename is reported by the caller."""

from __future__ import annotations

import re
from collections.abc import Iterable

from models.plan import MAX_IFNAME, MAX_NODE_NAME
from topologies.validate import IFNAME_RE

__all__ = ["node_name", "lab_name", "ifname", "unique_names"]

LAB_NAME_MAX = 32  # topologies.spec.TopologySpec.name


def node_name(name: str) -> str:
    """``name`` in aitb's node alphabet ``[a-z0-9][a-z0-9_-]*``, at most 32 characters: lower
    case, any other character becomes '-'. ``"PC1"`` -> ``"pc1"``."""
    out = re.sub(r"[^a-z0-9_-]", "-", name.lower()).lstrip("-_")
    return (out or "node")[:MAX_NODE_NAME]


def lab_name(name: str) -> str:
    """``name`` as an aitb lab name ``[a-z0-9][a-z0-9-]*``, at most 32 characters."""
    out = re.sub(r"[^a-z0-9-]", "-", name.lower()).lstrip("-")
    return (out or "clab")[:LAB_NAME_MAX]


def ifname(name: str) -> str | None:
    """``name`` as an aitb interface name, or None when it cannot be one (too long, reserved):
    then aitb picks ``ethN``. ``"ethernet-1/1"`` -> ``"ethernet-1_1"``; ``"e1-1"`` unchanged."""
    out = re.sub(r"[^a-z0-9_.-]", "_", name.lower())
    if (not IFNAME_RE.fullmatch(out) or len(out) > MAX_IFNAME or out in ("lo", "br0")
            or out.startswith("ifb")):
        return None
    return out


def unique_names(names: Iterable[str], convert) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Map each of ``names`` through ``convert``; returns (mapping, clashes) where clashes
    maps a converted name to the two or more originals that became it."""
    mapping = {n: convert(n) for n in names}
    seen: dict[str, list[str]] = {}
    for original, new in mapping.items():
        seen.setdefault(new, []).append(original)
    return mapping, {new: olds for new, olds in seen.items() if len(olds) > 1}
