"""One snapshot of every qdisc's and interface's cumulative counters of a lab, as rows with
the columns of :mod:`models.counter_columns` (``counters/qdisc.parquet``,
``counters/links.parquet``). Two snapshots (before and after the workloads) let the fidelity
check measure loss when no counter sampler ran. Needs root; reads through netlink, changes
nothing."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from models.counter_columns import LINK_COLUMNS, QDISC_COLUMNS, columns
from testbed.lab.state import qdisc_stats
from testbed.lab.verify import dump_tc
from testbed.ns.links import RTM_GETLINK
from testbed.ns.nl import dump

if TYPE_CHECKING:
    from testbed.lab.lab import Lab

__all__ = ["snapshot", "QDISC_COLUMNS", "LINK_COLUMNS"]

_LINK_STATS = columns("links", read=True)


def _contract_handle(handle: str) -> str:
    """A qdisc handle as models/counter_columns.py spells it: ``"1:"``, not ``"1:0"``."""
    return handle[:-1] if handle.endswith(":0") else handle


def _node_rows(lab: Lab, node: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    sock = lab.node_io(node).sock
    names, links = {}, []
    t0 = time.time()
    answers = dump(sock, ifinfmsg(), RTM_GETLINK, f"node {node}")
    t1 = time.time()
    for m in answers:
        names[m["index"]] = name = m.get_attr("IFLA_IFNAME")
        st = m.get_attr("IFLA_STATS64") or {}
        links.append({"t_s": (t0 + t1) / 2, "t_err_s": (t1 - t0) / 2, "node": node,
                      "ifname": name, **{k: int(st.get(k, 0)) for k in _LINK_STATS}})
    qdiscs = []
    t0 = time.time()
    tc = dump_tc(sock, f"node {node}", sorted(names))
    t1 = time.time()
    t_s, t_err_s = (t0 + t1) / 2, (t1 - t0) / 2
    for (index, _, verb), m in tc.items():
        if verb != "qdisc" or index not in names:
            continue
        q = qdisc_stats(m)
        qdiscs.append({"t_s": t_s, "t_err_s": t_err_s, "node": node, "ifname": names[index],
                       "kind": q["kind"],
                       "handle": _contract_handle(q["handle"]), "parent": q["parent"],
                       "bytes": q.get("bytes", 0), "packets": q.get("packets", 0),
                       "drops": q.get("drops", 0), "overlimits": q.get("overlimits", 0),
                       "requeues": q.get("requeues", 0),
                       "backlog_bytes": q.get("backlog_bytes", 0),
                       "backlog_packets": q.get("qlen", 0)})
    return qdiscs, links


def snapshot(lab: Lab) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(qdisc rows, interface rows) of every node of ``lab`` now, each stamped with the
    midpoint of the netlink dump that read it (``t_s``, ``time.time()`` seconds) and half its
    duration (``t_err_s``). Raises LabError naming the node if a dump is refused."""
    qdiscs: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    for n in lab.plan.nodes:
        q, ln = _node_rows(lab, n.name)
        qdiscs += q
        links += ln
    return qdiscs, links
