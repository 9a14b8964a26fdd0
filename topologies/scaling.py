"""Scaled emulation: divide every rate and buffer (and ECN marking threshold) of a plan by a
factor and keep every delay, so a 100 Gbit/s DCI runs at 1 Gbit/s with the same ratio of
serialization time to propagation time. Sizes of the workload are divided by the same factor
(workloads.transform.scale_schedule), so a transfer takes as long as it would unscaled.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from models.plan import LabPlan, LinkPlan
from models.shaping import Shaping
from models.trace import LinkTrace
from models.units import BufferSize

__all__ = ["scale_plan", "scale_changes"]


def _buffer(buf: BufferSize | None, factor: float, mtu: int) -> BufferSize | None:
    if buf is None:
        return None
    if buf.packets is not None:
        return BufferSize(packets=max(1, math.ceil(buf.packets / factor)))
    return BufferSize(size_bytes=max(mtu + 14, math.ceil((buf.size_bytes or 0) / factor)))


def _shaping(s: Shaping, factor: float, mtu: int) -> Shaping:
    rate = None if s.rate_bps is None else max(1, round(s.rate_bps / factor))
    return dataclasses.replace(s, rate_bps=rate, buffer=_buffer(s.buffer, factor, mtu),
                               ecn_threshold=_buffer(s.ecn_threshold, factor, mtu))


def scale_changes(changes: dict[str, Any], factor: float, mtu: int) -> dict[str, Any]:
    """Shaping field ``changes`` (``rate_bps``, ``buffer``, ...) scaled like a plan's
    shaping: rate, buffer and ECN threshold divided by ``factor``, everything else kept."""
    out = dict(changes)
    if out.get("rate_bps") is not None:
        out["rate_bps"] = max(1, round(out["rate_bps"] / factor))
    for key in ("buffer", "ecn_threshold"):
        if key in out:
            out[key] = _buffer(out[key], factor, mtu)
    return out


def _link(lk: LinkPlan, factor: float) -> LinkPlan:
    return dataclasses.replace(lk, a_to_b=_shaping(lk.a_to_b, factor, lk.mtu),
                               b_to_a=_shaping(lk.b_to_a, factor, lk.mtu))


def _trace(tr: LinkTrace, factor: float) -> LinkTrace:
    return dataclasses.replace(tr, steps=tuple(
        s if s.rate_bps is None else dataclasses.replace(s, rate_bps=max(1, round(
            s.rate_bps / factor))) for s in tr.steps))


def scale_plan(plan: LabPlan, factor: float) -> LabPlan:
    """``plan`` with rates and buffers divided by ``factor`` (>= 1), delays and losses kept;
    the rate steps of its link traces are divided too.

    A packet-count buffer keeps its drain time (packets/factor, at least 1); a byte buffer is
    divided but never below one full-size frame (MTU + 14 bytes of Ethernet header). One
    divided below two 64 KiB GSO packets (4 MiB at scale 100: 41943 bytes) gets a segmenter
    that cuts GSO packets into frames before it (:func:`testbed.tc.qdiscs.tbf.segmented`), so it
    holds frames rather than refusing every GSO packet. Raises ValueError for a factor
    below 1.
    """
    if factor < 1:
        raise ValueError(f"scale factor {factor} must be at least 1")
    if factor == 1:
        return plan
    return dataclasses.replace(plan, links=tuple(_link(lk, factor) for lk in plan.links),
                               traces=tuple(_trace(tr, factor) for tr in plan.traces))
