"""The ``netem`` delay line: netem on an IFB in the receiving node's namespace.

Traffic arriving on the receiving interface is redirected (ingress qdisc ``ffff:``, a u32
match-all filter with a mirred action) to the IFB, whose root qdisc is netem
(:mod:`testbed.tc.qdiscs.netem`). Everything is tc objects: they are created, read back and
removed with the rest of the lab's tc and devices, so :func:`apply`, :func:`verify` and
:func:`teardown` have nothing left to do. Needs netem (missing on some kernels: then
``aitb --vm``) and IFB devices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from testbed.tc.objects import DirectionRecipe, TcObject
from testbed.tc.qdiscs import netem

if TYPE_CHECKING:
    from models.shaping import Shaping
    from testbed.lab.handle import LabHandle

__all__ = ["NAME", "CAPABILITIES", "ingress", "apply", "verify", "teardown"]

NAME = "netem"
CAPABILITIES = ("netem", "ifb")


def ingress(shaping: Shaping, mtu: int, rx: tuple[str, str], ifb: str
            ) -> tuple[str | None, tuple[TcObject, ...]]:
    """(``ifb``, objects) for the delay line of traffic arriving at ``rx`` = (node, ifname):
    netem on ``ifb`` first, so it exists before traffic is redirected into it. Pure."""
    rx_node, rx_dev = rx
    return ifb, (
        TcObject("qdisc", rx_node, ifb, "root", "1:", "netem", netem.params(shaping, mtu)),
        TcObject("qdisc", rx_node, rx_dev, "ingress", "ffff:", "ingress"),
        TcObject("filter", rx_node, rx_dev, "ffff:", None, "u32",
                 {"prio": 1, "redirect_dev": ifb}),
    )


def apply(lab: LabHandle, recipe: DirectionRecipe) -> None:
    """Nothing beyond the tc objects (applied with the lab's tc)."""


def verify(lab: LabHandle, recipe: DirectionRecipe) -> list[str]:
    """Nothing beyond the tc objects (read back by testbed.lab.verify with the lab's tc)."""
    return []


def teardown(lab: LabHandle, recipe: DirectionRecipe) -> list[str]:
    """Nothing: the IFB and its qdiscs go with the receiving namespace."""
    return []
