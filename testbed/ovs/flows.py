"""OpenFlow rules for Open vSwitch switches, computed from the plan (pure: no root, no I/O).

aitb is the controller of its OVS switches (``datapath: ovs``), proactively: every station
(host or router interface) on an L2 segment of OVS switches is known with its MAC, so each
switch gets, before any traffic:

- unicast: ``dl_dst=<station MAC>`` -> the port(s) on a shortest path towards the switch the
  station hangs on (hop count over the switch graph). One such port: ``output``; several:
  an OpenFlow **select group** with one bucket per port, so flows are spread over equal-cost
  paths by a hash of each packet's fields (``selection_method=hash``, the switch's
  ``ecmp_hash``: ``l3`` the IP addresses, ``l4`` also the protocol and ports; OVS computes it
  for each new datapath flow, so a flow keeps one port) - the L2 alternative to the kernel's
  ECMP routes and their ``fib_multipath_hash_policy``. OVS's select groups have no per-packet
  or round-robin choice, hence no ``load_balancing: packet`` or ``flowlet`` on OVS switches
  (topologies/validate.py refuses them);
- floods (multicast/broadcast ``dl_dst``, i.e. ARP and IPv6 ND): along a spanning tree of the
  switch graph (BFS from the first switch by name), to every tree port and station port
  except the one it came in on; what arrives on a non-tree port is dropped, so loops (a
  leaf-spine) need no STP;
- anything else: dropped (the bridge runs with ``fail-mode=secure``, no NORMAL learning).

Then the plan's own ``flows`` of that switch (``ovs-ofctl add-flow`` syntax).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from models.plan import LabPlan

__all__ = ["OvsRules", "ovs_rules", "ovs_switches", "port_numbers", "MULTICAST",
           "PRIO_FLOOD", "PRIO_UNICAST"]

MULTICAST = "01:00:00:00:00:00/01:00:00:00:00:00"  # the I/G bit of the destination MAC
PRIO_FLOOD, PRIO_UNICAST, PRIO_DEFAULT = 100, 50, 0
# select-group hash per ecmp_hash (ovs-ofctl(8) "selection_method=hash", "fields"; names as
# OVS prints them back, nw_proto for the IP protocol; a field whose prerequisites a packet
# lacks, e.g. tcp_src of a UDP one, is left out of its hash)
_L3 = "ip_src,ip_dst,ipv6_src,ipv6_dst"
SELECTION = {"l3": f"selection_method=hash,fields({_L3})",
             "l4": f"selection_method=hash,fields({_L3},nw_proto,tcp_src,tcp_dst,udp_src,"
                   "udp_dst)"}


@dataclass(frozen=True)
class OvsRules:
    """What one OVS switch gets: ``groups`` (``ovs-ofctl add-group`` lines) and ``flows``
    (``ovs-ofctl add-flow`` lines, aitb's first, then the plan's)."""

    groups: tuple[str, ...]
    flows: tuple[str, ...]


def ovs_switches(plan: LabPlan) -> list[str]:
    """Names of the plan's switches with ``datapath: ovs``, in plan order."""
    return [n.name for n in plan.nodes if n.kind == "switch" and n.datapath == "ovs"]


def port_numbers(plan: LabPlan, node: str) -> dict[str, int]:
    """ifname -> OpenFlow port number (1, 2, ... in plan order of the node's links)."""
    names = [lk.endpoint(node).ifname for lk in plan.links if node in (lk.a.node, lk.b.node)]
    return {name: i + 1 for i, name in enumerate(names)}


def _graph(plan: LabPlan, ovs: set[str]) -> tuple[dict[str, list[tuple[str, str]]],
                                                  dict[str, list[tuple[str, str]]]]:
    """(switch -> [(port ifname, neighbour switch)], switch -> [(port ifname, station key)])."""
    nbrs: dict[str, list[tuple[str, str]]] = {s: [] for s in ovs}
    stations: dict[str, list[tuple[str, str]]] = {s: [] for s in ovs}
    for lk in plan.links:
        for here, there in ((lk.a, lk.b), (lk.b, lk.a)):
            if here.node not in ovs:
                continue
            if there.node in ovs:
                nbrs[here.node].append((here.ifname, there.node))
            else:
                stations[here.node].append((here.ifname, f"{there.node}:{there.ifname}"))
    return nbrs, stations


