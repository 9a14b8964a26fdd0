"""Per-rank slowdown of compute phases (stragglers), deterministic for a given seed.

A factor multiplies the duration of a rank's compute op: 1 is nominal, 2 a rank twice as slow.
``fixed`` factors model a known slow worker; ``lognormal_sigma`` draws a factor exp(N(0,
sigma^2)) per rank and compute op (the heavy-tailed worker slowdowns reported by Dean and
Barroso, "The Tail at Scale", CACM 56(2), 2013), from ``random.Random(seed)``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["StragglerSpec", "SlowdownDraw"]


@dataclass(frozen=True, slots=True)
class StragglerSpec:
    """``fixed``: rank -> factor (> 0); ``lognormal_sigma``: None for none; ``seed``."""

    fixed: Mapping[int, float] = field(default_factory=dict)
    lognormal_sigma: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        bad = {r: f for r, f in self.fixed.items() if not f > 0}
        if bad:
            raise ValueError(f"straggler factors must be positive, got {bad}")
        if self.lognormal_sigma is not None and self.lognormal_sigma < 0:
            raise ValueError("lognormal_sigma cannot be negative")


class SlowdownDraw:
    """Draws factors in program order, so the same schedule and seed give the same factors."""

    def __init__(self, spec: StragglerSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)

    def factor(self, rank: int) -> float:
        """The slowdown factor of ``rank`` for its next compute op."""
        f = self.spec.fixed.get(rank, 1.0)
        if self.spec.lognormal_sigma:
            f *= math.exp(self.rng.gauss(0.0, self.spec.lognormal_sigma))
        return f
