"""pfifo_head_drop (net/sched/sch_fifo.c): the ``head_drop`` AQM.

A packet-counted FIFO that, when full, drops the packet at its head (the oldest) instead of
the arriving one. The sender then learns of the loss one queue-delay earlier than with tail
drop, and the queue keeps the freshest packets (tc-pfifo(8), "pfifo_head_drop"; Dukkipati
et al., "Proportional rate reduction for TCP", IMC 2011, discuss the earlier loss signal).
The buffer is counted in packets: a buffer given in bytes is divided by one full frame. Built
into every kernel that has sch_fifo (no module to load).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pyroute2.netlink.rtnl.tcmsg import sched_pfifo

from models.shaping import Shaping
from testbed.tc.qdiscs.common import ETH_HLEN, Spec, TcLike, default_buffer_packets

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "AQM", "leaf", "words", "options",
           "problems", "stats"]

KINDS = ("pfifo_head_drop",)
CAPABILITIES = ("pfifo_head_drop",)
KMODS: tuple[str, ...] = ()
NLA = {"pfifo_head_drop": sched_pfifo.options}  # struct tc_fifo_qopt, as pfifo
AQM = "head_drop"


def leaf(shaping: Shaping, mtu: int) -> Spec:
    """(kind, params) of the bottleneck buffer: ``limit_packets`` (a byte buffer becomes
    ceil(bytes / (mtu + 14)) packets, at least one)."""
    buf = shaping.buffer
    if buf is not None and buf.size_bytes is not None:
        packets = max(1, math.ceil(buf.size_bytes / (mtu + ETH_HLEN)))
    else:
        packets = buf.packets if buf is not None else default_buffer_packets()
    return "pfifo_head_drop", {"limit_packets": packets}


def words(o: TcLike) -> list[str]:
    """``limit N`` (packets)."""
    return ["limit", str(o.params["limit_packets"])]


def options(o: TcLike, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    """struct tc_fifo_qopt: the limit in packets."""
    return {"limit": o.params["limit_packets"]}


def problems(o: TcLike, opts: Any) -> list[str]:
    """Readback: the limit."""
    want = o.params["limit_packets"]
    return [] if opts["limit"] == want else [f"limit {opts['limit']}, planned {want}"]


def stats(opts: Any) -> dict[str, Any]:
    """What lab state shows beyond the counters: ``limit``."""
    return {} if opts is None else {"limit": opts["limit"]}
