"""Keep aitb's ingress delay lines on the ports of OVS switches. Root.

ovs-vswitchd applies a port's ingress policing (``ingress_policing_rate``, 0 here) by
deleting the port's ingress qdisc, and it does so again at every later reconfiguration once a
link event of that port (RTM_NEWLINK: up, carrier, master, alias) has invalidated its cached
policing state (lib/netdev-linux.c, ``netdev_linux_set_policing`` and
``netdev_linux_update__``). Bring-up makes such events after the switch's ports were added
(ports and peers come up, the kernel datapath enslaves its ports), and vswitchd handles them
whenever its main loop gets to them: seen in the TCG VM, the ingress qdisc (the redirect into
an IFB with netem) of 3 of 4 host ports of a kernel-datapath leaf-spine was gone when the lab
was read back. So after configuration aitb lets every vswitchd catch up (unixctl round trips
are served by the same main loop, after it processed pending netlink events and ran the
reconfiguration they caused), puts back the ingress objects that were removed, and repeats
until a round finds nothing removed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from models.errors import LabError
from testbed.lab.realise import add_tc
from testbed.ns.nl import F_CREATE, F_EXCL, Batch, dump
from testbed.ovs import switches as ovs
from testbed.tc.msgs import RTM_GETQDISC, TcMsg

if TYPE_CHECKING:
    from testbed.lab.handle import LabHandle

__all__ = ["settle", "SETTLE_ROUNDS"]

SETTLE_ROUNDS = 6
INGRESS_HANDLE = 0xFFFF0000
LOOP_TURNS = 3  # round trips per round: events read, reconfiguration run, one to spare


def _ingress_devs(lab: LabHandle, node: str) -> set[str]:
    """Ports of ``node`` that the plan gives an ingress qdisc."""
    return {o.dev for o in lab.layout.tc_objects(node)
            if o.verb == "qdisc" and o.parent == "ingress"}


def _missing_ingress(lab: LabHandle, node: str) -> list[str]:
    want = _ingress_devs(lab, node)
    if not want:
        return []
    index = lab.layout.nodes[node].ifindex
    have = {m["index"] for m in dump(lab.node_io(node).sock, TcMsg(), RTM_GETQDISC,
                                     f"node {node}") if m["handle"] == INGRESS_HANDLE}
    return sorted(d for d in want if index(d) not in have)


def _restore(lab: LabHandle, node: str, devs: list[str]) -> None:
    objs = tuple(o for o in lab.layout.tc_objects(node) if o.dev in devs
                 and (o.parent == "ingress" or (o.verb == "filter" and o.parent == "ffff:")))
    batch = Batch(lab.node_io(node).sock, f"node {node}")
    add_tc(batch, lab.layout.nodes[node], objs, F_CREATE | F_EXCL)
    batch.commit()


def settle(lab: LabHandle) -> dict[str, list[str]]:
    """Let every OVS switch's vswitchd process the bring-up's link events, then restore the
    ingress qdiscs and filters it deleted; returns switch -> ports restored (over all
    rounds). Raises LabError if they are still being removed after :data:`SETTLE_ROUNDS`
    rounds, CommandError if a vswitchd does not answer."""
    restored: dict[str, list[str]] = {}
    for _ in range(SETTLE_ROUNDS):
        for d in lab.ovs.values():
            for _turn in range(LOOP_TURNS):
                ovs.appctl(d, "version")
        lost = {s: _missing_ingress(lab, s) for s in lab.ovs}
        lost = {s: devs for s, devs in lost.items() if devs}
        if not lost:
            return restored
        for s, devs in lost.items():
            _restore(lab, s, devs)
            restored.setdefault(s, []).extend(devs)
    raise LabError(f"ovs-vswitchd keeps removing aitb's ingress qdiscs ({restored}) after "
                   f"{SETTLE_ROUNDS} rounds")
