"""Ring algorithms: all-reduce, reduce-scatter, all-gather, pipelined broadcast and reduce.

Sources: Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 69(2), 2009 (ring all-reduce = reduce-scatter + all-gather, 2(n-1) steps of
S/n); NCCL documentation, "Collective Operations" and the ring algorithm of NCCL's
src/device/all_reduce.h (the same step order, pipelined in chunks); Thakur, Rabenseifner and
Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005,
section 4 (ring all-gather, (n-1)/n x S per rank).

Chunk c of the buffer starts at rank c; in step s of the reduce-scatter rank r sends chunk
(r - s) mod n to r+1 and receives chunk (r - s - 1) mod n from r-1; every send after the first
forwards what the previous receive brought (it depends on it). With ``chunk_bytes`` each
segment is cut into pieces and piece j of step s+1 waits only for piece j of step s (pipeline).
"""

from __future__ import annotations

from traffic_gen.algorithms.steps import Plan, PlanBuilder, pieces, split_bytes

__all__ = ["ring_all_reduce", "ring_reduce_scatter", "ring_all_gather", "ring_broadcast",
           "ring_reduce"]


def _ring_pass(b: PlanBuilder, parts: list[int], chunk_bytes: int | None, first: int,
               steps: int, tag: str, prev: dict[int, list[int | None]]) -> dict[int, list]:
    """``steps`` ring steps; at step s rank r sends chunk (r + first - s) mod n. ``prev`` maps
    rank -> indices of the pieces it received last (the data its first send forwards)."""
    n = b.n
    for s in range(steps):
        sent: dict[int, list[int]] = {}
        for r in range(n):
            send_chunk = (r + first - s) % n
            before = prev.get(r, [])
            sent[r] = [b.send(r, (r + 1) % n, k, [before[j] if j < len(before) else None],
                              f"{tag}{s}")
                       for j, k in enumerate(pieces(parts[send_chunk], chunk_bytes))]
        got: dict[int, list[int | None]] = {}
        for r in range(n):
            recv_chunk = (r - 1 + first - s) % n
            got[r] = [b.recv(r, (r - 1) % n, k, (), f"{tag}{s}")
                      for k in pieces(parts[recv_chunk], chunk_bytes)]
        prev = got
    return prev


def ring_all_reduce(n: int, size_bytes: int, chunk_bytes: int | None = None) -> Plan:
    """Ring all-reduce: reduce-scatter then all-gather, 2(n-1) steps of about S/n each; every
    rank sends 2(n-1)/n x S bytes (Patarasuk and Yuan 2009)."""
    b = PlanBuilder(n)
    parts = split_bytes(size_bytes, n)
    last = _ring_pass(b, parts, chunk_bytes, 0, n - 1, "rs", {})
    # after the reduce-scatter rank r holds the reduced chunk (r + 1) mod n
    _ring_pass(b, parts, chunk_bytes, 1, n - 1, "ag", last)
    return b.plan()


def ring_reduce_scatter(n: int, size_bytes: int, chunk_bytes: int | None = None) -> Plan:
    """Ring reduce-scatter of a full buffer of ``size_bytes``: n-1 steps of S/n, (n-1)/n x S
    sent per rank (MPICH; Thakur et al. 2005)."""
    b = PlanBuilder(n)
    _ring_pass(b, split_bytes(size_bytes, n), chunk_bytes, 0, n - 1, "rs", {})
    return b.plan()


def ring_all_gather(n: int, size_bytes: int, chunk_bytes: int | None = None) -> Plan:
    """Ring all-gather of a gathered buffer of ``size_bytes`` (rank r owns chunk r): n-1 steps,
    (n-1)/n x S sent per rank (Thakur et al. 2005, section 4.1)."""
    b = PlanBuilder(n)
    _ring_pass(b, split_bytes(size_bytes, n), chunk_bytes, 0, n - 1, "ag", {})
    return b.plan()


def _pipeline(n: int, size_bytes: int, chunk_bytes: int | None, order: list[int],
              tag: str) -> Plan:
    b = PlanBuilder(n)
    chunks = pieces(size_bytes, chunk_bytes)
    for pos, r in enumerate(order):
        got = [b.recv(r, order[pos - 1], k, (), tag) if pos > 0 else None for k in chunks]
        if pos + 1 < len(order):
            for j, k in enumerate(chunks):
                b.send(r, order[pos + 1], k, [got[j]], tag)
    return b.plan()


def ring_broadcast(n: int, size_bytes: int, chunk_bytes: int | None = None,
                   root: int = 0) -> Plan:
    """Pipelined ring (chain) broadcast from ``root``: the buffer travels root -> root+1 ->
    ... in pieces of ``chunk_bytes``; each rank but the last forwards S bytes (NCCL's ring
    broadcast, NCCL docs "Collective Operations")."""
    return _pipeline(n, size_bytes, chunk_bytes, [(root + i) % n for i in range(n)], "bcast")


def ring_reduce(n: int, size_bytes: int, chunk_bytes: int | None = None, root: int = 0) -> Plan:
    """Pipelined ring (chain) reduce to ``root``: root+1 -> root+2 -> ... -> root, each rank
    forwarding the partial sum in pieces; each rank but the root sends S (NCCL's ring reduce)."""
    order = [(root + i) % n for i in range(1, n)] + [root]
    return _pipeline(n, size_bytes, chunk_bytes, order, "reduce")
