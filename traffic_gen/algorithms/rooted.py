"""Gather (N-to-1 incast), scatter, dissemination barrier and point-to-point send/recv.

Sources: Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 19(1), 2005 (linear gather/scatter for long messages: every rank sends its S/n
block to the root at once, the incast pattern); Hensgen, Finkel and Manber, "Two algorithms for
barrier synchronization", IJPP 17(1), 1988 (dissemination barrier: ceil(log2 n) rounds, in round
k rank r signals (r + 2^k) mod n and waits for (r - 2^k) mod n), as in MPICH's
MPIR_Barrier_intra_dissemination.
"""

from __future__ import annotations

from traffic_gen.algorithms.steps import Plan, PlanBuilder, pieces, split_bytes

__all__ = ["linear_gather", "linear_scatter", "dissemination_barrier", "send_recv",
           "BARRIER_MESSAGE_BYTES"]

BARRIER_MESSAGE_BYTES = 1  # MPICH sends zero-byte messages; a TCP stream needs one byte


def linear_gather(n: int, size_bytes: int, chunk_bytes: int | None = None,
                  root: int = 0) -> Plan:
    """Every non-root sends its S/n block to ``root`` at once (incast of degree n-1)."""
    b = PlanBuilder(n)
    part = split_bytes(size_bytes, n)
    for r in range(n):
        if r == root:
            for src in range(n):
                if src != root:
                    for p in pieces(part[src], chunk_bytes):
                        b.recv(r, src, p, (), "gather")
        else:
            for p in pieces(part[r], chunk_bytes):
                b.send(r, root, p, (), "gather")
    return b.plan()


def linear_scatter(n: int, size_bytes: int, chunk_bytes: int | None = None,
                   root: int = 0) -> Plan:
    """``root`` sends block r (S/n) to every rank r at once."""
    b = PlanBuilder(n)
    part = split_bytes(size_bytes, n)
    for r in range(n):
        if r == root:
            for dst in range(n):
                if dst != root:
                    for p in pieces(part[dst], chunk_bytes):
                        b.send(r, dst, p, (), "scatter")
        else:
            for p in pieces(part[r], chunk_bytes):
                b.recv(r, root, p, (), "scatter")
    return b.plan()


def dissemination_barrier(n: int, size_bytes: int = 0, chunk_bytes: int | None = None) -> Plan:
    """ceil(log2 n) rounds of one-byte messages; round k+1 waits for round k's message."""
    b = PlanBuilder(n)
    for r in range(n):
        prev: list[int | None] = []
        dist = 1
        while dist < n:
            b.send(r, (r + dist) % n, BARRIER_MESSAGE_BYTES, prev, f"barrier{dist}")
            prev = [b.recv(r, (r - dist) % n, BARRIER_MESSAGE_BYTES, (), f"barrier{dist}")]
            dist <<= 1
    return b.plan()


def send_recv(size_bytes: int, chunk_bytes: int | None = None) -> Plan:
    """Two ranks: rank 0 sends ``size_bytes`` to rank 1 (a pipeline-stage hand-off)."""
    b = PlanBuilder(2)
    for p in pieces(size_bytes, chunk_bytes):
        b.send(0, 1, p, (), "p2p")
        b.recv(1, 0, p, (), "p2p")
    return b.plan()
