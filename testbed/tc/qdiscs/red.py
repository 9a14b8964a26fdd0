"""RED (sch_red): the ``red`` AQM, parameters after tc-red(8).

max = limit/4, min = max/3, avpkt = one frame, probability 0.1, bandwidth = the line rate;
``ecn`` marks instead of dropping. pyroute2 0.9 has no RED plugin: :class:`RedOptions` is one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyroute2.netlink import nla
from pyroute2.netlink.rtnl.tcmsg.common import red_eval_ewma, red_eval_idle_damping, red_eval_P

from models.shaping import Shaping
from models.units import format_rate
from testbed.tc.qdiscs.common import ETH_HLEN, UNSHAPED_RATE_BPS, Spec, TcLike, buffer_bytes

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "AQM", "RedOptions", "leaf", "words",
           "options", "problems", "stats"]

KINDS = ("red",)
CAPABILITIES = ("red",)
KMODS = ("sch_red",)
AQM = "red"


class RedOptions(nla):
    """TCA_RED_PARMS (struct tc_red_qopt), STAB and MAX_P."""

    nla_map = (("TCA_RED_UNSPEC", "none"), ("TCA_RED_PARMS", "parms"),
               ("TCA_RED_STAB", "cdata"), ("TCA_RED_MAX_P", "uint32"))

    class parms(nla):
        """struct tc_red_qopt."""

        fields = (("limit", "I"), ("qth_min", "I"), ("qth_max", "I"), ("Wlog", "B"),
                  ("Plog", "B"), ("Scell_log", "B"), ("flags", "B"))


NLA = {"red": RedOptions}


def leaf(shaping: Shaping, mtu: int) -> Spec:
    """(kind, params) in bytes: limit, min, max, avpkt; probability; bandwidth_bps; ecn."""
    limit = buffer_bytes(shaping, mtu)
    qmax = limit // 4
    return "red", {
        "limit_bytes": limit, "min_bytes": qmax // 3, "max_bytes": qmax,
        "avpkt_bytes": mtu + ETH_HLEN, "probability": 0.1, "bandwidth_bps": shaping.rate_bps or 0,
        "ecn": shaping.ecn}


def words(o: TcLike) -> list[str]:
    """``limit Nb min Nb max Nb avpkt N probability P bandwidth R [ecn]``."""
    p = o.params
    return ["limit", f"{p['limit_bytes']}b", "min", f"{p['min_bytes']}b",
            "max", f"{p['max_bytes']}b", "avpkt", str(p["avpkt_bytes"]),
            "probability", f"{p['probability']:g}",
            "bandwidth", format_rate(p["bandwidth_bps"] or UNSHAPED_RATE_BPS)] + (
                ["ecn"] if p["ecn"] else [])


def options(o: TcLike, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    """TCA_RED_PARMS with Wlog/Plog/Scell_log as tc computes them, the idle-damping table."""
    p = o.params
    qmin, qmax, avpkt = p["min_bytes"], p["max_bytes"], p["avpkt_bytes"]
    burst = (2 * qmin + qmax) // (3 * avpkt) + 1  # tc-red(8): (2*min+max)/(3*avpkt)
    wlog = red_eval_ewma(qmin, burst, avpkt)
    plog = red_eval_P(qmin, qmax, p["probability"])
    scell, stab = red_eval_idle_damping(wlog, avpkt, (p["bandwidth_bps"] or 10**10) / 8)
    parms = {"limit": p["limit_bytes"], "qth_min": qmin, "qth_max": qmax, "Wlog": wlog,
             "Plog": plog, "Scell_log": scell, "flags": 1 if p["ecn"] else 0}
    return {"attrs": [["TCA_RED_PARMS", parms],
                      ["TCA_RED_STAB", bytes(min(255, int(x)) for x in stab)],
                      ["TCA_RED_MAX_P", int(p["probability"] * 2**32)]]}


def problems(o: TcLike, opts: Any) -> list[str]:
    """Readback compares the kind only (found by testbed.lab.verify)."""
    return []


def stats(opts: Any) -> dict[str, Any]:
    """Nothing beyond the counters."""
    return {}
