"""The Mininet backend: the same :class:`~models.plan.LabPlan` realised with Mininet's
hosts, switches and links, and aitb's own shaping, addresses, routes and teardown.

    with MininetLab(plan) as lab:            # Lab's interface: popen, run, set_shaping, ...
        lab.net                              # the live mininet.net.Mininet (CLI: lab.cli())

What Mininet does: every node is a Mininet node (``Host`` for hosts and routers, a
``LinuxBridge`` subclass for switches), i.e. a ``mnexec -cdn bash`` shell in a namespace of its
own, and every plan link is a Mininet ``Link`` (a veth pair made by ``ip link add`` in the
``a`` node's shell, peer straight into the ``b`` node's namespace). What aitb does, exactly as
in the native backend and through the same code: each node's namespace is bind-mounted as
``aitb-<run_id>-<node>`` and registered the moment it exists; sysctls; the bridge ``br0`` and
its ports; MTU, MAC and wire-sized packets; addresses, routes (with forwarding hosts' node
addresses and ip_forward, and multi-NIC hosts' per-source tables) and the tc recipes of
:mod:`testbed.tc.recipe` (HTB + buffer, IFB + netem) through netlink (not Mininet's TCLink, which
drops rates above 1 Gbit/s and lets netem's queue stand in for the buffer); the readback of
:mod:`testbed.lab.verify`. Agents run as processes of the Mininet hosts: the launcher enters the
host's namespace (that of the shell's pid) and starts them there.

Teardown is owner-marked like the native one and never Mininet's global ``mn -c``: agents and
node shells are ended by pid and start time, namespaces removed by their exact names; the
veths go with them. Nothing is made in the host's namespace.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from models.errors import LabError
from models.plan import LabPlan
from testbed.lab import realise
from testbed.lab.clean import TeardownReport, teardown
from testbed.lab.lab import Lab
from testbed.lab.layout import BRIDGE, DIRECTIONS, FIRST_IFINDEX, IFB_INDEX_BASE, recipe_for
from testbed.lab.realise import NodeIO
from testbed.lab.registry import DEFAULT_STATE_DIR, pid_start_time
from testbed.mininet.nodes import AitbBridge, AitbOVS, end_node, mininet_api, new_net
from testbed.ns import netns, sysctl
from testbed.ns.links import RTM_GETLINK, RTM_NEWLINK, bridge_msg
from testbed.ns.nl import F_CREATE, F_EXCL, Batch, dump
from testbed.ovs import settle as ovs_settle
from testbed.routing import load_balance, source_routing
from testbed.tc import ecn_marker

__all__ = ["MininetLab"]


class MininetLab(Lab):
    """A lab of ``plan`` built with Mininet (see the module docstring); root needed.

    controller: ``"host:port"`` of an OpenFlow controller for OVS switches, or None.
    switch: ``"bridge"`` (each switch as the plan says: a Linux bridge unless ``datapath:
    ovs``) or ``"ovs"`` (every switch Open vSwitch, :mod:`testbed.ovs.switches`; each with the
    datapath its ``ovs_datapath`` asks for, by default the kernel's where the kernel has it,
    else the user-space one: :mod:`testbed.ovs.datapath`).
    Other arguments as :class:`testbed.lab.lab.Lab`.

    Side effects (up): Mininet node shells (one process per node), namespaces
    ``aitb-<run_id>-<node>`` and everything inside them; the registry records each shell
    (ended with SIGKILL) and namespace as soon as it exists.
    """

    backend = "mininet"
    line_hold = "receiver"  # Mininet makes the links: no wire namespace between their ends

    def __init__(self, plan: LabPlan, run_id: str | None = None,
                 state_dir: Path = DEFAULT_STATE_DIR, wire_packets: bool | None = None,
                 switch: str = "bridge", controller: str | None = None,
                 line_cpu: int | None = None) -> None:
        if switch not in ("bridge", "ovs"):
            raise LabError(f"unknown switch kind {switch!r}; known: bridge, ovs")
        boxes = [n.name for n in plan.nodes if getattr(n, "image", None)]
        if boxes:  # container hosts (NodePlan.image, testbed/containers/hosts.py): native only
            raise LabError(f"the mininet backend has no container hosts; node(s) "
                           f"{', '.join(boxes)} have an image: use the native backend")
        if plan.routing is not None:  # its routers take the plan's static routes
            raise LabError(f"{plan.source}: routing: frr runs on the native backend only "
                           "(the mininet backend installs the plan's static routes)")
        if switch == "ovs":  # every switch of the plan becomes an OVS switch
            plan = dataclasses.replace(plan, nodes=tuple(
                dataclasses.replace(n, datapath="ovs") if n.kind == "switch" else n
                for n in plan.nodes))
        super().__init__(plan, run_id, state_dir, wire_packets, line_cpu)
        self.ovs_controller = controller
        self.net: Any = None
        mininet_api()  # refuse early, before anything exists, if Mininet is missing

    def _build(self) -> None:
        t = time.perf_counter()
        self.net = new_net(len(self.plan.nodes))
        for n in self.plan.nodes:
            self._add_node(n.name, n.kind)
        t = self._step("namespaces", t)
        ipv6 = sysctl.lab_uses_ipv6(self.plan)
        sysctl.apply_all([(self.io[n.name].fd, n.name,
                           *sysctl.node_sysctls(n, ipv6, self.line_cpu))
                          for n in self.plan.nodes])
        t = self._step("sysctls", t)
        self._bridges()
        for lk in self.plan.links:
            self.net.addLink(self.net[lk.a.node], self.net[lk.b.node], intfName1=lk.a.ifname,
                             intfName2=lk.b.ifname)
        self._adopt_indexes()
        self._link_attrs()
        t = self._step("links", t)
        self.registry.append({"kind": "ifb", "node": r.rx_node, "ifname": r.ifb}
                             for r in self.layout.recipes.values() if r.ifb)
        self._start_ovs()  # before tc: OVS resets the qdiscs of a port it adds
        for name, daemons in self.ovs.items():
            self.net[name].ovs = daemons
        t = time.perf_counter()
        links_of = realise.links_by_node(self.plan)
        for n in self.plan.nodes:
            realise.configure_node(n, self.layout, self.io[n.name], links_of)
        load_balance.apply(self)
        source_routing.apply(self)  # multi-NIC hosts' per-source tables
        self._name_addresses()
        t = self._step("configure", t)
        self.net.start()
        self._wait_stp()
        self.ovs_restored = ovs_settle.settle(self)  # vswitchd may reset ingress qdiscs
        self._apply_delay_lines()  # native: helpers enter the Mininet nodes' namespaces
        ecn_marker.apply(self)  # ECN marking at a threshold, as in the native backend
        self.verify()
        self._step("verify", t)

    def _add_node(self, name: str, kind: str) -> None:
        """Start the Mininet node ``name``, register its shell, bind-mount its namespace."""
        if kind == "switch" and self.plan.node(name).datapath == "ovs":
            node = self.net.addSwitch(name, cls=AitbOVS(), inNamespace=True, datapath={
                "system": "kernel", "netdev": "user"}[self.ovs_datapaths[name]])
        elif kind == "switch":
            node = self.net.addSwitch(name, cls=AitbBridge(), inNamespace=True)
        else:
            node = self.net.addHost(name, ip=None, inNamespace=True)
        start = pid_start_time(node.pid)
        ns = self.layout.nodes[name].netns
        self.registry.append([{"kind": "process", "node": name, "pid": node.pid,
                               "start": -1 if start is None else start, "signal": "KILL",
                               "argv": ["mininet", name]},
                              {"kind": "netns", "node": name, "name": ns}])
        netns.attach_pid(ns, node.pid)
        fd = netns.open_fd(ns)
        self.io[name] = NodeIO(fd, netns.socket_in(fd))

    def _bridges(self) -> None:
        """``br0`` in every switch's namespace at the planned index (before any port)."""
        for n in self.plan.nodes:
            if n.kind == "switch" and n.datapath == "bridge":
                b = Batch(self.io[n.name].sock, f"node {n.name}")
                b.add(bridge_msg(FIRST_IFINDEX, n.stp), RTM_NEWLINK, F_CREATE | F_EXCL,
                      f"node {n.name}: create bridge {BRIDGE}")
                b.commit()

    def _adopt_indexes(self) -> None:
        """Mininet's veths got kernel-chosen ifindexes: read them back by name, then re-place
        the IFBs and recompute the recipes that name them. Raises LabError for a veth that
        Mininet failed to make (its shell's exit status is not checked by Mininet)."""
        for name, node in self.layout.nodes.items():
            got = {m.get_attr("IFLA_IFNAME"): m["index"]
                   for m in dump(self.io[name].sock, ifinfmsg(), RTM_GETLINK, f"node {name}")}
            planned = _planned(self, name)
            for ifname in [i for i in node.index if i != BRIDGE and i in planned]:
                if ifname not in got:
                    raise LabError(f"node {name}: Mininet did not create interface {ifname}")
                node.index[ifname] = got[ifname]
            for ifname in [i for i in node.index if node.index[i] >= IFB_INDEX_BASE]:
                del node.index[ifname]
        for lk in self.plan.links:
            for d in DIRECTIONS:
                r = recipe_for(self.layout, lk, d, getattr(lk, d))
                self.layout.set_recipe((lk.name, d), r)
                if r.ifb:
                    rx = self.layout.nodes[r.rx_node]
                    rx.index[r.ifb] = IFB_INDEX_BASE + rx.index[r.rx_dev]

    def _link_attrs(self) -> None:
        """MTU, planned MAC and (wire_packets) GSO_MAX_SEGS=1 on every veth end."""
        batches = {n: Batch(self.io[n].sock, f"node {n}") for n in self.io}
        for lk in self.plan.links:
            for ep in (lk.a, lk.b):
                attrs: list[list[Any]] = [["IFLA_MTU", lk.mtu]]
                if self.layout.wire_packets:
                    attrs.append(["IFLA_GSO_MAX_SEGS", 1])
                if ep.mac:
                    attrs.append(["IFLA_ADDRESS", ep.mac])
                m = ifinfmsg()
                m["index"] = self.layout.nodes[ep.node].ifindex(ep.ifname)
                m["attrs"] = attrs
                batches[ep.node].add(m, RTM_NEWLINK, 0,
                                     f"node {ep.node}: set mtu/mac/gso of {ep.ifname}")
        for b in batches.values():
            b.commit()

    def _name_addresses(self) -> None:
        """Tell Mininet's interface objects their plan addresses (bookkeeping only, so that
        the Mininet CLI's ``h1 ping h2`` resolves names); aitb already configured them."""
        for lk in self.plan.links:
            for ep in (lk.a, lk.b):
                intf = self.net[ep.node].intf(ep.ifname)
                if ep.ipv4 is not None:
                    intf.ip, intf.prefixLen = str(ep.ipv4.ip), ep.ipv4.network.prefixlen
                if ep.mac:
                    intf.mac = ep.mac

    def _teardown(self) -> TeardownReport:
        t = time.perf_counter()
        failures = self._teardown_delay_lines()
        ecn_marker.close_all(self)
        self.release()
        if self.net is not None:
            for node in [*self.net.hosts, *self.net.switches, *self.net.controllers]:
                end_node(node)
        report = teardown(self.registry, self.children, self.keep_owner)
        report.failures[:0] = failures
        self.children = {}
        self.net = None
        self._step("down", t)
        return report

    def cli(self) -> None:
        """Mininet's interactive CLI on this live lab (blocks until the user exits it)."""
        mininet_api()["CLI"](self.net)


def _planned(lab: MininetLab, node: str) -> set[str]:
    return {lk.endpoint(node).ifname for lk in lab.plan.links if node in (lk.a.node, lk.b.node)}
