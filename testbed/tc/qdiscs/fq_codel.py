"""fq_codel (sch_fq_codel): the ``fq_codel`` AQM, flow queueing with CoDel per flow.

Its limit is the buffer in packets (a byte buffer divided by one frame); ``ecn`` marks instead
of dropping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from models.shaping import Shaping
from testbed.tc.qdiscs.common import ETH_HLEN, Spec, TcLike, buffer_bytes

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "AQM", "leaf", "words",
           "options", "problems", "stats"]

KINDS = ("fq_codel",)
CAPABILITIES = ("fq_codel",)
KMODS = ("sch_fq_codel",)
NLA: dict[str, Any] = {}  # pyroute2 decodes fq_codel itself
AQM = "fq_codel"


def leaf(shaping: Shaping, mtu: int) -> Spec:
    """(kind, params): ``limit_packets`` (at least 1) and ``ecn``."""
    return "fq_codel", {"limit_packets": max(1, buffer_bytes(shaping, mtu) // (mtu + ETH_HLEN)),
                        "ecn": shaping.ecn}


def words(o: TcLike) -> list[str]:
    """``limit N ecn|noecn``."""
    p = o.params
    return ["limit", str(p["limit_packets"])] + (["ecn"] if p["ecn"] else ["noecn"])


def options(o: TcLike, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    """TCA_FQ_CODEL_LIMIT and TCA_FQ_CODEL_ECN."""
    p = o.params
    return {"attrs": [["TCA_FQ_CODEL_LIMIT", p["limit_packets"]],
                      ["TCA_FQ_CODEL_ECN", 1 if p["ecn"] else 0]]}


def problems(o: TcLike, opts: Any) -> list[str]:
    """Readback compares the kind only (found by testbed.lab.verify)."""
    return []


def stats(opts: Any) -> dict[str, Any]:
    """Nothing beyond the counters."""
    return {}
