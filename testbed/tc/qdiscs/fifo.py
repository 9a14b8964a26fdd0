"""pfifo and bfifo (net/sched/sch_fifo.c): tail drop, the ``fifo`` AQM.

The bottleneck buffer of a direction without AQM: bfifo when the buffer is given in bytes,
pfifo (packets; :func:`~testbed.tc.qdiscs.common.default_buffer_packets` when none is given)
otherwise. Both are built into every kernel (no module to load).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyroute2.netlink.rtnl.tcmsg import sched_pfifo

from models.shaping import Shaping
from testbed.tc.qdiscs.common import Spec, TcLike, default_buffer_packets

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "AQM", "leaf", "words", "options",
           "problems", "stats"]

KINDS = ("pfifo", "bfifo")
CAPABILITIES = ("pfifo", "bfifo")
KMODS: tuple[str, ...] = ()
NLA = {"bfifo": sched_pfifo.options}  # pyroute2 decodes pfifo itself, not bfifo
AQM = "fifo"


def leaf(shaping: Shaping, mtu: int) -> Spec:
    """(kind, params) of the bottleneck buffer: bfifo ``limit_bytes`` or pfifo
    ``limit_packets``."""
    buf = shaping.buffer
    if buf is not None and buf.size_bytes is not None:
        return "bfifo", {"limit_bytes": buf.size_bytes}
    return "pfifo", {"limit_packets": buf.packets if buf is not None
                     else default_buffer_packets()}


def words(o: TcLike) -> list[str]:
    """``limit N`` (pfifo, packets) or ``limit Nb`` (bfifo, bytes)."""
    if o.kind == "bfifo":
        return ["limit", f"{o.params['limit_bytes']}b"]
    return ["limit", str(o.params["limit_packets"])]


def options(o: TcLike, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    """struct tc_fifo_qopt: the limit (packets or bytes)."""
    p = o.params
    return {"limit": p["limit_bytes"] if o.kind == "bfifo" else p["limit_packets"]}


def problems(o: TcLike, opts: Any) -> list[str]:
    """Readback: the limit."""
    want = o.params.get("limit_packets", o.params.get("limit_bytes"))
    return [] if opts["limit"] == want else [f"limit {opts['limit']}, planned {want}"]


def stats(opts: Any) -> dict[str, Any]:
    """What lab state shows beyond the counters: ``limit``."""
    return {} if opts is None else {"limit": opts["limit"]}
