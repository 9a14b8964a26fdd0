"""TBF (sch_tbf): probed and reported by ``aitb doctor`` only; no recipe builds it yet.

To use it as a rate limiter, give it ``words``/``options``/``problems`` like
:mod:`testbed.qdiscs.htb` and a place in :func:`testbed.tc.direction_recipe`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from testbed.qdiscs.common import TcLike

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "words", "options", "problems", "stats"]

KINDS = ("tbf",)
CAPABILITIES = ("tbf",)
KMODS = ("sch_tbf",)
NLA: dict[str, Any] = {}


def words(o: TcLike) -> list[str]:
    """No parameters (no recipe builds a tbf)."""
    return []


def options(o: TcLike, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    """No options (no recipe builds a tbf)."""
    return None


def problems(o: TcLike, opts: Any) -> list[str]:
    """Readback compares the kind only."""
    return []


def stats(opts: Any) -> dict[str, Any]:
    """Nothing beyond the counters."""
    return {}
