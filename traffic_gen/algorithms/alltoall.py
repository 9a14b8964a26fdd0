"""All-to-all: direct (every send posted at once) and pairwise exchange.

Source: Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 19(1), 2005, section 4.3: for long messages MPICH posts all sends and receives
at once (direct, MPIR_Alltoall_intra_scattered) or uses the pairwise exchange (n-1 steps; at
step k rank r sends to (r+k) mod n and receives from (r-k) mod n; a step starts after the
previous one completed). ``size_bytes`` is one rank's send buffer (nccl-tests convention), so
each peer gets S/n and a rank sends (n-1)/n x S.
"""

from __future__ import annotations

from traffic_gen.algorithms.steps import Plan, PlanBuilder, pieces, split_bytes

__all__ = ["direct_all_to_all", "pairwise_all_to_all"]


def direct_all_to_all(n: int, size_bytes: int, chunk_bytes: int | None = None) -> Plan:
    """All n-1 sends and receives of every rank start together (no dependencies)."""
    b = PlanBuilder(n)
    part = split_bytes(size_bytes, n)
    for r in range(n):
        for k in range(1, n):
            for p in pieces(part[(r + k) % n], chunk_bytes):
                b.send(r, (r + k) % n, p, (), "a2a")
        for k in range(1, n):
            for p in pieces(part[r], chunk_bytes):
                b.recv(r, (r - k) % n, p, (), "a2a")
    return b.plan()


def pairwise_all_to_all(n: int, size_bytes: int, chunk_bytes: int | None = None) -> Plan:
    """n-1 steps; step k: send S/n to (r+k) mod n, receive S/n from (r-k) mod n; step k+1
    waits for both halves of step k."""
    b = PlanBuilder(n)
    part = split_bytes(size_bytes, n)
    for r in range(n):
        prev: list[int | None] = []
        for k in range(1, n):
            dst, src = (r + k) % n, (r - k) % n
            sent = [b.send(r, dst, p, prev, f"a2a{k}") for p in pieces(part[dst], chunk_bytes)]
            got = [b.recv(r, src, p, prev, f"a2a{k}") for p in pieces(part[r], chunk_bytes)]
            prev = sent + got
    return b.plan()
