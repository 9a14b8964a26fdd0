"""All-reduce on a 2D torus with a ring per dimension (the 2D all-reduce of Ying et al.,
"Image classification at supercomputer scale", arXiv:1811.06992, 2018, section 3.2).

The group is a grid of ``rows`` of equal length X, given by each rank's row label (``sites``:
the torus generator labels every host with its row, topologies/generators/torus.py); within a
row ranks are in group order, so rank k of a row sends to rank k+1 (its neighbour along the
row, the last to the first over the wrap-around link). Three phases:

1. ring reduce-scatter along every row: S/X pieces, (X-1)/X x S on each row link;
2. ring all-reduce along every column (ranks with the same index in their row) of the piece
   each holds: 2(Y-1)/Y x S/X on each column link (Y rows);
3. ring all-gather along every row: (X-1)/X x S on each row link.

So each directed row link (k -> k+1) carries 2(X-1)/X x S and each directed column link
2(Y-1)/(X Y) x S, against 2(n-1)/n x S on every hop of one flat ring over all n = X Y ranks.
The phases are those of :func:`traffic_gen.algorithms.hierarchical.hierarchical_all_reduce`
with rows as sub-groups.
"""

from __future__ import annotations

from collections.abc import Sequence

from traffic_gen.algorithms.hierarchical import HierarchyError, hierarchical_all_reduce
from traffic_gen.algorithms.steps import Plan

__all__ = ["torus_2d_all_reduce", "link_bytes_2d"]


def torus_2d_all_reduce(n: int, size_bytes: int, chunk_bytes: int | None,
                        rows: Sequence[str]) -> Plan:
    """The 2D-torus all-reduce of ``size_bytes`` over ``n`` ranks whose row labels are
    ``rows``; raises HierarchyError when the rows differ in length or there is one row."""
    lengths = sorted({list(rows).count(r) for r in set(rows)})
    if len(set(rows)) < 2 or len(lengths) != 1:
        raise HierarchyError(f"torus_2d needs at least 2 rows of equal length; got rows of "
                             f"lengths {lengths}")
    return hierarchical_all_reduce(n, size_bytes, chunk_bytes, rows)


def link_bytes_2d(x: int, y: int, size_bytes: int) -> tuple[float, float]:
    """Closed-form bytes on one directed (row link, column link) of an x-by-y torus."""
    return 2 * (x - 1) / x * size_bytes, 2 * (y - 1) / (x * y) * size_bytes
