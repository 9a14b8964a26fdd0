"""Interfaces as rtnetlink messages: veth pairs between two namespaces, bridges, IFBs.

A veth pair is created by one request sent in the ``a`` node's namespace with the peer placed
directly into the ``b`` node's namespace (``IFLA_NET_NS_FD``), so it never exists in the root
namespace. Every interface is marked with the run's owner alias (``IFLA_IFALIAS``).

Wire-sized packets (``Layout.wire_packets``): ``IFLA_GSO_MAX_SEGS`` = 1 on every veth of the
lab, so that TCP hands the network MSS-sized packets. Otherwise it sends 64 KB GSO
super-packets (veths keep them whole across namespaces): netem (or the native line) would
lose 45 segments at once. A buffer in packets needs no such thing: its segmenter cuts GSO
packets into frames before the pfifo counts them (:mod:`testbed.tc.qdiscs.tbf`). The price is
per-packet CPU: on the 2-core project VM one TCP flow tops out near 350 Mbit/s with
wire-sized packets, against 17 Gbit/s with GSO (see :func:`testbed.lab.layout.needs_wire_packets`
for when it is switched on).
"""

from __future__ import annotations

from typing import Any

from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from models.plan import Endpoint, LinkPlan
from testbed.lab.layout import BRIDGE, WIRE_NODE, Layout

__all__ = ["veth_msg", "wire_veth_msg", "wire_bridge_msg", "setlink_msg", "updown_msg",
           "bridge_msg", "ifb_msg", "RTM_NEWLINK", "RTM_GETLINK", "IFF_UP", "link_state"]

RTM_NEWLINK, RTM_GETLINK = 16, 18
IFF_UP = 0x1
STP_FORWARD_DELAY_CS = 200  # 2 s, the smallest forward delay the kernel accepts with STP on


def _ifmsg(index: int, up: bool, attrs: list[list[Any]]) -> ifinfmsg:
    m = ifinfmsg()
    m["index"] = index
    m["flags"] = IFF_UP if up else 0
    m["change"] = IFF_UP if up else 0
    m["attrs"] = attrs
    return m


def veth_msg(link: LinkPlan, layout: Layout, peer_fd: int) -> ifinfmsg:
    """Create ``link``'s veth: ``a`` end here (up), ``b`` end in namespace ``peer_fd`` (down:
    the kernel refuses to open a peer before the pair is complete, so the b side brings it up
    in its own batch)."""
    a, b = layout.nodes[link.a.node], layout.nodes[link.b.node]
    gso = [["IFLA_GSO_MAX_SEGS", 1]] if layout.wire_packets else []
    peer = {"index": b.ifindex(link.b.ifname), "flags": 0, "change": 0, "attrs": [
        ["IFLA_IFNAME", link.b.ifname], ["IFLA_NET_NS_FD", peer_fd], ["IFLA_MTU", link.mtu],
        *gso] + _mac(link.b.mac)}
    info = {"attrs": [["IFLA_INFO_KIND", "veth"],
                      ["IFLA_INFO_DATA", {"attrs": [["VETH_INFO_PEER", peer]]}]]}
    return _ifmsg(a.ifindex(link.a.ifname), True, [
        ["IFLA_IFNAME", link.a.ifname], ["IFLA_MTU", link.mtu], *gso,
        *_mac(link.a.mac), ["IFLA_LINKINFO", info]])


def wire_veth_msg(link: LinkPlan, end: Endpoint, layout: Layout, wire_fd: int) -> ifinfmsg:
    """Create the veth of ``end`` (an endpoint of ``link``, which runs through the wire
    namespace: ``layout.wires``): ``end``'s interface here (up), its peer, the wire port of
    that end, in the wire namespace ``wire_fd`` (down; brought up with its bridge)."""
    here, wire = layout.nodes[end.node], layout.nodes[WIRE_NODE]
    port = layout.wires[link.name].port_of(link, end.node, end.ifname)
    gso = [["IFLA_GSO_MAX_SEGS", 1]] if layout.wire_packets else []
    peer = {"index": wire.ifindex(port), "flags": 0, "change": 0, "attrs": [
        ["IFLA_IFNAME", port], ["IFLA_NET_NS_FD", wire_fd], ["IFLA_MTU", link.mtu], *gso]}
    info = {"attrs": [["IFLA_INFO_KIND", "veth"],
                      ["IFLA_INFO_DATA", {"attrs": [["VETH_INFO_PEER", peer]]}]]}
    return _ifmsg(here.ifindex(end.ifname), True, [
        ["IFLA_IFNAME", end.ifname], ["IFLA_MTU", link.mtu], *gso, *_mac(end.mac),
        ["IFLA_LINKINFO", info]])


