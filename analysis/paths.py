"""Ideal-FCT parameters of a flow from the plan's routes (analysis-specific, on top of the one
route walk in models.paths: every ECMP path, L2 segments crossed, each hop's egress
shaping)."""

from __future__ import annotations

from models.paths import Hop, paths
from models.plan import LabPlan

__all__ = ["ideal_params"]


def ideal_params(plan: LabPlan, src_node: str, src_ip: str, dst_node: str,
                 dst_ip: str) -> tuple[int | None, float]:
    """The best path's bottleneck rate (bit/s; None if every path is unshaped) and the base
    RTT (s): the smallest sum of configured ``delay_s`` over a forward path plus the same over
    a reverse path (the ACKs' way back). With ECMP the highest bottleneck rate is taken, so an
    ideal built from it is a lower bound whatever path a flow was hashed to.

    Raises :class:`models.paths.PathError` as :func:`models.paths.paths` does."""
    fwd, rev = paths(plan, src_node, dst_ip), paths(plan, dst_node, src_ip)
    rates = [_bottleneck(p) for p in fwd]
    shaped = [r for r in rates if r is not None]
    rate = None if len(shaped) < len(rates) or not shaped else max(shaped)
    delay = min(_delay(p) for p in fwd) + min(_delay(p) for p in rev)
    return rate, delay


def _bottleneck(path: list[Hop]) -> int | None:
    rates = [h.shaping.rate_bps for h in path if h.shaping.rate_bps is not None]
    return min(rates) if rates else None


def _delay(path: list[Hop]) -> float:
    return sum(h.shaping.delay_s for h in path)
