"""Per-router load balancing over the next hops of multipath routes (``NodePlan.load_balancing``).

``flow``: the kernel's multipath hash (``fib_multipath_hash_policy``, :mod:`testbed.sysctl`);
nothing here. For ``packet`` and ``flowlet`` every distinct next hop ``j`` (1-based, in route
order) of the node's multipath routes gets a policy-routing table ``TABLE_BASE + j`` holding
each multipath route restricted to that one next hop, and an ``ip rule fwmark j<<16/MASK
lookup TABLE_BASE+j`` (pyroute2 messages, priority ``RULE_PRIORITY``). iptables (mangle
PREROUTING for forwarded packets, OUTPUT for the node's own) sets the mark:

- ``packet``: per multipath route one chain of N rules ``-m statistic --mode nth --every N
  --packet k`` (each rule sees every packet of the route, so the counters stay in step): the
  k-th packet of every N goes to next hop k, round robin. A "packet" is what the router
  forwards: a GRO/GSO aggregate on veths counts once.
- ``flowlet``: the mark lives in the connection's conntrack entry (``CONNMARK
  --restore-mark``/``--save-mark``); a packet without one picks a next hop with the same nth
  chain. The idle gap is conntrack's own timer: in the node's namespace the established-TCP
  and UDP timeouts are set to the gap (``net.netfilter.nf_conntrack_*_timeout*``), so a flow
  idle longer than the gap loses its entry (expired entries are never found again,
  net/netfilter/nf_conntrack_core.c), its next packet is picked up as a new connection
  (``nf_conntrack_tcp_loose``, on by default; ``tcp_be_liberal`` on so no mid-stream packet
  is INVALID) and may take another path. Those timeouts are whole seconds
  (``unsigned int`` sysctls read as seconds), and this host has no nftables to do better,
  so a gap that is not a whole number of seconds is refused (:func:`problems`) naming node
  and key. The gap is an idle time of the connection in both directions (ACKs refresh it).

Every rule carries ``-m comment --comment aitb:<run_id>`` like the delay line's; tables, rules
and iptables state live in the router's namespace and go with it at teardown. A marked
packet whose table has no route (its link is down: the kernel removed the route) falls
through to the main table's multipath route.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence

from pyroute2.netlink.rtnl.fibmsg import fibmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from aitb.errors import LabError
from aitb.plan import LabPlan, NextHop, NodePlan, Route
from testbed import netns, sysctl
from testbed.lab_handle import LabHandle
from testbed.layout import NodeLayout
from testbed.nl import F_CREATE, F_EXCL, F_REPLACE, Batch, dump
from testbed.routes import (
    RTM_GETROUTE,
    RTM_NEWROUTE,
    RTPROT_STATIC,
    dumped_route_key,
    route_key,
    route_msg,
)

__all__ = ["TABLE_BASE", "RULE_PRIORITY", "MARK_SHIFT", "MARK_MASK", "next_hops", "hop_routes",
           "restore_text", "rule_msg", "flowlet_sysctls", "problems", "apply", "check", "restore"]

TABLE_BASE = 100  # tables 101..250 (< 252 so the rtmsg's table byte holds them)
MAX_HOPS = 150
RULE_PRIORITY = 1000  # before the main table's rule (32766)
MARK_SHIFT = 16
MARK_MASK = 0x00FF0000
RTM_NEWRULE, RTM_GETRULE = 32, 34
FR_ACT_TO_TBL = 1


def next_hops(node: NodePlan, version: int) -> list[tuple[str, str]]:
    """The distinct (ifname, gateway) next hops of ``node``'s multipath routes of IP
    ``version``, in route order; next hop ``j`` (1-based) gets mark ``j << MARK_SHIFT`` and
    table ``TABLE_BASE + j``."""
    out: list[tuple[str, str]] = []
    for r in node.routes:
        if r.dst.version == version and len(r.nexthops) > 1:
            for h in r.nexthops:
                key = (h.ifname, str(h.via or ""))
                if key not in out:
                    out.append(key)
    return out


def _multipath(node: NodePlan, version: int) -> list[Route]:
    return [r for r in node.routes if r.dst.version == version and len(r.nexthops) > 1]


def hop_routes(node: NodePlan, version: int) -> list[tuple[int, Route]]:
    """(table, single-next-hop route) for every next hop of every multipath route."""
    hops = next_hops(node, version)
    out = []
    for r in _multipath(node, version):
        for h in r.nexthops:
            j = hops.index((h.ifname, str(h.via or ""))) + 1
            out.append((TABLE_BASE + j, Route(r.dst, (NextHop(h.ifname, h.via),))))
    return out


def restore_text(node: NodePlan, version: int, run_id: str) -> str:
    """``iptables-restore --noflush`` (``ip6tables-restore`` for version 6) input of
    ``node``'s marking rules (empty string: nothing to add)."""
    routes = _multipath(node, version)
    if node.load_balancing == "flow" or not routes:
        return ""
    hops = next_hops(node, version)
    tag = f"-m comment --comment aitb:{run_id}"
    masks = f"--nfmask {MARK_MASK:#x} --ctmask {MARK_MASK:#x}"
    chains, rules = [], []
    flowlet = node.load_balancing == "flowlet"
    only_new = f" -m mark --mark 0/{MARK_MASK:#x}" if flowlet else ""
    for hook in ("PREROUTING", "OUTPUT"):
        if flowlet:
            rules.append(f"-A {hook} {tag} -j CONNMARK --restore-mark {masks}")
        for i, r in enumerate(routes):
            rules.append(f"-A {hook} -d {r.dst}{only_new} {tag} -j aitb-lb{version}-{i}")
        if flowlet:
            rules.append(f"-A {hook} -m mark ! --mark 0/{MARK_MASK:#x} {tag} "
                         f"-j CONNMARK --save-mark {masks}")
    for i, r in enumerate(routes):
        chain = f"aitb-lb{version}-{i}"
        chains.append(f":{chain} - [0:0]")
        n = len(r.nexthops)
        for k, h in enumerate(r.nexthops):
            mark = (hops.index((h.ifname, str(h.via or ""))) + 1) << MARK_SHIFT
            rules.append(f"-A {chain} -m statistic --mode nth --every {n} --packet {k} {tag} "
                         f"-j MARK --set-xmark {mark:#x}/{MARK_MASK:#x}")
    return "*mangle\n" + "".join(c + "\n" for c in chains) + "".join(
        x + "\n" for x in rules) + "COMMIT\n"


