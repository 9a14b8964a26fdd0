"""tc objects (:class:`testbed.tc.objects.TcObject`) as rtnetlink messages.

pyroute2 0.9's tc plugins cover HTB, pfifo, fq_codel, ingress, u32 and mirred, but not bfifo,
red, netem's Gilbert-Elliott loss, delay distributions or 64-bit latencies, and its HTB helper
truncates the burst to whole microseconds (0 at 400 Gbit/s). :class:`TcMsg` is pyroute2's
``tcmsg`` with the option classes of :mod:`testbed.tc.qdiscs` for those kinds; each kind's
``TCA_OPTIONS`` come from its module there (HTB bursts in scheduler ticks of 64 ns).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from pyroute2.netlink.rtnl.tcmsg import tcmsg

from testbed.tc import qdiscs

__all__ = ["TcMsg", "handle", "tc_message", "RTM_NEWQDISC", "RTM_NEWTCLASS", "RTM_NEWTFILTER",
           "RTM_DELQDISC", "RTM_GETQDISC", "RTM_GETTCLASS"]

RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTCLASS, RTM_GETTCLASS = 40, 42
RTM_NEWTFILTER = 44
TC_H_ROOT, TC_H_INGRESS = 0xFFFFFFFF, 0xFFFFFFF1
ETH_P_ALL = 0x0003


class TcMsg(tcmsg):
    """pyroute2's tcmsg, decoding TCA_OPTIONS with the option classes of
    :mod:`testbed.tc.qdiscs` where a discipline module has one (htb, bfifo, netem, red)."""

    # pyroute2 keeps "NLA table compiled" as a class attribute that subclasses inherit: once
    # its own tcmsg has been used in this process (e.g. by the capability probe), TcMsg would
    # reuse tcmsg's table and its option classes, dropping TCA_NETEM_LATENCY64 and friends.
    _nlmsg_base__compiled_nla = False

    @staticmethod
    def get_options(self: Any, *argv: Any, **kwarg: Any) -> Any:  # noqa: D102
        return (qdiscs.nla_options(self.get_attr("TCA_KIND"))
                or tcmsg.get_options(self, *argv, **kwarg))


def handle(text: str) -> int:
    """tc's ``"1:"``/``"1:1"``/``"root"``/``"ingress"`` as the kernel's 32-bit handle."""
    if text == "root":
        return TC_H_ROOT
    if text == "ingress":
        return TC_H_INGRESS
    major, _, minor = text.partition(":")
    return (int(major or "0", 16) << 16) | int(minor or "0", 16)


def tc_message(obj: Any, ifindex_of: Callable[[str], int]) -> tuple[TcMsg, int]:
    """The request that creates (or, with NLM_F_REPLACE, changes) ``obj`` (a TcObject);
    ``ifindex_of(dev)`` resolves interface names of obj's node. Returns (message, type)."""
    msg = TcMsg()
    msg["family"] = socket.AF_UNSPEC
    msg["index"] = ifindex_of(obj.dev)
    msg["parent"] = handle(obj.parent)
    msg["handle"] = handle(obj.handle) if obj.handle else 0
    if obj.verb == "filter":
        msg["info"] = (obj.params["prio"] << 16) | socket.htons(ETH_P_ALL)
    msg["attrs"] = [["TCA_KIND", obj.kind]]
    opts = qdiscs.module(obj.kind).options(obj, ifindex_of)
    if opts is not None:
        msg["attrs"].append(["TCA_OPTIONS", opts])
    mtype = {"qdisc": RTM_NEWQDISC, "class": RTM_NEWTCLASS, "filter": RTM_NEWTFILTER}[obj.verb]
    return msg, mtype
