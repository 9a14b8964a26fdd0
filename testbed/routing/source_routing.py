"""Per-source policy routing of multi-NIC hosts (``NodePlan.source_routes``).

A host with per-source tables (a dual-homed host with equal-cost NICs, a server binding ranks
to NICs: topologies/routing.py) gets, for its k-th source-routed NIC (in plan order), table
``TABLE_BASE + k`` holding that NIC's routes (its subnet on-link, the rest through its
gateways) and ``ip rule from <NIC address>/32 lookup TABLE_BASE+k priority RULE_PRIORITY``
(and /128 for an IPv6 address), as pyroute2 messages. A packet whose source is a NIC's address
then leaves by that NIC whatever the main table's ECMP hash or a shorter path over the other
NIC would choose; a destination that table has no route for falls through to the main table
(the kernel goes on to the next rule). Tables and rules live in the host's namespace and go
with it at teardown. After an admin down of a link the kernel deletes the routes through it;
:func:`restore` puts them back when it comes up (testbed/live/faults.py).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

from pyroute2.netlink.rtnl.fibmsg import fibmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from models.plan import LabPlan, NodePlan, Route
from testbed.lab.handle import LabHandle
from testbed.ns.nl import F_CREATE, F_EXCL, F_REPLACE, Batch, dump
from testbed.routing.routes import (
    RTM_GETROUTE,
    RTM_NEWROUTE,
    dumped_route_key,
    route_key,
    route_msg,
)

__all__ = ["TABLE_BASE", "RULE_PRIORITY", "tables", "rule_msg", "apply", "check", "restore"]

TABLE_BASE = 10  # tables 11.. (load balancing uses 101..250, and only on routers/forwarders)
RULE_PRIORITY = 900  # before the main table's rule (32766)
RTM_NEWRULE, RTM_GETRULE = 32, 34
FR_ACT_TO_TBL = 1
RT_SCOPE_LINK = 253


def tables(plan: LabPlan, n: NodePlan) -> list[tuple[int, list[str], tuple[Route, ...]]]:
    """(table, the NIC's addresses as strings, its routes) per source-routed NIC of ``n``."""
    addrs: dict[str, list[str]] = {}
    for lk in plan.links_of(n.name):
        ep = lk.endpoint(n.name)
        addrs[ep.ifname] = [str(i.ip) for i in (ep.ipv4, ep.ipv6) if i is not None]
    return [(TABLE_BASE + k, addrs.get(sr.ifname, []), sr.routes)
            for k, sr in enumerate(n.source_routes, start=1)]


def rule_msg(address: str, table: int) -> fibmsg:
    """``ip rule add from ADDRESS/32 (/128) lookup TABLE priority RULE_PRIORITY``."""
    v6 = ":" in address
    m = fibmsg()
    m["family"] = socket.AF_INET6 if v6 else socket.AF_INET
    m["src_len"] = 128 if v6 else 32
    m["table"] = table
    m["action"] = FR_ACT_TO_TBL
    m["attrs"] = [["FRA_SRC", address], ["FRA_PRIORITY", RULE_PRIORITY], ["FRA_TABLE", table]]
    return m


def _route(route: Route, lab: LabHandle, n: NodePlan, table: int) -> rtmsg:
    m = route_msg(route, lab.layout.nodes[n.name], n.rto_min_s)
    m["table"] = table
    if len(route.nexthops) == 1 and route.nexthops[0].via is None:
        m["scope"] = RT_SCOPE_LINK  # the NIC's own subnet, on-link like the kernel's own
    return m


def _add(lab: LabHandle, n: NodePlan, rules: bool, only: set[str] | None = None) -> None:
    batch = Batch(lab.node_io(n.name).sock, f"node {n.name}")
    for table, addrs, routes in tables(lab.plan, n):
        if rules:
            for a in addrs:
                batch.add(rule_msg(a, table), RTM_NEWRULE, F_CREATE | F_EXCL,
                          f"node {n.name}: add rule from {a} lookup {table}")
        for r in routes:
            if only is not None and not any(h.ifname in only for h in r.nexthops):
                continue
            batch.add(_route(r, lab, n, table), RTM_NEWROUTE,
                      F_CREATE | (F_EXCL if rules else F_REPLACE),
                      f"node {n.name}: add route {r.dst} to table {table}")
    batch.commit()


def apply(lab: LabHandle) -> None:
    """Add the rules and tables of every host with per-source routes (after its addresses
    exist). Raises LabError naming node, rule or route the kernel refused."""
    for n in lab.plan.nodes:
        if n.source_routes:
            _add(lab, n, rules=True)


def _dump_table(sock: socket.socket, node: str, family: int, table: int
                ) -> dict[str, frozenset]:
    req = rtmsg()
    req["family"], req["table"] = family, table
    return dict(dumped_route_key(m) for m in dump(sock, req, RTM_GETROUTE, f"node {node}")
                if m["table"] == table)


def check(lab: LabHandle, nodes: Sequence[str] | None = None) -> list[str]:
    """Read back the rules and tables of every source-routed host (of ``nodes``; default
    all): one sentence per difference, naming node, rule or table route."""
    out = []
    for n in lab.plan.nodes:
        if not n.source_routes or (nodes is not None and n.name not in nodes):
            continue
        sock = lab.node_io(n.name).sock
        layout = lab.layout.nodes[n.name]
        got: set[tuple[str, int]] = set()
        for family in (socket.AF_INET, socket.AF_INET6):
            req = fibmsg()
            req["family"] = family
            got |= {(m.get_attr("FRA_SRC"), m.get_attr("FRA_TABLE") or m["table"])
                    for m in dump(sock, req, RTM_GETRULE, f"node {n.name}",
                                  decoders={RTM_NEWRULE: fibmsg})
                    if m.get_attr("FRA_PRIORITY") == RULE_PRIORITY}
        dumped: dict[tuple[int, int], dict[str, frozenset]] = {}
        for table, addrs, routes in tables(lab.plan, n):
            out += [f"node {n.name}: rule from {a} lookup {table} is missing"
                    for a in addrs if (a, table) not in got]
            for r in routes:
                family = socket.AF_INET6 if r.dst.version == 6 else socket.AF_INET
                if (family, table) not in dumped:
                    dumped[(family, table)] = _dump_table(sock, n.name, family, table)
                dst, key = route_key(r, layout)
                have = dumped[(family, table)].get(dst)
                if have != key:
                    out.append(f"node {n.name}: table {table} route {dst} has next hops "
                               f"{sorted(have or [])}, planned {sorted(key)}")
    return out


def restore(lab: LabHandle, node: str, ifnames_up: set[str]) -> None:
    """Re-add ``node``'s per-source routes through ``ifnames_up`` (interfaces that came back
    up: an admin down deleted them), replacing any left."""
    n = lab.plan.node(node)
    if n.source_routes:
        _add(lab, n, rules=False, only=ifnames_up)
