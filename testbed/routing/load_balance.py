"""Per-router load balancing over the next hops of multipath routes (``NodePlan.load_balancing``).

``flow``: the kernel's multipath hash (``fib_multipath_hash_policy``, :mod:`testbed.ns.sysctl`);
nothing here. For ``packet`` and ``flowlet`` every distinct next hop ``j`` (1-based, in route
order) of the node's multipath routes gets a policy-routing table ``TABLE_BASE + j`` holding
each multipath route restricted to that one next hop, and an ``ip rule fwmark j<<16/MASK
lookup TABLE_BASE+j`` (pyroute2 messages, priority ``RULE_PRIORITY``). iptables (mangle
PREROUTING for forwarded packets, OUTPUT for the node's own) sets the mark:

- ``packet``: per multipath route one chain of N rules ``-m statistic --mode nth --every N
  --packet k`` (each rule sees every packet of the route, so the counters stay in step): the
  k-th packet of every N goes to next hop k, round robin. A "packet" is what the router
  forwards: a GRO/GSO aggregate on veths counts once.
- ``flowlet``: nftables (``nft -f``, table ``inet aitb_lb``, comment ``aitb:<run_id>``). Per
  multipath route and next hop ``k`` a dynamic set ``fl<v>_<i>_<k>`` of the 5-tuples (saddr,
  daddr, protocol, ports) of TCP/UDP flows now on that next hop, whose elements time out
  after the gap (``flags dynamic,timeout``). A packet whose 5-tuple is in set k gets mark k
  and refreshes its element (``update``: the timeout restarts); one found in none starts a
  flowlet: ``numgen inc mod N`` (round robin over new flowlets) picks k, adds it to set k and
  marks it. So a flow whose packets in this direction paused longer than the gap is
  re-picked (the gap is per direction: the reverse direction has its own 5-tuple, and ACKs
  do not keep a paused data direction alive). Other protocols (ICMP) keep the kernel's hash.
  The kernel keeps set timeouts in jiffies (4 ms at CONFIG_HZ=250): a gap is rounded up to
  the next tick; nft takes whole milliseconds, so a gap below 1 ms or with a fraction of a
  millisecond is refused (:func:`problems`) naming node and key. (Before nftables was
  installed here the pick lived in conntrack, whose idle timeouts are whole seconds; a
  dynamic map from 5-tuple to mark would be one lookup, but nft 1.0.6 aborts on updating a
  map keyed by a concatenation, hence one set per next hop.)

Every iptables rule carries ``-m comment --comment aitb:<run_id>`` like the delay line's, the
nftables table the same comment; tables, rules and netfilter state live in the router's
namespace and go with it at teardown. A marked
packet whose table has no route (its link is down: the kernel removed the route) falls
through to the main table's multipath route.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Sequence

from pyroute2.netlink.rtnl.fibmsg import fibmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from models.errors import LabError
from models.plan import LabPlan, NextHop, NodePlan, Route, flowlet_gap_problem
from testbed.lab.handle import LabHandle
from testbed.lab.layout import NodeLayout
from testbed.ns import netns
from testbed.ns.nl import F_CREATE, F_EXCL, F_REPLACE, Batch, dump
from testbed.routing.routes import (
    RTM_GETROUTE,
    RTM_NEWROUTE,
    RTPROT_STATIC,
    dumped_route_key,
    route_key,
    route_msg,
)

__all__ = ["TABLE_BASE", "RULE_PRIORITY", "MARK_SHIFT", "MARK_MASK", "next_hops", "hop_routes",
           "restore_text", "nft_text", "rule_msg", "problems", "apply", "check", "restore"]

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
    """``iptables-restore --noflush`` (``ip6tables-restore`` for version 6) input of a
    ``packet`` node's marking rules (empty string: nothing to add; flowlets:
    :func:`nft_text`)."""
    routes = _multipath(node, version)
    if node.load_balancing != "packet" or not routes:
        return ""
    hops = next_hops(node, version)
    tag = f"-m comment --comment aitb:{run_id}"
    chains, rules = [], []
    for hook in ("PREROUTING", "OUTPUT"):
        for i, r in enumerate(routes):
            rules.append(f"-A {hook} -d {r.dst} {tag} -j aitb-lb{version}-{i}")
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


NFT_TABLE = "aitb_lb"


def _gap_ms(node: NodePlan) -> int:
    return round((node.flowlet_gap_s or 0) * 1000)


def nft_text(node: NodePlan, run_id: str) -> str:
    """``nft -f`` input of a ``flowlet`` node's table ``inet aitb_lb`` (empty string: no
    multipath route), both IP versions; see the module docstring for the rules."""
    if node.load_balancing != "flowlet" or not (_multipath(node, 4) or _multipath(node, 6)):
        return ""
    gap = f"{_gap_ms(node)}ms"
    sets, chains, hooks = [], [], []
    for v, ip, addr in ((4, "ip", "ipv4_addr"), (6, "ip6", "ipv6_addr")):
        hops = next_hops(node, v)
        key = f"{ip} saddr . {ip} daddr . meta l4proto . th sport . th dport"
        for i, r in enumerate(_multipath(node, v)):
            name = f"lb{v}_{i}"
            hooks.append(f"{ip} daddr {r.dst} meta l4proto {{ tcp, udp }} jump {name}")
            rules, picks = [], []
            for k, h in enumerate(r.nexthops):
                mark = (hops.index((h.ifname, str(h.via or ""))) + 1) << MARK_SHIFT
                fl = f"fl{v}_{i}_{k}"
                sets.append(f"  set {fl} {{ type {addr} . {addr} . inet_proto . inet_service "
                            f". inet_service; flags dynamic,timeout; timeout {gap}; }}\n")
                rules.append(f"    {key} @{fl} meta mark set {mark:#x} update @{fl} {{ {key} }} "
                             "return\n")
                chains.append(f"  chain {name}_{k} {{\n    meta mark set {mark:#x} update "
                              f"@{fl} {{ {key} }}\n  }}\n")
                picks.append(f"{k} : jump {name}_{k}")
            rules.append(f"    numgen inc mod {len(r.nexthops)} vmap {{ {', '.join(picks)} }}\n")
            chains.append(f"  chain {name} {{\n" + "".join(rules) + "  }\n")
    hook = "".join(f"    {x}\n" for x in hooks)
    return (f"table inet {NFT_TABLE} {{\n  comment \"aitb:{run_id}\"\n" + "".join(sets)
            + "".join(chains)
            + "  chain prerouting {\n    type filter hook prerouting priority mangle; "
            + "policy accept;\n" + hook + "  }\n"
            + "  chain output {\n    type route hook output priority mangle; "
            + "policy accept;\n" + hook + "  }\n}\n")


def rule_msg(version: int, j: int) -> fibmsg:
    """``ip rule add fwmark (j<<16)/MASK lookup TABLE_BASE+j priority RULE_PRIORITY``."""
    m = fibmsg()
    m["family"] = socket.AF_INET6 if version == 6 else socket.AF_INET
    m["table"] = TABLE_BASE + j
    m["action"] = FR_ACT_TO_TBL
    m["attrs"] = [["FRA_FWMARK", j << MARK_SHIFT], ["FRA_FWMASK", MARK_MASK],
                  ["FRA_PRIORITY", RULE_PRIORITY], ["FRA_TABLE", TABLE_BASE + j]]
    return m


def problems(plan: LabPlan) -> list[str]:
    """What this host cannot realise, one sentence per node naming node and key: a flowlet
    gap below 1 ms or not a whole number of milliseconds (nft's set timeouts), flowlets
    without the ``nft`` program, more than MAX_HOPS next hops. Reads PATH only."""
    out = []
    for n in plan.nodes:
        gap = n.flowlet_gap_s
        why = flowlet_gap_problem(gap) if n.load_balancing == "flowlet" and gap else None
        if why:
            out.append(f"node {n.name}: {why}")
        if n.load_balancing == "flowlet" and shutil.which("nft") is None:
            out.append(f"node {n.name}: load_balancing flowlet needs nftables' nft program, "
                       "which is not installed (sudo make setup installs it)")
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
    """Add the tables, rules and iptables (``packet``) or nftables (``flowlet``) marking of
    every such node (after the main routes exist). Raises LabError naming node and what the
    kernel refused."""
    for n in lab.plan.nodes:
        if n.load_balancing == "flow" or not (next_hops(n, 4) or next_hops(n, 6)):
            continue
        _add_routes(lab, n, rules=True)
        for v, tool in ((4, "iptables-restore"), (6, "ip6tables-restore")):
            text = restore_text(n, v, lab.run_id)
            if text:
                _run(lab, n.name, [tool, "-w", "--noflush"], text)
        text = nft_text(n, lab.run_id)
        if text:
            _run(lab, n.name, ["nft", "-f", "-"], text)


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
