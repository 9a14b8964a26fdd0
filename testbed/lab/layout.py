"""Where everything of a lab goes, computed from the plan before anything exists (pure).

Each node's interfaces get fixed ifindexes (:data:`FIRST_IFINDEX` upwards, in plan order), so
one batch of netlink requests can create a veth and then address, enslave and shape it
without asking the kernel for its index in between. Fresh namespaces hold only ``lo`` (1) and,
on kernels with tunnel modules loaded, a few fallback tunnels with small indexes; 100 upwards
is free.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from models.errors import LabError
from models.plan import LabPlan, LinkPlan
from models.shaping import Shaping
from testbed.delay.nfqueue.labline import WIRE_NODE, WireLink
from testbed.lab.registry import unknown_name
from testbed.tc.objects import DirectionRecipe, TcObject
from testbed.tc.qdiscs.tbf import counts_packets
from testbed.tc.recipe import direction_recipe

__all__ = ["NodeLayout", "Layout", "make_layout", "needs_wire_packets", "netns_name",
           "DIRECTIONS", "BRIDGE", "owner_alias", "recipe_for", "WIRE_NODE", "WireLink"]

FIRST_IFINDEX = 100
BRIDGE = "br0"
IFB_INDEX_BASE = 10000
DIRECTIONS = ("a_to_b", "b_to_a")


def netns_name(run_id: str, node: str) -> str:
    """The namespace of ``node`` in run ``run_id``: ``aitb-<run_id>-<node>``."""
    return f"aitb-{run_id}-{node}"


def owner_alias(run_id: str) -> str:
    """The owner mark every interface of run ``run_id`` carries as its alias."""
    return f"aitb:{run_id}"


@dataclass
class NodeLayout:
    """One node: its namespace name and the ifindex of each of its interfaces."""

    name: str
    kind: str
    netns: str
    index: dict[str, int] = field(default_factory=dict)

    def ifindex(self, ifname: str) -> int:
        """The index of ``ifname``; raises LabError naming node and interface if unknown."""
        try:
            return self.index[ifname]
        except KeyError:
            raise LabError(f"node {self.name} has no interface {ifname}; it has "
                           f"{', '.join(sorted(self.index))}") from None


@dataclass
class Layout:
    """Nodes by name and the tc recipe of every (link name, direction)."""

    run_id: str
    nodes: dict[str, NodeLayout]
    recipes: dict[tuple[str, str], DirectionRecipe]
    wire_packets: bool = True
    # (link name, direction) -> delay-line backend (testbed.delay); absent: netem
    lines: dict[tuple[str, str], str] = field(default_factory=dict)
    # link name -> its ports in the wire namespace (testbed.lab.lab.Lab.add_wires); empty: every
    # link is one veth between its two ends
    wires: dict[str, WireLink] = field(default_factory=dict)
    _by_node: dict[str, list[DirectionRecipe]] | None = None

    def set_recipe(self, key: tuple[str, str], recipe: DirectionRecipe) -> None:
        """Replace the recipe of (link name, direction)."""
        self.recipes[key] = recipe
        self._by_node = None

    def recipes_of(self, node: str) -> list[DirectionRecipe]:
        """Recipes with an object on ``node`` (it sends or receives), in plan order."""
        if self._by_node is None:
            self._by_node = {n: [] for n in self.nodes}
            for r in self.recipes.values():
                self._by_node[r.tx_node].append(r)
                if r.rx_node != r.tx_node:
                    self._by_node[r.rx_node].append(r)
        return self._by_node[node]

    def tc_objects(self, node: str) -> list[TcObject]:
        """Every tc object that lives on ``node``, in creation order."""
        return [o for r in self.recipes_of(node) for o in r.objects() if o.node == node]

    def add_wires(self, plan: LabPlan, links: Iterable[str]) -> None:
        """Run ``links`` (names, of ``plan``) through the wire namespace (node
        :data:`WIRE_NODE`, made here): per link a bridge ``wb<i>`` and ports ``w<i>a``,
        ``w<i>b`` (i: the link's place in the plan), at fixed ifindexes as any node's."""
        names = set(links)
        if not names:
            return
        wire = self.nodes.setdefault(WIRE_NODE, NodeLayout(WIRE_NODE, "wire", netns_name(
            self.run_id, WIRE_NODE)))
        self._by_node = None
        for i, lk in enumerate(plan.links):
            if lk.name not in names or lk.name in self.wires:
                continue
            w = WireLink(lk.name, f"wb{i}", f"w{i}a", f"w{i}b")
            for ifname in (w.bridge, w.a_port, w.b_port):
                wire.index[ifname] = FIRST_IFINDEX + len(wire.index)
            self.wires[lk.name] = w

    def node(self, name: str) -> NodeLayout:
        """The node ``name``; raises LabError listing the known nodes if absent."""
        if name not in self.nodes:
            raise unknown_name(f"unknown node {name!r}; known: {', '.join(sorted(self.nodes))}")
        return self.nodes[name]


def _ends(link: LinkPlan, direction: str) -> tuple[tuple[str, str], tuple[str, str]]:
    a, b = (link.a.node, link.a.ifname), (link.b.node, link.b.ifname)
    return (a, b) if direction == "a_to_b" else (b, a)


def ifb_name(rx_index: int) -> str:
    """The IFB that holds the delay line of traffic arriving on interface ``rx_index``."""
    return f"ifb{rx_index}"


def recipe_for(layout: Layout, link: LinkPlan, direction: str, shaping: Shaping
               ) -> DirectionRecipe:
    """The recipe of ``direction`` of ``link`` with ``shaping``, IFB named after the receiving
    interface so that a later change of shaping finds the same device."""
    tx, rx = _ends(link, direction)
    rx_index = layout.nodes[rx[0]].ifindex(rx[1])
    return direction_recipe(shaping, link.mtu, tx, rx, ifb_name(rx_index),
                            layout.lines.get((link.name, direction), "netem"))


def needs_wire_packets(plan: LabPlan) -> bool:
    """True when some direction's behaviour is defined per packet, so packets must be
    wire-sized (no GSO super-packets, see :mod:`testbed.ns.links`): an AQM, or netem loss,
    duplication, corruption or reordering. A rate alone, a byte buffer or a pure delay behave
    the same with GSO (HTB and bfifo count every segment's bytes), and so does a buffer given
    in packets, or in bytes too few for two GSO packets: its segmenter cuts GSO packets into
    wire-sized ones before the fifo counts them (:func:`testbed.tc.qdiscs.tbf.segmented`). A
    loss step of a link trace (testbed/live/trace_player.py) counts too: GSO cannot be turned off
    while the lab runs.

    Two cases keep packet buffers on wire-sized packets. The segmenter cuts only GSO packets
    longer than one frame of its link, so on a link whose MTU is above another link's of the
    plan (TCP's segments then follow the smaller MTU) a GSO packet of a few segments would
    fit one frame and count once. And a spraying router (``load_balancing: packet``) turns
    per-packet choices into per-aggregate ones under GSO, which would change the reordering
    a packet-buffered spraying experiment measures."""
    if any(st.loss_pct for tr in plan.traces for st in tr.steps):
        return True
    packet_buffers = False
    smallest_mtu = min((lk.mtu for lk in plan.links), default=0)
    for lk in plan.links:
        for s in (lk.a_to_b, lk.b_to_a):
            if s.aqm != "fifo" or s.loss_pct or s.loss_gemodel or s.duplicate_pct \
                    or s.corrupt_pct or s.reorder_pct:
                return True
            if counts_packets(s):
                packet_buffers = True
                if lk.mtu > smallest_mtu:
                    return True
    return packet_buffers and any(n.load_balancing == "packet" for n in plan.nodes)


def make_layout(plan: LabPlan, run_id: str, wire_packets: bool | None = None) -> Layout:
    """Assign namespaces, ifindexes and recipes for ``plan`` in run ``run_id``;
    ``wire_packets`` None chooses by :func:`needs_wire_packets`. Each link's delay line is its
    ``delay_line`` (``auto``, unresolved: netem; the lab resolves it at bring-up).

    Raises LabError for a link endpoint on an unknown node or an interface name used twice on
    one node (topologies/ validates this; the runtime does not trust it blindly).
    """
    nodes = {n.name: NodeLayout(n.name, n.kind, netns_name(run_id, n.name)) for n in plan.nodes}
    for n in plan.nodes:
        if n.kind == "switch" and n.datapath == "bridge":  # OVS switches have no Linux bridge
            nodes[n.name].index[BRIDGE] = FIRST_IFINDEX
    for link in plan.links:
        for ep in (link.a, link.b):
            if ep.node not in nodes:
                raise LabError(f"link {link.name}: unknown node {ep.node}")
            idx = nodes[ep.node].index
            if ep.ifname in idx:
                raise LabError(f"node {ep.node}: interface {ep.ifname} used twice")
            idx[ep.ifname] = FIRST_IFINDEX + 1 + len(idx)
    wire = needs_wire_packets(plan) if wire_packets is None else wire_packets
    lines = {(lk.name, d): "netem" if lk.delay_line == "auto" else lk.delay_line
             for lk in plan.links for d in DIRECTIONS}
    layout = Layout(run_id, nodes, {}, wire, lines)
    for link in plan.links:
        for d in DIRECTIONS:
            recipe = recipe_for(layout, link, d, getattr(link, d))
            layout.recipes[(link.name, d)] = recipe
            if recipe.ifb:
                rx = nodes[recipe.rx_node]
                rx.index[recipe.ifb] = IFB_INDEX_BASE + rx.index[recipe.rx_dev]
    return layout