def rule_msg(version: int, j: int) -> fibmsg:
    """``ip rule add fwmark (j<<16)/MASK lookup TABLE_BASE+j priority RULE_PRIORITY``."""
    m = fibmsg()
    m["family"] = socket.AF_INET6 if version == 6 else socket.AF_INET
    m["table"] = TABLE_BASE + j
    m["action"] = FR_ACT_TO_TBL
    m["attrs"] = [["FRA_FWMARK", j << MARK_SHIFT], ["FRA_FWMASK", MARK_MASK],
                  ["FRA_PRIORITY", RULE_PRIORITY], ["FRA_TABLE", TABLE_BASE + j]]
    return m


def flowlet_sysctls(node: NodePlan) -> dict[str, str]:
    """The conntrack sysctls that make a flowlet node's gap the connections' idle timeout."""
    if node.load_balancing != "flowlet" or node.flowlet_gap_s is None:
        return {}
    gap = str(round(node.flowlet_gap_s))
    return {"net.netfilter.nf_conntrack_tcp_timeout_established": gap,
            "net.netfilter.nf_conntrack_udp_timeout": gap,
            "net.netfilter.nf_conntrack_udp_timeout_stream": gap,
            "net.netfilter.nf_conntrack_tcp_loose": "1",
            "net.netfilter.nf_conntrack_tcp_be_liberal": "1"}


def problems(plan: LabPlan) -> list[str]:
    """What this host cannot realise, one sentence per node naming node and key: a flowlet
    gap that is not a whole number of seconds (conntrack's timers are whole seconds; no
    nftables here), more than MAX_HOPS next hops. Pure."""
    out = []
    for n in plan.nodes:
        gap = n.flowlet_gap_s
        if n.load_balancing == "flowlet" and gap is not None and (
                gap < 1 or abs(gap - round(gap)) > 1e-9):
            out.append(f"node {n.name}: flowlet_gap {gap:g}s cannot be realised: flowlets use "
                       "conntrack's idle timeout, which this kernel keeps in whole seconds "
                       "(there is no nftables here for a finer timer); use a whole number of "
                       "seconds >= 1s, or load_balancing: packet or flow")
        for v in (4, 6):
            if n.load_balancing != "flow" and len(next_hops(n, v)) > MAX_HOPS:
                out.append(f"node {n.name}: load_balancing {n.load_balancing} supports at "
                           f"most {MAX_HOPS} distinct next hops")
    return out


def _run(lab: LabHandle, node: str, argv: list[str], text: str) -> None:
    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, input=text, capture_output=True, text=True, timeout=30,
                              check=False)
    r = netns.run_in(lab.node_io(node).fd, run)
    if r.returncode != 0:
        raise LabError(f"node {node}: {' '.join(argv)} refused the load-balancing rules: "
                       f"{r.stderr.strip()}")


