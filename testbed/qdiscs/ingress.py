"""The ingress qdisc (sch_ingress, handle ``ffff:``): where the u32 filter of
:mod:`testbed.qdiscs.u32` hooks the receiving interface. No parameters; probed at a lab's
bring-up (testbed.kernel), not listed by ``aitb doctor``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from testbed.qdiscs.common import TcLike

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "words", "options", "problems", "stats"]

KINDS = ("ingress",)
CAPABILITIES: tuple[str, ...] = ()
KMODS = ("sch_ingress",)
NLA: dict[str, Any] = {}


def words(o: TcLike) -> list[str]:
    """No parameters."""
    return []


def options(o: TcLike, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    """No options."""
    return None


def problems(o: TcLike, opts: Any) -> list[str]:
    """Readback compares the kind only."""
    return []


def stats(opts: Any) -> dict[str, Any]:
    """Nothing beyond the counters."""
    return {}
