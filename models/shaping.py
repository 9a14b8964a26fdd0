"""Per-direction link shaping, resolved to numbers (the file form with unit strings lives in
topologies/). One :class:`Shaping` describes what one direction of one link does.

Where each part is realised (see testbed/tc/recipe.py): the rate limiter and the bottleneck buffer
(with the AQM) sit on the sending interface's egress; the delay line (delay, jitter, loss,
reorder, duplicate, corrupt; netem) sits after it on the receiving side, so the configured
buffer is the only place where queueing drops happen.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from models.units import BufferSize, UnitError

__all__ = ["GilbertElliott", "Shaping", "JitterDistribution", "Aqm", "AQMS", "JITTER_DISTRIBUTIONS",
           "refused_key"]

# each name list is spelled once, in its Literal; the tuples are read from it
JitterDistribution = Literal["uniform", "normal", "pareto", "paretonormal"]
JITTER_DISTRIBUTIONS: tuple[str, ...] = get_args(JitterDistribution)
Aqm = Literal["fifo", "head_drop", "red", "fq_codel"]  # an AQM's module: testbed/tc/qdiscs/
AQMS: tuple[str, ...] = get_args(Aqm)


@dataclass(frozen=True, slots=True)
class GilbertElliott:
    """Gilbert-Elliott burst loss, netem's ``loss gemodel p r 1-h 1-k`` (all in percent).

    p_pct: P(good -> bad); r_pct: P(bad -> good); bad_loss_pct (netem's 1-h): loss in the bad
    state; good_loss_pct (netem's 1-k): loss in the good state. Source: netem(8), "loss
    gemodel"; Gilbert (1960), Elliott (1963).
    """

    p_pct: float
    r_pct: float = 100.0
    bad_loss_pct: float = 100.0
    good_loss_pct: float = 0.0

    def __post_init__(self) -> None:
        for name in ("p_pct", "r_pct", "bad_loss_pct", "good_loss_pct"):
            value = getattr(self, name)
            if not 0 <= value <= 100:
                raise UnitError(f"{name} {value} is outside 0 to 100 percent")

    def mean_loss_pct(self) -> float:
        """Stationary loss rate in percent: pi_bad*(1-h) + pi_good*(1-k), pi_bad = p/(p+r)."""
        if self.p_pct + self.r_pct == 0:
            return self.good_loss_pct
        pi_bad = self.p_pct / (self.p_pct + self.r_pct)
        return pi_bad * self.bad_loss_pct + (1 - pi_bad) * self.good_loss_pct


def _refused(key: str, message: str) -> UnitError:
    """A UnitError for a direction's settings, naming the file key (``rate``, ``jitter``,
    ``ecn``...) whose value the check refused (:func:`refused_key`), so that a file reader can
    point at the layer that set it."""
    exc = UnitError(message)
    exc.shaping_key = key  # type: ignore[attr-defined]
    return exc


def refused_key(exc: UnitError) -> str | None:
    """The file key a :class:`Shaping` check refused (``ecn`` for ecn without a marking AQM),
    or None when ``exc`` came from elsewhere."""
    return getattr(exc, "shaping_key", None)


@dataclass(frozen=True, slots=True)
class Shaping:
    """What one direction of a link does; every field's unit is in its name.

    rate_bps: line rate in bit/s (64-bit), ``None`` for unshaped (veth speed).
    buffer: bottleneck queue limit (packets or bytes) at the rate limiter; ``None`` means the
      kernel's default (1000 packets, like a txqueuelen).
    aqm: ``fifo`` (tail drop), ``head_drop`` (drop the oldest), ``red`` or ``fq_codel`` where
      the kernel has them; ``ecn`` marks
      instead of dropping with red/fq_codel.
    ecn_threshold: DCTCP's marking threshold K (packets or bytes) on a ``fifo`` buffer with
      ``ecn``: an ECN-capable packet that finds more than K queued on arrival is marked CE
      (testbed/tc/ecn_marker.py; needs a rate, the queue's drain). ``None``: no such marking.
    delay_s, jitter_s, jitter_distribution, delay_correlation_pct: the delay line (netem).
    jitter_reorder: ``False`` (default): jitter keeps the direction's FIFO order, a packet
      leaves no earlier than the one before it (as a real path, which jitters without
      reordering a flow); ``True``: every packet leaves at its own arrival + drawn delay, so a
      later packet with a smaller draw passes an earlier one (netem's behaviour without a
      ``rate``). No effect without jitter. ``reorder_pct`` reorders in either case.
    loss_pct (random) or loss_gemodel (burst), reorder_pct (needs delay_s > 0), duplicate_pct,
      corrupt_pct: netem impairments on the delay line.
    """

    rate_bps: int | None = None
    buffer: BufferSize | None = None
    aqm: Aqm = "fifo"
    ecn: bool = False
    ecn_threshold: BufferSize | None = None
    delay_s: float = 0.0
    jitter_s: float = 0.0
    jitter_distribution: JitterDistribution = "normal"
    jitter_reorder: bool = False
    delay_correlation_pct: float = 0.0
    loss_pct: float = 0.0
    loss_gemodel: GilbertElliott | None = None
    reorder_pct: float = 0.0
    duplicate_pct: float = 0.0
    corrupt_pct: float = 0.0

    def __post_init__(self) -> None:
        if self.rate_bps is not None and not 0 < self.rate_bps < 2**64:
            raise _refused("rate", f"rate_bps {self.rate_bps} must be between 1 and 2**64-1")
        if self.delay_s < 0 or self.jitter_s < 0:
            raise _refused("delay" if self.delay_s < 0 else "jitter",
                           "delay and jitter cannot be negative")
        for name in ("loss_pct", "reorder_pct", "duplicate_pct", "corrupt_pct",
                     "delay_correlation_pct"):
            value = getattr(self, name)
            if not 0 <= value <= 100:
                raise _refused(name.removesuffix("_pct"),
                               f"{name} {value} is outside 0% to 100%")
        if self.loss_pct and self.loss_gemodel is not None:
            raise _refused("loss_gemodel", "give either random loss or a Gilbert-Elliott model, "
                           "not both")
        if self.jitter_s > self.delay_s:
            raise _refused("jitter", f"jitter {self.jitter_s}s exceeds delay {self.delay_s}s")
        if self.reorder_pct and self.delay_s == 0:
            raise _refused("reorder", "reorder needs a delay: netem reorders by sending some "
                           "packets early")
        if self.aqm not in AQMS:
            raise _refused("aqm", f"unknown aqm {self.aqm!r}; known: {', '.join(AQMS)}")
        if self.ecn_threshold is not None:
            if not self.ecn:
                raise _refused("ecn_threshold", "ecn_threshold (the queue that marks) needs "
                               "ecn: true")
            if self.aqm != "fifo":
                raise _refused("ecn_threshold", f"ecn_threshold marks on a fifo buffer; aqm "
                               f"{self.aqm} has its own marking or none")
            if self.rate_bps is None:
                raise _refused("ecn_threshold", "ecn_threshold needs a rate (the queue drains "
                               "at it)")
        elif self.ecn and self.aqm in ("fifo", "head_drop"):
            raise _refused("ecn", f"ecn needs an AQM that marks (red or fq_codel), or an "
                           f"ecn_threshold (K) on a fifo, not {self.aqm} alone")
        if self.jitter_distribution not in JITTER_DISTRIBUTIONS:
            raise _refused("jitter_distribution", f"unknown jitter distribution "
                           f"{self.jitter_distribution!r}; "
                           f"known: {', '.join(JITTER_DISTRIBUTIONS)}")

    @property
    def needs_netem(self) -> bool:
        """True when this direction needs a delay line (netem): delay or any impairment."""
        return bool(self.delay_s or self.jitter_s or self.loss_pct or self.loss_gemodel
                    or self.reorder_pct or self.duplicate_pct or self.corrupt_pct)

    @property
    def is_shaped(self) -> bool:
        """True when anything differs from an unshaped veth."""
        return self.rate_bps is not None or self.buffer is not None or self.aqm != "fifo" \
            or self.needs_netem

    def with_changes(self, **changes: object) -> Shaping:
        """A copy with some fields replaced (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]
