"""Whole-schedule transformations (pure): scaled emulation.

Scaled emulation (the plan's side: topologies/scaling.py): a run can divide all sizes by a
factor (keeping delays) so that a fast job runs on slower emulated links with the same ratio of
serialization to propagation
time; the factor is recorded in ``Schedule.meta["scale"]`` (multiplied with any earlier one).
"""

from __future__ import annotations

import dataclasses

from models.schedule import Burst, Collective, Gather, Op, Schedule, SendRecv, Timed
from workloads.aicb.build import scale_size

__all__ = ["scale_schedule"]


def scale_schedule(s: Schedule, factor: float) -> Schedule:
    """``s`` with every size divided by ``factor`` (>= 1; a non-zero size keeps >= 1 byte).

    Compute durations are unchanged. Raises ValueError for a factor below 1.
    """
    if factor < 1:
        raise ValueError(f"scale factor {factor} must be at least 1")
    if factor == 1:
        return s
    ops = tuple(_scale(op, factor) for op in s.ops)
    meta = {**s.meta, "scale": float(s.meta.get("scale", 1.0)) * factor}  # type: ignore[arg-type]
    return dataclasses.replace(s, ops=ops, meta=meta)


def _scale(op: Op, factor: float) -> Op:
    if isinstance(op, Collective | SendRecv):
        return dataclasses.replace(op, size_bytes=scale_size(op.size_bytes, factor))
    if isinstance(op, Gather):
        return dataclasses.replace(op, size_bytes=scale_size(op.size_bytes, factor),
                                   down_bytes=scale_size(op.down_bytes, factor))
    if isinstance(op, Burst):
        flows = tuple(dataclasses.replace(f, size_bytes=scale_size(f.size_bytes, factor))
                      for f in op.flows)
        return dataclasses.replace(op, flows=flows)
    if isinstance(op, Timed):
        msgs = tuple(dataclasses.replace(m, size_bytes=scale_size(m.size_bytes, factor))
                     for m in op.messages)
        return dataclasses.replace(op, messages=msgs)
    return op