def _add_routes(lab: LabHandle, n: NodePlan, rules: bool, only: set[str] | None = None
                ) -> None:
    layout: NodeLayout = lab.layout.nodes[n.name]
    batch = Batch(lab.node_io(n.name).sock, f"node {n.name}")
    for v in (4, 6):
        if rules:
            for j in range(1, len(next_hops(n, v)) + 1):
                batch.add(rule_msg(v, j), RTM_NEWRULE, F_CREATE | F_EXCL,
                          f"node {n.name}: add rule fwmark {j << MARK_SHIFT:#x} lookup "
                          f"{TABLE_BASE + j}")
        for table, r in hop_routes(n, v):
            if only is not None and r.nexthops[0].ifname not in only:
                continue
            m = route_msg(r, layout, n.rto_min_s)
            m["table"] = table
            batch.add(m, RTM_NEWROUTE, F_CREATE | (F_EXCL if rules else F_REPLACE),
                      f"node {n.name}: add route {r.dst} to table {table}")
    batch.commit()


def apply(lab: LabHandle) -> None:
    """Add the tables, rules and iptables marking of every ``packet``/``flowlet`` node (after
    the main routes exist). Raises LabError naming node and what the kernel refused."""
    for n in lab.plan.nodes:
        if n.load_balancing == "flow" or not (next_hops(n, 4) or next_hops(n, 6)):
            continue
        _add_routes(lab, n, rules=True)
        for v, tool in ((4, "iptables-restore"), (6, "ip6tables-restore")):
            text = restore_text(n, v, lab.run_id)
            if text:
                _run(lab, n.name, [tool, "-w", "--noflush"], text)
        gaps = flowlet_sysctls(n)
        if gaps:  # after the rules: they load conntrack into the namespace
            sysctl.apply_all([(lab.node_io(n.name).fd, n.name, gaps, {})])


def _table_routes(sock: socket.socket, node: str, version: int, table: int
                  ) -> dict[str, frozenset]:
    req = rtmsg()  # strict dump filter: the static routes of one table
    req["family"] = socket.AF_INET6 if version == 6 else socket.AF_INET
    req["table"], req["proto"] = table, RTPROT_STATIC
    return dict(dumped_route_key(m) for m in dump(sock, req, RTM_GETROUTE, f"node {node}")
                if m["table"] == table)


def check(lab: LabHandle, nodes: Sequence[str] | None = None) -> list[str]:
    """Read back the rules and per-next-hop tables of every ``packet``/``flowlet`` node (of
    ``nodes``; default all): one sentence per difference, naming node, table or rule."""
    out = []
    for n in lab.plan.nodes:
        if n.load_balancing == "flow" or (nodes is not None and n.name not in nodes):
            continue
        sock = lab.node_io(n.name).sock
        layout = lab.layout.nodes[n.name]
        for v in (4, 6):
            hops = next_hops(n, v)
            if not hops:
                continue
            req = fibmsg()
            req["family"] = socket.AF_INET6 if v == 6 else socket.AF_INET
            got = {(m.get_attr("FRA_FWMARK"), m.get_attr("FRA_FWMASK"),
                    m.get_attr("FRA_TABLE") or m["table"])
                   for m in dump(sock, req, RTM_GETRULE, f"node {n.name}",
                                 decoders={RTM_NEWRULE: fibmsg})
                   if m.get_attr("FRA_PRIORITY") == RULE_PRIORITY}
            want = {(j << MARK_SHIFT, MARK_MASK, TABLE_BASE + j) for j in range(1, len(hops) + 1)}
            for mark, _, table in sorted(want - got):
                out.append(f"node {n.name}: rule fwmark {mark:#x}/{MARK_MASK:#x} lookup "
                           f"{table} is missing")
            tables: dict[int, dict[str, frozenset]] = {}
            for table, r in hop_routes(n, v):
                dst, key = route_key(r, layout)
                if table not in tables:
                    tables[table] = _table_routes(sock, n.name, v, table)
                if tables[table].get(dst) != key:
                    out.append(f"node {n.name}: table {table} route {dst} has next hops "
                               f"{sorted(tables[table].get(dst, []))}, planned {sorted(key)}")
    return out


def restore(lab: LabHandle, node: str, ifnames_up: set[str]) -> None:
    """Re-add the per-next-hop routes of ``node`` through ``ifnames_up`` (interfaces that came
    back up: an admin down deleted them), replacing any left."""
    n = lab.plan.node(node)
    if n.load_balancing != "flow":
        _add_routes(lab, n, rules=False, only=ifnames_up)