# link-local groups a wire bridge forwards (01:80:c2:00:00:0X, bit X): all the kernel allows
# (it never forwards 0-2: STP, pause, LACP, BR_GROUPFWD_RESTRICTED; with STP off it forwards
# STP's BPDUs anyway), so that LLDP and 802.1X cross a link as they would a cable
WIRE_GROUP_FWD_MASK = 0xFFF8


def wire_bridge_msg(index: int, name: str) -> ifinfmsg:
    """Create a wire bridge ``name`` (down): no STP, no multicast snooping (IPv6 neighbour
    discovery and MLD must cross it as a cable's would), link-local groups forwarded
    (:data:`WIRE_GROUP_FWD_MASK`)."""
    data = [["IFLA_BR_STP_STATE", 0], ["IFLA_BR_MCAST_SNOOPING", 0],
            ["IFLA_BR_GROUP_FWD_MASK", WIRE_GROUP_FWD_MASK]]
    info = {"attrs": [["IFLA_INFO_KIND", "bridge"], ["IFLA_INFO_DATA", {"attrs": data}]]}
    return _ifmsg(index, False, [["IFLA_IFNAME", name], ["IFLA_LINKINFO", info]])


def _mac(mac: str | None) -> list[list[Any]]:
    return [["IFLA_ADDRESS", mac]] if mac else []


def setlink_msg(index: int, alias: str, master: int | None = None) -> ifinfmsg:
    """Bring interface ``index`` up, set its owner alias and (for a switch port) its bridge."""
    attrs: list[list[Any]] = [["IFLA_IFALIAS", alias]]
    if master is not None:
        attrs.append(["IFLA_MASTER", master])
    return _ifmsg(index, True, attrs)


def updown_msg(index: int, up: bool) -> ifinfmsg:
    """Set interface ``index`` administratively up or down (IFF_UP in ``change``), nothing
    else (testbed/live/faults.py: a link that fails and comes back)."""
    m = ifinfmsg()
    m["index"] = index
    m["flags"] = IFF_UP if up else 0
    m["change"] = IFF_UP
    m["attrs"] = []
    return m


def bridge_msg(index: int, stp: bool) -> ifinfmsg:
    """Create the switch's bridge :data:`~testbed.lab.layout.BRIDGE` (down; brought up later)."""
    data = [["IFLA_BR_STP_STATE", 1 if stp else 0]]
    if stp:
        data.append(["IFLA_BR_FORWARD_DELAY", STP_FORWARD_DELAY_CS])
    info = {"attrs": [["IFLA_INFO_KIND", "bridge"], ["IFLA_INFO_DATA", {"attrs": data}]]}
    return _ifmsg(index, False, [["IFLA_IFNAME", BRIDGE], ["IFLA_LINKINFO", info]])


def ifb_msg(index: int, name: str, mtu: int) -> ifinfmsg:
    """Create IFB ``name`` (the delay line's device) with ``mtu``."""
    info = {"attrs": [["IFLA_INFO_KIND", "ifb"]]}
    return _ifmsg(index, False, [["IFLA_IFNAME", name], ["IFLA_MTU", mtu],
                                 ["IFLA_LINKINFO", info]])


def link_state(msg: Any) -> dict[str, Any]:
    """The fields of a dumped link that readback compares."""
    return {"ifname": msg.get_attr("IFLA_IFNAME"), "up": bool(msg["flags"] & IFF_UP),
            "mtu": msg.get_attr("IFLA_MTU"), "alias": msg.get_attr("IFLA_IFALIAS"),
            "master": msg.get_attr("IFLA_MASTER"),
            "gso_max_segs": msg.get_attr("IFLA_GSO_MAX_SEGS")}
