"""Point-to-point traffic patterns as Schedule ops (pure builders).

* incast: the classic experiment of Phanishayee et al., "Measurement and Analysis of TCP
  Throughput Collapse in Cluster-based Storage Systems", FAST 2008, and Vasudevan et al.,
  "Safe and Effective Fine-grained TCP Retransmissions for Datacenter Communication",
  SIGCOMM 2009: N synchronized senders each return a block of B bytes to one receiver; the
  next round starts after the previous one (here: after ``gap_s``).
* one-to-many (fan-out), permutation (every rank sends to exactly one other and receives from
  exactly one, a seeded random derangement), all-pairs (every ordered pair).

UDP flows carry ``rate_bps`` pacing and sequence numbers (see traffic_gen/udp.py).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from models.schedule import Burst, Flow, Group, Op, Protocol, Schedule

__all__ = ["incast", "one_to_many", "permutation", "all_pairs", "pattern_schedule"]


def _flow(src: int, dst: int, size_bytes: int, protocol: Protocol, rate_bps: int | None) -> Flow:
    return Flow(src, dst, size_bytes, protocol, rate_bps)


def incast(senders: Sequence[int], receiver: int, block_bytes: int, repeats: int = 1,
           gap_s: float = 0.0, protocol: Protocol = "tcp", rate_bps: int | None = None,
           label: str = "incast") -> tuple[Op, ...]:
    """``repeats`` bursts of len(senders) flows of ``block_bytes`` to ``receiver``, separated
    by ``gap_s`` of idle time: burst k > 0 starts ``gap_s`` after burst k - 1's last byte
    arrived (``Burst.after_s``; so bursts start gap + burst duration apart). Raises
    ValueError when the receiver is among the senders or repeats < 1."""
    if receiver in senders:
        raise ValueError(f"incast receiver {receiver} is also a sender")
    if repeats < 1:
        raise ValueError("incast needs at least one repeat")
    if gap_s < 0:
        raise ValueError("incast gap cannot be negative")
    flows = tuple(_flow(s, receiver, block_bytes, protocol, rate_bps) for s in senders)
    return tuple(Burst(flows, label, after_s=gap_s if k else 0.0) for k in range(repeats))


def one_to_many(src: int, dsts: Sequence[int], size_bytes: int, protocol: Protocol = "tcp",
                rate_bps: int | None = None, label: str = "one_to_many") -> tuple[Op, ...]:
    """One burst: ``src`` sends ``size_bytes`` to each of ``dsts`` at once."""
    return (Burst(tuple(_flow(src, d, size_bytes, protocol, rate_bps) for d in dsts), label),)


def permutation(ranks: Sequence[int], size_bytes: int, seed: int = 0,
                protocol: Protocol = "tcp", rate_bps: int | None = None,
                label: str = "permutation") -> tuple[Op, ...]:
    """One burst over a random derangement of ``ranks`` drawn with ``random.Random(seed)``
    (Sattolo's algorithm: a single cycle, so nobody sends to itself)."""
    order = list(ranks)
    rng = random.Random(seed)
    for i in range(len(order) - 1, 0, -1):  # Sattolo (1986)
        j = rng.randrange(i)
        order[i], order[j] = order[j], order[i]
    dst = dict(zip(ranks, order, strict=True))
    return (Burst(tuple(_flow(r, dst[r], size_bytes, protocol, rate_bps) for r in ranks),
                  label),)


def all_pairs(ranks: Sequence[int], size_bytes: int, protocol: Protocol = "tcp",
              rate_bps: int | None = None, label: str = "all_pairs") -> tuple[Op, ...]:
    """One burst with a flow for every ordered pair of distinct ``ranks``."""
    return (Burst(tuple(_flow(a, b, size_bytes, protocol, rate_bps)
                        for a in ranks for b in ranks if a != b), label),)


def pattern_schedule(name: str, world_size: int, ops: Sequence[Op],
                     iterations: int = 1) -> Schedule:
    """Wrap pattern ops in a Schedule with one group ``all`` of every rank."""
    group = Group("all", "p2p", tuple(range(world_size)))
    return Schedule(name, world_size, {"all": group}, tuple(ops), iterations=iterations)
