"""A lab plan split into one plan per machine. Pure.

Machine M's plan holds M's nodes and the links between them, and for every link cut between M
and another machine a proxy switch ``x<k>`` (k: the link's index in the plan) that stands for
the far end: the link's local end is as planned (addresses, shaping), its far end is a port of
the proxy's Linux bridge with no address and no shaping (the far machine shapes that
direction). After bring-up the VXLAN device of the cut link (orchestration.cluster.tunnels) is
moved into the proxy's namespace and joined to its bridge (:func:`proxy_argvs`), so frames
cross the underlay at layer 2 and the routes of the plan hold unchanged.
"""

from __future__ import annotations

import dataclasses

from models.plan import Endpoint, LabPlan, NodePlan
from models.shaping import Shaping
from orchestration.cluster.tunnels import Tunnel, vxlan_argvs

__all__ = ["proxy_name", "partition", "proxy_argvs"]


def proxy_name(index: int) -> str:
    """The proxy switch of the plan's link number ``index``."""
    return f"x{index}"


def partition(plan: LabPlan, where: dict[str, str], machine: str) -> LabPlan:
    """``machine``'s plan (module docstring); ``where``: node -> machine."""
    nodes = [n for n in plan.nodes if where[n.name] == machine]
    links = []
    for i, lk in enumerate(plan.links):
        here_a, here_b = where[lk.a.node] == machine, where[lk.b.node] == machine
        if here_a and here_b:
            links.append(lk)
        elif here_a or here_b:
            proxy = proxy_name(i)
            nodes.append(NodePlan(proxy, "switch"))
            far = Endpoint(proxy, "p0")
            if here_a:
                links.append(dataclasses.replace(lk, b=far, b_to_a=Shaping()))
            else:
                links.append(dataclasses.replace(lk, a=far, a_to_b=Shaping()))
    return LabPlan(f"{plan.name}-{machine}", tuple(nodes), tuple(links), plan.source)


def proxy_argvs(t: Tunnel, side: str, index: int, cluster, netns: str) -> list[list[str]]:
    """The commands that join tunnel ``t``'s VXLAN end into the proxy switch namespace
    ``netns`` of the plan's link ``index`` on the machine of ``side``: the device under the
    name ``vx`` + index, in the proxy's bridge, up."""
    out = vxlan_argvs(dataclasses.replace(t, a_ifname=f"vx{index}", b_ifname=f"vx{index}"),
                      side, cluster, netns)
    return [*out[:2], ["ip", "-n", netns, "link", "set", f"vx{index}", "master", "br0", "up"]]
