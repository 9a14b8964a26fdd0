"""Recursive halving-doubling all-reduce (Rabenseifner's algorithm), as MPICH implements it.

Source: Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 19(1), 2005, section 4.4 and Fig. 8; MPICH src/mpi/coll/allreduce/
allreduce_intra_reduce_scatter_allgather.c. A reduce-scatter by recursive halving (step k
exchanges half of the current window with the partner at distance 2^k) is followed by an
all-gather by recursive doubling in the reverse order. With pof2 the largest power of two
<= n and rem = n - pof2, MPICH first folds the extra ranks in: among the first 2*rem ranks each
even rank sends its whole buffer to rank+1 and sits out; at the end every odd rank of them sends
the result back to rank-1. A participating rank sends 2 x (pof2-1)/pof2 x S bytes; folded
ranks send S each (and the odd partners S more).
"""

from __future__ import annotations

from traffic_gen.algorithms.steps import Plan, PlanBuilder, pieces

__all__ = ["halving_doubling_all_reduce"]


def _fold(n: int) -> tuple[int, int]:
    pof2 = 1
    while pof2 * 2 <= n:
        pof2 *= 2
    return pof2, n - pof2


def _real(newrank: int, rem: int) -> int:
    """MPICH: new rank -> group rank (new ranks < rem are the odd ranks 1, 3, ...)."""
    return newrank * 2 + 1 if newrank < rem else newrank + rem


def _exchange(b: PlanBuilder, r: int, dst: int, send_b: int, recv_b: int, deps: list[int | None],
              chunk: int | None, tag: str) -> list[int | None]:
    for k in pieces(send_b, chunk):
        b.send(r, dst, k, deps, tag)
    return [b.recv(r, dst, k, (), tag) for k in pieces(recv_b, chunk)]


def _participant(b: PlanBuilder, r: int, newrank: int, pof2: int, rem: int, size: int,
                 chunk: int | None, deps: list[int | None]) -> list[int | None]:
    windows = []
    lo, hi, mask = 0, size, 1
    while mask < pof2:  # reduce-scatter by recursive halving
        dst = _real(newrank ^ mask, rem)
        mid = lo + (hi - lo) // 2
        low = newrank < (newrank ^ mask)
        keep, give = ((lo, mid), (mid, hi)) if low else ((mid, hi), (lo, mid))
        deps = _exchange(b, r, dst, give[1] - give[0], keep[1] - keep[0], deps, chunk, f"rs{mask}")
        windows.append((mask, dst, keep, give))
        lo, hi = keep
        mask <<= 1
    for m, dst, keep, give in reversed(windows):  # all-gather by recursive doubling
        deps = _exchange(b, r, dst, keep[1] - keep[0], give[1] - give[0], deps, chunk, f"ag{m}")
    return deps


def halving_doubling_all_reduce(n: int, size_bytes: int, chunk_bytes: int | None = None) -> Plan:
    """Rabenseifner all-reduce of ``size_bytes`` over ``n`` ranks (any n >= 1; see the module
    docstring for the non-power-of-two folding, after MPICH)."""
    b = PlanBuilder(n)
    pof2, rem = _fold(n)
    for r in range(n):
        deps: list[int | None] = []
        if r < 2 * rem and r % 2 == 0:
            for k in pieces(size_bytes, chunk_bytes):
                b.send(r, r + 1, k, (), "fold")
            for k in pieces(size_bytes, chunk_bytes):
                b.recv(r, r + 1, k, (), "unfold")
            continue
        if r < 2 * rem:
            deps = [b.recv(r, r - 1, k, (), "fold") for k in pieces(size_bytes, chunk_bytes)]
        newrank = r // 2 if r < 2 * rem else r - rem
        deps = _participant(b, r, newrank, pof2, rem, size_bytes, chunk_bytes, deps)
        if r < 2 * rem:
            for k in pieces(size_bytes, chunk_bytes):
                b.send(r, r - 1, k, deps, "unfold")
    return b.plan()
