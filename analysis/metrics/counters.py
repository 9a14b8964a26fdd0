"""Reading cumulative kernel counters (models/counter_columns.py, and the runner's
``counters_end.json`` snapshots) as differences over time windows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

__all__ = ["ROOT_PARENTS", "SEGMENTER", "root_qdiscs", "window_delta", "snapshot_qdiscs",
           "snapshot_delta"]

# how a root qdisc's parent is spelt: pyroute2's TC_H_ROOT (0xffffffff) or tc's word
ROOT_PARENTS = ("root", "ffff:ffff", "ffffffff", "4294967295")
# a netem delay line's drops are its configured random loss, not queue overflow
NOT_QUEUES = ("netem", "noqueue", "ingress", "clsact")
# the segmenter above a buffer given in packets (testbed/tc/qdiscs/tbf.py): it cuts a GSO packet
# into segments and hands them to the buffer one by one, counting each segment the buffer
# drops (net/sched/sch_tbf.c tbf_segment); the root HTB sees one packet go in and counts no
# drop unless every segment was dropped, and then one. So where a segmenter sits, its drops
# are the interface's.
SEGMENTER = "tbf"


def root_qdiscs(qdisc: pd.DataFrame) -> pd.DataFrame:
    """The samples of each interface's root qdisc, without delay lines (netem) and
    queue-less qdiscs. A classful root (htb) counts its children's drops and packets
    (net/sched/sch_htb.c htb_enqueue/htb_dequeue), so roots alone count each packet once;
    where a segmenter sits below the root, the root's ``drops`` are the segmenter's (see
    :data:`SEGMENTER`)."""
    if qdisc.empty:
        return qdisc
    keep = qdisc["parent"].astype(str).str.lower().isin(ROOT_PARENTS) & \
        ~qdisc["kind"].isin(NOT_QUEUES)
    roots = qdisc[keep]
    seg = qdisc[qdisc["kind"] == SEGMENTER]
    if seg.empty:
        return roots
    key = ["t_s", "node", "ifname"]
    seg_drops = seg.drop_duplicates(key).set_index(key)["drops"]
    found = seg_drops.reindex(pd.MultiIndex.from_frame(roots[key])).to_numpy()
    roots = roots.copy()
    roots["drops"] = roots["drops"].where(pd.isna(found), found).astype(roots["drops"].dtype)
    return roots


def _at(series: pd.DataFrame, t: float, before: bool) -> pd.Series | None:
    """The last sample at or before ``t`` (before=True) or the first at or after it."""
    side = series[series["t_s"] <= t] if before else series[series["t_s"] >= t]
    if side.empty:
        return None
    return side.iloc[-1] if before else side.iloc[0]


def window_delta(series: pd.DataFrame, t0: float, t1: float,
                 columns: tuple[str, ...], not_before_s: float | None = None
                 ) -> dict[str, float] | None:
    """Increase of cumulative ``columns`` of one object's samples (sorted by ``t_s``) over
    [t0, t1]: the last sample at or before t0 (else the first sample) to the first at or after
    t1 (else the last), plus ``"t_end_s"``, the time of that last sample. None when there are
    no samples. Samples are discrete, so the window is widened to the enclosing samples (by at
    most one sampling interval at each end); ``not_before_s`` (the previous window's
    ``t_end_s`` on this object) keeps the widening from reaching back into that window, so
    that consecutive windows never count one interval twice."""
    if series.empty:
        return None
    a = _at(series, t0, before=True)
    if not_before_s is not None and (a is None or a["t_s"] < not_before_s):
        a = _at(series, not_before_s, before=False)
    b = _at(series, t1, before=False)
    a = series.iloc[0] if a is None else a
    b = series.iloc[-1] if b is None else b
    if b["t_s"] < a["t_s"]:
        b = a
    return {**{c: float(b[c] - a[c]) for c in columns}, "t_end_s": float(b["t_s"])}


def snapshot_qdiscs(snap: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(node, ifname, qdisc) for the root queue of each interface in a ``counters_end.json``
    snapshot (testbed.lab.state.describe), same selection (and segmenter drops) as
    :func:`root_qdiscs`."""
    for node, info in (snap.get("nodes") or {}).items():
        for iface in info.get("interfaces") or []:
            qs = iface.get("qdiscs") or []
            seg = next((q for q in qs if q.get("kind") == SEGMENTER), None)
            for q in qs:
                if str(q.get("parent")).lower() in ROOT_PARENTS and q.get("kind") not in \
                        NOT_QUEUES:
                    yield node, iface["ifname"], q if seg is None else {
                        **q, "drops": seg.get("drops", q.get("drops"))}


def snapshot_delta(snaps: list[dict[str, Any]], index: int) -> dict[tuple[str, str], dict]:
    """Per (node, ifname): root-queue ``packets`` and ``drops`` added during workload
    ``index`` (its snapshot minus the previous workload's; the lab is fresh at the first)."""
    def table(snap: dict[str, Any]) -> dict[tuple[str, str], dict]:
        return {(n, i): q for n, i, q in snapshot_qdiscs(snap)}
    now = table(snaps[index])
    before = table(snaps[index - 1]) if index > 0 else {}
    return {k: {c: q.get(c, 0) - before.get(k, {}).get(c, 0) for c in ("packets", "drops")}
            for k, q in now.items()}
