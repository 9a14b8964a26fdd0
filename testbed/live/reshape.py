"""Changes to a live lab: new shaping for one direction of a link; waiting for STP.

Shaping changes in place (``tc ... change``: NLM_F_REPLACE-less RTM_NEWQDISC/NEWTCLASS) when
the object structure stays the same (new rate, buffer size, delay, loss...), so no packet is
dropped by the change itself. When the structure changes (a rate appears, pfifo becomes
bfifo, a delay line appears or goes), the sender's root qdisc is deleted and rebuilt, and the
receiver's IFB/ingress redirect is created or removed.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import TYPE_CHECKING

from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from models.errors import LabError
from models.plan import LinkPlan, plan_to_dict
from models.shaping import Shaping
from testbed.lab.layout import (
    BRIDGE,
    DIRECTIONS,
    IFB_INDEX_BASE,
    needs_wire_packets,
    owner_alias,
    recipe_for,
)
from testbed.lab.realise import add_ifb, add_tc
from testbed.ns.links import RTM_GETLINK
from testbed.ns.nl import F_CREATE, F_EXCL, Batch, dump
from testbed.tc import ecn_marker
from testbed.tc.msgs import RTM_DELQDISC, TC_H_INGRESS, TC_H_ROOT, TcMsg
from testbed.tc.objects import DirectionRecipe, TcObject

if TYPE_CHECKING:
    from testbed.lab.handle import LabHandle

__all__ = ["set_shaping", "wait_stp"]

BR_STATE_LISTENING, BR_STATE_LEARNING = 1, 2


def _shape(objs: tuple[TcObject, ...]) -> tuple[tuple[str, str, str, str | None, str], ...]:
    return tuple((o.verb, o.dev, o.parent, o.handle, o.kind) for o in objs)


def _del_qdisc(batch: Batch, index: int, parent: int, what: str) -> None:
    m = TcMsg()
    m["index"], m["parent"] = index, parent
    batch.add(m, RTM_DELQDISC, 0, what)


def _egress(lab: LabHandle, old: DirectionRecipe, new: DirectionRecipe) -> Batch:
    node = lab.layout.nodes[new.tx_node]
    batch = Batch(lab.io[new.tx_node].sock, f"node {new.tx_node}")
    if _shape(old.egress) == _shape(new.egress):
        # HTB's root has nothing to change (default class 1) and refuses "change"; the
        # segmenter never changes, and a "change" of it would reset its child's limit
        add_tc(batch, node, tuple(o for o in new.egress
                                  if o.verb != "qdisc" or o.kind not in ("htb", "tbf")),
               0, "change")
        return batch
    if old.egress:
        _del_qdisc(batch, node.ifindex(new.tx_dev), TC_H_ROOT,
                   f"node {node.name}: delete root qdisc of {new.tx_dev}")
    add_tc(batch, node, new.egress, F_CREATE | F_EXCL)
    return batch


def _ingress(lab: LabHandle, old: DirectionRecipe, new: DirectionRecipe, mtu: int) -> Batch:
    node = lab.layout.nodes[new.rx_node]
    batch = Batch(lab.io[new.rx_node].sock, f"node {new.rx_node}")
    if old.ifb and new.ifb:
        add_tc(batch, node, new.ingress[:1], 0, "change")  # the netem on the IFB
    elif new.ifb:
        node.index[new.ifb] = IFB_INDEX_BASE + node.ifindex(new.rx_dev)
        lab.registry.append([{"kind": "ifb", "node": node.name, "ifname": new.ifb}])
        add_ifb(batch, node, new.ifb, mtu, owner_alias(lab.run_id))
        add_tc(batch, node, new.ingress, F_CREATE | F_EXCL)
    elif old.ifb:
        _del_qdisc(batch, node.ifindex(old.rx_dev), TC_H_INGRESS,
                   f"node {node.name}: delete ingress qdisc of {old.rx_dev}")
        m = ifinfmsg()
        m["index"] = node.index.pop(old.ifb)
        batch.add(m, 17, 0, f"node {node.name}: delete {old.ifb}")  # RTM_DELLINK
    return batch


def _find_link(lab: LabHandle, link_name: str, direction: str) -> LinkPlan:
    if direction not in DIRECTIONS:
        raise LabError(f"link {link_name}: direction must be one of {', '.join(DIRECTIONS)}, "
                       f"not {direction!r}")
    for lk in lab.plan.links:
        if lk.name == link_name:
            return lk
    raise LabError(f"unknown link {link_name!r}; known: "
                   + ", ".join(lk.name for lk in lab.plan.links))


def set_shaping(lab: LabHandle, link_name: str, direction: str, shaping: Shaping,
                read_back: bool = True) -> None:
    """See :meth:`testbed.lab.lab.Lab.set_shaping`."""
    link = _find_link(lab, link_name, direction)
    probe = dataclasses.replace(lab.plan, links=(dataclasses.replace(link, **{direction:
                                                                            shaping}),))
    if needs_wire_packets(probe) and not lab.layout.wire_packets:
        raise LabError(f"link {link_name} {direction}: this shaping counts packets (an AQM or "
                       "netem loss, duplication, corruption or reordering), but the lab runs "
                       "with GSO super-packets; "
                       "create the Lab with wire_packets=True to change to it later")
    old = lab.layout.recipes[(link_name, direction)]
    new = recipe_for(lab.layout, link, direction, shaping)
    lab.layout.set_recipe((link_name, direction), new)
    new_link = dataclasses.replace(link, **{direction: shaping})
    lab.plan = dataclasses.replace(lab.plan, links=tuple(
        new_link if lk.name == link_name else lk for lk in lab.plan.links))
    ingress = _ingress(lab, old, new, link.mtu)  # new delay line before the sender changes
    ingress.commit()
    _egress(lab, old, new).commit()
    ecn_marker.reshaped(lab, new_link, direction, shaping)  # its rate, K; a rebuilt root
    if read_back:
        (lab.registry.dir / "plan.json").write_text(json.dumps(plan_to_dict(lab.plan)))
        lab.verify([new.tx_node, new.rx_node])


def _ports_settling(lab: LabHandle, node: str) -> list[str]:
    req = ifinfmsg()
    req["family"] = 7  # AF_BRIDGE: one message per bridge port, with IFLA_PROTINFO
    out = []
    for m in dump(lab.io[node].sock, req, RTM_GETLINK, node):
        info = m.get_attr("IFLA_PROTINFO")
        state = info.get_attr("IFLA_BRPORT_STATE") if info is not None else None
        if state in (BR_STATE_LISTENING, BR_STATE_LEARNING):
            out.append(m.get_attr("IFLA_IFNAME"))
    return out


def wait_stp(lab: LabHandle, timeout_s: float) -> None:
    """Wait until no port of an STP bridge is listening or learning (forwarding or blocking);
    raise LabError naming the ports still settling after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    nodes = [n.name for n in lab.plan.nodes if n.kind == "switch" and n.stp]
    while True:
        settling = {n: p for n in nodes if (p := _ports_settling(lab, n))}
        if not settling:
            return
        if time.monotonic() > deadline:
            raise LabError(f"STP did not converge in {timeout_s:g} s; ports still settling: "
                           + "; ".join(f"{n} ({BRIDGE}): {', '.join(p)}"
                                       for n, p in settling.items()))
        time.sleep(0.2)
