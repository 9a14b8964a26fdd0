"""Tree algorithms: NCCL's double binary tree all-reduce, binomial broadcast and reduce.

Sources: Sanders, Speck and Träff, "Two-tree algorithms for full bandwidth broadcast, reduction
and scan", Parallel Computing 35(12), 2009 (two complementary binary trees, each carrying half
of the data); NCCL's construction of those trees, src/graph/trees.cc (``ncclGetBtree``: an
in-order binary tree rooted at 0 built from the lowest set bit of the rank; ``ncclGetDtree``:
the second tree mirrors the first when n is even and shifts it by one rank when n is odd), and
the NVIDIA blog "Massively Scale Your Deep Learning Training with NCCL 2.4" (2019): reduce up,
broadcast down, pipelined in chunks. Binomial trees: Thakur, Rabenseifner and Gropp,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005, section 4.
"""

from __future__ import annotations

from traffic_gen.algorithms.steps import Plan, PlanBuilder, pieces, split_bytes

__all__ = ["btree", "dtree", "double_binary_tree_all_reduce", "binomial_broadcast",
           "binomial_reduce"]

Tree = list[tuple[int, list[int]]]  # per rank: (parent or -1, children)


def _btree_node(n: int, rank: int) -> tuple[int, list[int]]:
    """Parent and children of ``rank`` in NCCL's ``ncclGetBtree`` (src/graph/trees.cc)."""
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, ([bit >> 1] if n > 1 else [])
    up = (rank ^ bit) | (bit << 1)
    if up >= n:
        up = rank ^ bit
    lowbit = bit >> 1
    down0 = -1 if lowbit == 0 else rank - lowbit
    down1 = -1 if lowbit == 0 else rank + lowbit
    while down1 >= n:
        down1 = -1 if lowbit == 0 else rank + lowbit
        lowbit >>= 1
    return up, [c for c in (down0, down1) if c != -1]


def btree(n: int) -> Tree:
    """NCCL's first tree over ranks 0..n-1."""
    return [_btree_node(n, r) for r in range(n)]


def dtree(n: int) -> tuple[Tree, Tree]:
    """NCCL's two trees (``ncclGetDtree``): the second is the mirror (n even) or the shift by
    one (n odd) of the first."""
    first = btree(n)
    if n % 2 == 0:
        def m(x: int) -> int:
            return n - 1 - x
    else:
        def m(x: int) -> int:
            return (x + 1) % n
    second: Tree = [(-1, [])] * n
    for r, (up, kids) in enumerate(first):
        second[m(r)] = (-1 if up == -1 else m(up), [m(c) for c in kids])
    return first, second


def _tree_all_reduce(b: PlanBuilder, tree: Tree, chunks: list[int], tag: str) -> None:
    """Reduce up the tree then broadcast down, piece by piece (pipelined)."""
    for k in chunks:
        reduced: dict[int, list[int]] = {}
        for r, (_, kids) in enumerate(tree):
            reduced[r] = [b.recv(r, c, k, (), f"{tag}up") for c in kids]
        for r, (up, _) in enumerate(tree):
            if up != -1:
                b.send(r, up, k, reduced[r], f"{tag}up")
        for r, (up, kids) in enumerate(tree):
            got = [b.recv(r, up, k, (), f"{tag}down")] if up != -1 else reduced[r]
            for c in kids:
                b.send(r, c, k, got, f"{tag}down")


def double_binary_tree_all_reduce(n: int, size_bytes: int,
                                  chunk_bytes: int | None = None) -> Plan:
    """All-reduce over NCCL's double binary tree: each tree reduces then broadcasts half of the
    buffer, in pieces of ``chunk_bytes``. A rank sends, per tree carrying S/2, S/2 to its parent
    (unless root) plus S/2 to each child; over all ranks 2(n-1) x S in total."""
    b = PlanBuilder(n)
    halves = split_bytes(size_bytes, 2)
    for t, tree in enumerate(dtree(n)):
        _tree_all_reduce(b, tree, pieces(halves[t], chunk_bytes), f"t{t}")
    return b.plan()


def binomial_broadcast(n: int, size_bytes: int, chunk_bytes: int | None = None,
                       root: int = 0) -> Plan:
    """Binomial-tree broadcast from ``root`` (MPICH MPIR_Bcast_intra_binomial): ceil(log2 n)
    rounds, (n-1) x S bytes in total."""
    b = PlanBuilder(n)
    for r in range(n):
        v = (r - root) % n
        mask, got = 1, []
        while mask < n:
            if v & mask:
                got = [b.recv(r, (r - mask) % n, k, (), "bcast")
                       for k in pieces(size_bytes, chunk_bytes)]
                break
            mask <<= 1
        mask >>= 1
        while mask > 0:
            if v + mask < n:
                for j, k in enumerate(pieces(size_bytes, chunk_bytes)):
                    b.send(r, (r + mask) % n, k, [got[j] if got else None], "bcast")
            mask >>= 1
    return b.plan()


def binomial_reduce(n: int, size_bytes: int, chunk_bytes: int | None = None,
                    root: int = 0) -> Plan:
    """Binomial-tree reduce to ``root`` (MPICH MPIR_Reduce_intra_binomial): each non-root
    sends S once, after receiving from all its children."""
    b = PlanBuilder(n)
    for r in range(n):
        v, mask, got = (r - root) % n, 1, []
        while mask < n:
            if not v & mask:
                if (v | mask) < n:
                    got += [b.recv(r, (r + mask) % n, k, (), "reduce")
                            for k in pieces(size_bytes, chunk_bytes)]
            else:
                for k in pieces(size_bytes, chunk_bytes):
                    b.send(r, (r - mask) % n, k, got, "reduce")
                break
            mask <<= 1
    return b.plan()