def _hops(nbrs: Mapping[str, list[tuple[str, str]]], root: str) -> dict[str, int]:
    dist, queue = {root: 0}, deque([root])
    while queue:
        s = queue.popleft()
        for _, n in nbrs[s]:
            if n not in dist:
                dist[n] = dist[s] + 1
                queue.append(n)
    return dist


def _tree_ports(nbrs: Mapping[str, list[tuple[str, str]]]) -> dict[str, set[str]]:
    """switch -> its ports on a BFS spanning tree of each connected component."""
    tree: dict[str, set[str]] = {s: set() for s in nbrs}
    seen: set[str] = set()
    for root in sorted(nbrs):
        if root in seen:
            continue
        seen.add(root)
        queue = deque([root])
        while queue:
            s = queue.popleft()
            for port, n in nbrs[s]:
                if n not in seen:
                    seen.add(n)
                    queue.append(n)
                    tree[s].add(port)
                    tree[n].add(next(p for p, m in nbrs[n] if m == s))
    return tree


def ovs_rules(plan: LabPlan, macs: Mapping[str, str]) -> dict[str, OvsRules]:
    """The rules of every OVS switch of ``plan``. ``macs`` maps ``"node:ifname"`` of every
    station on an OVS segment to its MAC address. Raises KeyError naming a station whose
    MAC is missing."""
    ovs = set(ovs_switches(plan))
    nbrs, stations = _graph(plan, ovs)
    tree = _tree_ports(nbrs)
    hops = {st: _hops(nbrs, s) for s in ovs for _, st in stations[s]}
    home = {st: (s, port) for s in ovs for port, st in stations[s]}
    out = {}
    for s in sorted(ovs):
        ports = port_numbers(plan, s)
        groups: dict[tuple[int, ...], int] = {}
        flows = _flood_flows(s, nbrs, stations, tree, ports)
        for st in sorted(home):
            where = _towards(s, st, home, hops, nbrs, ports)
            if where is None:
                continue
            if len(where) == 1:
                action = f"output:{where[0]}"
            else:
                gid = groups.setdefault(where, len(groups) + 1)
                action = f"group:{gid}"
            flows.append(f"priority={PRIO_UNICAST},dl_dst={macs[st]},actions={action}")
        flows.append(f"priority={PRIO_DEFAULT},actions=drop")
        method = SELECTION[plan.node(s).ecmp_hash]
        out[s] = OvsRules(
            tuple(f"group_id={g},type=select,{method}," + ",".join(
                f"bucket=output:{p}" for p in key) for key, g in groups.items()),
            tuple(flows) + tuple(plan.node(s).flows))
    return out


def _towards(s: str, st: str, home: Mapping[str, tuple[str, str]],
             hops: Mapping[str, Mapping[str, int]], nbrs: Mapping[str, list[tuple[str, str]]],
             ports: Mapping[str, int]) -> tuple[int, ...] | None:
    """Port numbers of ``s`` on shortest paths to station ``st`` (None: not reachable)."""
    at, port = home[st]
    if at == s:
        return (ports[port],)
    dist = hops[st]
    if s not in dist:
        return None
    return tuple(sorted(ports[p] for p, n in nbrs[s] if dist.get(n) == dist[s] - 1))


def _flood_flows(s: str, nbrs: Mapping[str, list[tuple[str, str]]],
                 stations: Mapping[str, list[tuple[str, str]]],
                 tree: Mapping[str, set[str]], ports: Mapping[str, int]) -> list[str]:
    flood = sorted(ports[p] for p in tree[s] | {p for p, _ in stations[s]})
    flows = []
    for number in sorted(ports.values()):
        outs = [p for p in flood if p != number] if number in flood else []
        action = ",".join(f"output:{p}" for p in outs) or "drop"
        flows.append(f"priority={PRIO_FLOOD},in_port={number},dl_dst={MULTICAST},"
                     f"actions={action}")
    return flows
