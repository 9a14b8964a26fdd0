"""TBF (sch_tbf): probed and reported by ``aitb doctor`` only; no recipe builds it yet.

To use it as a rate limiter, give it ``words``/``options``/``problems`` like
:mod:`testbed.qdiscs.htb` and a place in :func:`testbed.tc.direction_recipe`.
"""

from __future__ import annotations

from typing import Any

from testbed.qdiscs.common import no_options, no_problems, no_stats, no_words

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "words", "options", "problems", "stats"]

KINDS = ("tbf",)
CAPABILITIES = ("tbf",)
KMODS = ("sch_tbf",)
NLA: dict[str, Any] = {}

words, options, problems, stats = no_words, no_options, no_problems, no_stats
