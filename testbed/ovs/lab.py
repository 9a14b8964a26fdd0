"""Bring-up and readback of a lab's OVS switches (:mod:`testbed.ovs.switches`), for either backend:
the stations' MACs are read from the kernel (or taken from the plan), the rules computed by
:mod:`testbed.ovs.flows`, then per switch its daemons are started and configured with the
datapath :mod:`testbed.ovs.datapath` chose (``lab.ovs_datapaths``), which is read back from
the switch's namespace through rtnetlink and recorded in the run's registry as
``{"kind": "ovs", "node": ..., "datapath": "system"|"netdev"}``. Root."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from testbed.ns.links import RTM_GETLINK
from testbed.ns.nl import dump
from testbed.ovs import switches as ovs
from testbed.ovs.flows import OvsRules, ovs_rules, ovs_switches

if TYPE_CHECKING:
    from testbed.lab.handle import LabHandle

__all__ = ["station_macs", "bring_up", "check_all", "seen_datapath", "recorded_datapaths"]

OVS_LINK_KIND = "openvswitch"  # rtnetlink kind of the kernel datapath's own device


def station_macs(lab: LabHandle) -> dict[str, str]:
    """``"node:ifname"`` -> MAC of every host/router interface linked to an OVS switch: the
    plan's fixed MAC, else the kernel's (read from the station's namespace)."""
    switches = set(ovs_switches(lab.plan))
    out: dict[str, str] = {}
    for lk in lab.plan.links:
        for here, there in ((lk.a, lk.b), (lk.b, lk.a)):
            if there.node in switches and here.node not in switches:
                out[f"{here.node}:{here.ifname}"] = here.mac or _kernel_mac(lab, here.node,
                                                                             here.ifname)
    return out


def _kernel_mac(lab: LabHandle, node: str, ifname: str) -> str:
    index = lab.layout.nodes[node].ifindex(ifname)
    for m in dump(lab.node_io(node).sock, ifinfmsg(), RTM_GETLINK, f"node {node}"):
        if m["index"] == index:
            return str(m.get_attr("IFLA_ADDRESS"))
    raise KeyError(f"node {node}: no interface {ifname} (index {index})")


def bring_up(lab: LabHandle) -> tuple[dict[str, ovs.OvsDaemons], dict[str, OvsRules]]:
    """Start and configure every OVS switch of ``lab`` (daemons registered with the lab);
    returns (switch -> daemons, switch -> rules). Raises LabError/CommandError."""
    names = ovs_switches(lab.plan)
    if not names:
        return {}, {}
    rules = ovs_rules(lab.plan, station_macs(lab))
    daemons = {}
    for s in names:
        daemons[s] = ovs.start_daemons(s, lab.registry.dir / "ovs" / s,
                                       functools.partial(lab.popen, s))
        ovs.configure(daemons[s], lab.plan, rules[s], lab.ovs_controller,
                      lab.ovs_datapaths[s])
        lab.registry.append([{"kind": "ovs", "node": s, "datapath": seen_datapath(lab, s)}])
    return daemons, rules


def seen_datapath(lab: LabHandle, node: str) -> str:
    """The datapath switch ``node`` has, read from its namespace through rtnetlink:
    ``system`` when a device of kind ``openvswitch`` (the kernel datapath ``ovs-system`` or
    its bridge port) is there, else ``netdev``."""
    for m in dump(lab.node_io(node).sock, ifinfmsg(), RTM_GETLINK, f"node {node}"):
        info = m.get_attr("IFLA_LINKINFO")
        if info is not None and info.get_attr("IFLA_INFO_KIND") == OVS_LINK_KIND:
            return "system"
    return "netdev"


def recorded_datapaths(lab: LabHandle) -> dict[str, str]:
    """switch -> the datapath recorded at bring-up (from the run's registry)."""
    return {r["node"]: r["datapath"] for r in lab.registry.records() if r["kind"] == "ovs"}


def check_all(lab: LabHandle, daemons: dict[str, ovs.OvsDaemons], rules: dict[str, OvsRules]
              ) -> list[str]:
    """Differences between the OVS switches and their plan (see :func:`testbed.ovs.switches.check`),
    and between the datapath each has and the one chosen for it."""
    problems = [p for s, d in daemons.items()
                for p in ovs.check(d, lab.plan, rules[s], lab.ovs_controller)]
    for s in daemons:
        got, want = seen_datapath(lab, s), lab.ovs_datapaths.get(s)
        if want is not None and got != want:
            problems.append(f"node {s}: OVS datapath is {got}, chosen {want}")
    return problems
