"""Bring-up steps of a lab, each one batch of netlink requests per namespace.

Order: (1) per node, its switch bridge and the veths it is the ``a`` end of (peers go straight
into the ``b`` node's namespace); (2) per node: lo up, every interface up with the owner alias
(switch ports enslaved), IFBs, addresses (a forwarding host's node address on lo),
qdiscs/classes/filters, routes. Sysctls are written between the two (:mod:`testbed.ns.sysctl`).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass

from models.plan import LabPlan, LinkPlan, NodePlan
from testbed.lab.layout import (
    BRIDGE,
    IFB_INDEX_BASE,
    WIRE_NODE,
    Layout,
    NodeLayout,
    owner_alias,
)
from testbed.ns.links import (
    RTM_NEWLINK,
    bridge_msg,
    ifb_msg,
    setlink_msg,
    veth_msg,
    wire_bridge_msg,
    wire_veth_msg,
)
from testbed.ns.nl import F_CREATE, F_EXCL, F_REPLACE, Batch
from testbed.routing.routes import (
    RTM_NEWADDR,
    RTM_NEWROUTE,
    addr_msg,
    connected_route_msg,
    route_msg,
)
from testbed.tc.msgs import tc_message
from testbed.tc.objects import DirectionRecipe, TcObject

__all__ = ["NodeIO", "create_links", "configure_wire", "configure_node", "add_tc", "ifbs_of",
           "links_by_node", "add_ifb"]

NEW = F_CREATE | F_EXCL


@dataclass
class NodeIO:
    """Live handles of one node's namespace: an fd of it and an rtnetlink socket inside."""

    fd: int
    sock: socket.socket


def create_links(plan: LabPlan, layout: Layout, io: dict[str, NodeIO]) -> None:
    """Create every switch bridge and veth pair, batched per node; a link through the wire
    namespace (``layout.wires``) as two veths, each end's to its wire port. Raises
    LabError."""
    batches = {n.name: Batch(io[n.name].sock, f"node {n.name}") for n in plan.nodes}
    for n in plan.nodes:
        if n.kind == "switch" and n.datapath == "bridge":
            batches[n.name].add(bridge_msg(layout.nodes[n.name].ifindex(BRIDGE), n.stp),
                                RTM_NEWLINK, NEW, f"node {n.name}: create bridge {BRIDGE}")
    for link in plan.links:
        if link.name in layout.wires:
            for end in (link.a, link.b):
                batches[end.node].add(
                    wire_veth_msg(link, end, layout, io[WIRE_NODE].fd), RTM_NEWLINK, NEW,
                    f"link {link.name}: create veth {end.node}:{end.ifname} - wire")
            continue
        batches[link.a.node].add(
            veth_msg(link, layout, io[link.b.node].fd), RTM_NEWLINK, NEW,
            f"link {link.name}: create veth {link.a.node}:{link.a.ifname} - "
            f"{link.b.node}:{link.b.ifname}")
    for b in batches.values():
        b.commit()


def configure_wire(layout: Layout, io: NodeIO) -> None:
    """The wire namespace after the links exist: per wired link its bridge, both ports in
    it, all up with the owner alias; one batch. Raises LabError listing what the kernel
    refused."""
    wire = layout.nodes[WIRE_NODE]
    alias = owner_alias(layout.run_id)
    batch = Batch(io.sock, f"node {WIRE_NODE}")
    batch.add(setlink_msg(1, alias), RTM_NEWLINK, 0, "wire: set lo up")
    for w in layout.wires.values():
        br = wire.ifindex(w.bridge)
        batch.add(wire_bridge_msg(br, w.bridge), RTM_NEWLINK, NEW,
                  f"wire of link {w.link}: create bridge {w.bridge}")
        for port in (w.a_port, w.b_port):
            batch.add(setlink_msg(wire.ifindex(port), alias, br), RTM_NEWLINK, 0,
                      f"wire of link {w.link}: set {port} up in {w.bridge}")
        batch.add(setlink_msg(br, alias), RTM_NEWLINK, 0,
                  f"wire of link {w.link}: set {w.bridge} up")
    batch.commit()


def ifbs_of(layout: Layout, node: str) -> Iterator[DirectionRecipe]:
    """The recipes whose delay line (IFB) lives in ``node``'s namespace."""
    return (r for r in layout.recipes_of(node) if r.ifb and r.rx_node == node)


