"""Background traffic: flows with published data-centre sizes at Poisson arrivals (pure).

Flow sizes are drawn from an empirical CDF (workloads/data/flow_sizes.yaml: ``websearch``,
Alizadeh et al., DCTCP, SIGCOMM 2010; ``datamining``, Greenberg et al., VL2, SIGCOMM 2009) by
inverse transform sampling with linear interpolation between the CDF points. Flows arrive as
a Poisson process whose rate makes the offered load on a link of ``link_rate_bps`` equal
``load``:

    lambda = load x link_rate_bps / (8 x E[S])     (flows per second; E[S] in bytes)

i.e. utilisation rho = lambda E[S] / C (Kleinrock, "Queueing Systems, Vol. 1", 1975, M/G/1),
the way flow-level data-centre studies set their load (Alizadeh et al., "pFabric", SIGCOMM
2013, section 5: Poisson flow arrivals, load varied through the arrival rate). Each flow goes
from a uniformly drawn sender to a uniformly drawn receiver (never itself).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ruamel.yaml import YAML

from models.schedule import Message, Schedule, Timed

__all__ = ["FlowSizeCdf", "DISTRIBUTIONS", "load_cdf", "arrival_rate_per_s",
           "offered_load_cv", "background_schedule", "BackgroundParams"]

_DATA = Path(__file__).with_name("data") / "flow_sizes.yaml"
DISTRIBUTIONS = ("websearch", "datamining")


@dataclass(frozen=True)
class FlowSizeCdf:
    """An empirical CDF: ``sizes_bytes`` ascending, ``probs`` from 0 to 1 (same length),
    divided by ``scale`` (scaled emulation; a flow keeps at least 1 byte)."""

    name: str
    sizes_bytes: tuple[float, ...]
    probs: tuple[float, ...]
    source: str
    scale: float = 1.0

    def sample(self, rng: random.Random) -> int:
        """One flow size (bytes): inverse transform, linear between points."""
        u = rng.random()
        i = max(1, bisect.bisect_left(self.probs, u))
        p0, p1 = self.probs[i - 1], self.probs[i]
        x0, x1 = self.sizes_bytes[i - 1], self.sizes_bytes[i]
        x = x0 if p1 == p0 else x0 + (x1 - x0) * (u - p0) / (p1 - p0)
        return max(1, round(x / self.scale))

    def _moment(self, k: int) -> float:
        total = 0.0
        for i in range(1, len(self.probs)):
            w = self.probs[i] - self.probs[i - 1]
            a, b = self.sizes_bytes[i - 1] / self.scale, self.sizes_bytes[i] / self.scale
            # E[X^k] of the uniform on [a, b]: (b^(k+1) - a^(k+1)) / ((k+1)(b - a))
            total += w * (a ** k if a == b else (b ** (k + 1) - a ** (k + 1)) / ((k + 1) * (b - a)))
        return total

    @property
    def mean_bytes(self) -> float:
        """E[S] (bytes) of the interpolated distribution (before rounding to whole bytes)."""
        return self._moment(1)

    @property
    def second_moment_bytes2(self) -> float:
        """E[S^2] (bytes squared)."""
        return self._moment(2)


@cache
def _table() -> dict:
    return YAML(typ="safe").load(_DATA.read_text(encoding="utf-8"))


def load_cdf(name: str, scale: float = 1.0) -> FlowSizeCdf:
    """The named distribution (``websearch`` or ``datamining``) with sizes divided by
    ``scale`` (>= 1). Raises ValueError for an unknown name (listing the known ones)."""
    if name not in DISTRIBUTIONS:
        raise ValueError(f"unknown flow-size distribution {name!r}; known: "
                         f"{', '.join(DISTRIBUTIONS)}")
    d = _table()[name]
    unit = float(d["unit_bytes"])
    return FlowSizeCdf(name, tuple(p[0] * unit for p in d["points"]),
                       tuple(float(p[1]) for p in d["points"]), d["source"], scale)


def arrival_rate_per_s(load: float, link_rate_bps: float, mean_bytes: float) -> float:
    """lambda = load x link_rate_bps / (8 x mean_bytes), flows per second (module docstring)."""
    return load * link_rate_bps / (8.0 * mean_bytes)


def offered_load_cv(cdf: FlowSizeCdf, rate_per_s: float, duration_s: float) -> float:
    """Coefficient of variation of the bytes offered in ``duration_s`` (a compound Poisson
    sum: mean lambda T E[S], variance lambda T E[S^2]): sqrt(E[S^2] / (lambda T)) / E[S]."""
    return math.sqrt(cdf.second_moment_bytes2 / (rate_per_s * duration_s)) / cdf.mean_bytes


@dataclass(frozen=True)
class BackgroundParams:
    """``distribution`` name, target ``load`` (0..1] of ``link_rate_bps`` (bit/s), flows
    arriving during ``duration_s`` (s), sizes divided by ``size_scale``; ``seed``."""

    distribution: str
    load: float
    link_rate_bps: float
    duration_s: float
    size_scale: float = 1.0
    seed: int = 0


def background_schedule(p: BackgroundParams, senders: Sequence[int],
                        receivers: Sequence[int], world_size: int,
                        name: str = "background") -> Schedule:
    """One Timed op (kind ``background``) of Poisson flows over ``duration_s``; ranks
    ``senders``/``receivers`` (a rank may be both; a flow never goes to itself).
    ``meta``: distribution, its source, mean size, lambda, flows, offered bytes.
    Raises ValueError for a load outside (0, 1], a non-positive duration or rate, or when no
    sender/receiver pair of distinct ranks exists."""
    if not 0 < p.load <= 1 or p.duration_s <= 0 or p.link_rate_bps <= 0:
        raise ValueError("load must lie in (0, 1], duration and link rate must be positive")
    if not any(s != r for s in senders for r in receivers):
        raise ValueError("background traffic needs a sender and a different receiver")
    cdf = load_cdf(p.distribution, p.size_scale)
    lam = arrival_rate_per_s(p.load, p.link_rate_bps, cdf.mean_bytes)
    rng = random.Random(p.seed)
    msgs, t = [], rng.expovariate(lam)
    while t < p.duration_s:
        src = rng.choice(senders)
        dst = rng.choice([r for r in receivers if r != src] or receivers)
        msgs.append(Message(src, dst, cdf.sample(rng), at_s=t, tag=f"bg{len(msgs)}"))
        t += rng.expovariate(lam)
    meta = {"kind": "background", "distribution": p.distribution, "source": cdf.source,
            "mean_flow_bytes": cdf.mean_bytes, "arrival_rate_per_s": lam, "load": p.load,
            "link_rate_bps": p.link_rate_bps, "duration_s": p.duration_s,
            "flows": len(msgs), "offered_bytes": sum(m.size_bytes for m in msgs),
            "seed": p.seed}
    op = Timed(tuple(msgs), label=name, kind="background", info=meta)
    return Schedule(name, world_size, {}, (op,), source="<background>", meta=meta)