def add_tc(batch: Batch, node: NodeLayout, objects: tuple[TcObject, ...], flags: int,
           verb: str = "create") -> None:
    """Queue ``objects`` (all on ``node``) into ``batch`` with netlink ``flags``."""
    for o in objects:
        what = f"node {node.name}: {' '.join(o.tc_argv('add' if verb == 'create' else verb))}"
        extra = node.ifindex(o.params["redirect_dev"]) if o.verb == "filter" else 0
        key = ("tc", o.verb, o.parent, o.handle, o.kind, repr(sorted(o.params.items())), extra,
               flags)
        batch.add_cached(key, lambda o=o: tc_message(o, node.ifindex), node.ifindex(o.dev),
                         flags, what)


def _interfaces(batch: Batch, n: NodePlan, node: NodeLayout, alias: str) -> None:
    batch.add(setlink_msg(1, alias), RTM_NEWLINK, 0, f"node {n.name}: set lo up")
    master = node.index.get(BRIDGE) if n.kind == "switch" else None
    for ifname, index in node.index.items():
        if ifname == BRIDGE or index >= IFB_INDEX_BASE:
            continue
        batch.add_cached(("setlink", alias, master),
                         lambda: (setlink_msg(0, alias, master), RTM_NEWLINK), index, 0,
                         f"node {n.name}: set {ifname} up" + (f" in {BRIDGE}" if master else ""))
    if master is not None:
        batch.add(setlink_msg(master, alias), RTM_NEWLINK, 0, f"node {n.name}: set {BRIDGE} up")


def links_by_node(plan: LabPlan) -> dict[str, list[LinkPlan]]:
    """node -> the links that touch it, in plan order (one pass over the links)."""
    out: dict[str, list[LinkPlan]] = {}
    for lk in plan.links:
        out.setdefault(lk.a.node, []).append(lk)
        if lk.b.node != lk.a.node:
            out.setdefault(lk.b.node, []).append(lk)
    return out


def configure_node(n: NodePlan, layout: Layout, io: NodeIO,
                   links_of: dict[str, list[LinkPlan]]) -> None:
    """Everything inside node ``n``'s namespace after the links exist, in one batch;
    ``links_of`` from :func:`links_by_node`. Raises LabError listing every request the
    kernel refused."""
    node = layout.nodes[n.name]
    alias = owner_alias(layout.run_id)
    batch = Batch(io.sock, f"node {n.name}")
    _interfaces(batch, n, node, alias)
    links = links_of.get(n.name, [])
    for r in ifbs_of(layout, n.name):
        mtu = next(lk.mtu for lk in links if lk.endpoint(n.name).ifname == r.rx_dev)
        add_ifb(batch, node, r.ifb or "", mtu, alias)
    for lk in links:
        _addresses(batch, n, node, lk)
    for iface in (n.lo_ipv4, n.lo_ipv6):  # a forwarding host's node address (lo is index 1)
        if iface is not None:
            batch.add(addr_msg(1, iface), RTM_NEWADDR, NEW,
                      f"node {n.name}: add node address {iface} to lo")
    add_tc(batch, node, tuple(layout.tc_objects(n.name)), NEW)
    for route in n.routes:
        batch.add(route_msg(route, node, n.rto_min_s), RTM_NEWROUTE, NEW,
                  f"node {n.name}: add route {route.dst}")
    batch.commit()


def _addresses(batch: Batch, n: NodePlan, node: NodeLayout, lk: LinkPlan) -> None:
    """Queue ``n``'s addresses on ``lk``; with an rto_min, also replace each address's
    connected route by one carrying the metric (the kernel's has none)."""
    ep = lk.endpoint(n.name)
    for iface in (ep.ipv4, ep.ipv6):
        if iface is None:
            continue
        index = node.ifindex(ep.ifname)
        batch.add(addr_msg(index, iface), RTM_NEWADDR, NEW,
                  f"node {n.name}: add address {iface} to {ep.ifname}")
        if n.rto_min_s is not None:
            batch.add(connected_route_msg(index, iface, n.rto_min_s), RTM_NEWROUTE,
                      F_CREATE | F_REPLACE,
                      f"node {n.name}: set rto_min on connected route {iface.network}")


def add_ifb(batch: Batch, node: NodeLayout, name: str, mtu: int, alias: str) -> None:
    """Queue creation of IFB ``name`` in ``node`` (up, with the owner alias)."""
    index = node.ifindex(name)
    batch.add(ifb_msg(index, name, mtu), RTM_NEWLINK, NEW, f"node {node.name}: create {name}")
    batch.add(setlink_msg(index, alias), RTM_NEWLINK, 0, f"node {node.name}: set {name} up")
