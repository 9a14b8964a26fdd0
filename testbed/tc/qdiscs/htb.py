"""HTB (sch_htb): the rate limiter of every shaped direction, one root qdisc and one class.

Recipe: ``htb 1: default 1`` on the sender's egress, class ``1:1`` with rate = ceil = the
line rate; the bottleneck buffer (an AQM module's leaf) hangs below ``1:1``. Netlink options
carry no rate tables (see :class:`HtbOptions`); bursts are in scheduler ticks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pyroute2.netlink import nla
from pyroute2.netlink.rtnl.tcmsg import sched_htb

from models.units import format_rate
from testbed.tc.qdiscs.common import ETH_HLEN, TC_LINKLAYER_ETHERNET, TcLike, ticks

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "HTB_BURST_S", "htb_burst_bytes",
           "htb_quantum_bytes", "rate_limiter", "words", "options", "problems", "stats"]

KINDS = ("htb",)
CAPABILITIES = ("htb",)
KMODS = ("sch_htb",)
HTB_BURST_S = 1e-3  # token bucket depth in seconds of line rate, see htb_burst_bytes


class HtbOptions(nla):
    """HTB options without rate tables: since Linux 3.x HTB computes its rates from the
    ratespec (``psched_ratecfg_precompute``) and ignores TCA_HTB_RTAB when the ratespec names
    its link layer; pyroute2 would compute two 256-entry tables per class for nothing."""

    nla_map = (("TCA_HTB_UNSPEC", "none"), ("TCA_HTB_PARMS", "parms"),
               ("TCA_HTB_INIT", "glob"), ("TCA_HTB_CTAB", "hex"), ("TCA_HTB_RTAB", "hex"),
               ("TCA_HTB_DIRECT_QLEN", "uint32"), ("TCA_HTB_RATE64", "uint64"),
               ("TCA_HTB_CEIL64", "uint64"))

    class parms(nla):
        fields = tuple((name, fmt) for name, fmt in sched_htb.options.htb_parms.fields)

    class glob(nla):
        fields = sched_htb.options.htb_glob.fields


NLA = {"htb": HtbOptions}


def htb_burst_bytes(rate_bps: int, mtu: int) -> int:
    """HTB burst/cburst (bytes) for a class of ``rate_bps`` on a link with ``mtu``.

    HTB refills tokens only when it is woken (qdisc watchdog hrtimer, TX softirq); while the
    bucket is full, time passes without credit. The bucket must therefore hold what the line
    sends during a wake-up latency, or the class falls short of its rate. tc-tbf(8) gives the
    classic bound rate/HZ; with high-resolution timers the bound is the softirq latency of a
    loaded host, which is well under 1 ms. We take 1 ms of line rate (rate/HZ for HZ=1000),
    at least two full frames: 12.5 KB at 100 Mbit/s, 125 KB at 1 Gbit/s, 50 MB at 400 Gbit/s.
    (tc's own default, rate/get_hz()+mtu with get_hz()=1e9 on hrtimer kernels, is one frame and
    under-shoots at Gbit rates; Mininet uses a fixed 15 KB.) Tokens only pile up while the
    queue is empty, so the burst does not change a standing queue.
    """
    return max(2 * (mtu + ETH_HLEN), math.ceil(rate_bps * HTB_BURST_S / 8))


def htb_quantum_bytes(rate_bps: int, mtu: int) -> int:
    """HTB DRR quantum (bytes): tc's rule rate/r2q with r2q=10 (tc-htb(8)), clamped to
    [one frame, 200000] as net/sched/sch_htb.c would, but explicit so the kernel does not log
    "quantum of class is big/small" for every link."""
    return min(200_000, max(mtu + ETH_HLEN, rate_bps // 8 // 10))


def rate_limiter(rate_bps: int, mtu: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(params of the root qdisc ``1:``, params of class ``1:1``) for ``rate_bps`` bit/s on a
    link of IP MTU ``mtu`` bytes. Pure."""
    burst = htb_burst_bytes(rate_bps, mtu)
    return {"default_class": 1}, {
        "rate_bps": rate_bps, "ceil_bps": rate_bps, "burst_bytes": burst, "cburst_bytes": burst,
        "quantum_bytes": htb_quantum_bytes(rate_bps, mtu)}


def words(o: TcLike) -> list[str]:
    """tc command-line words after ``htb`` for the root qdisc or the class ``o``."""
    p = o.params
    if "default_class" in p:
        return ["default", format(p["default_class"], "x")]
    return ["rate", format_rate(p["rate_bps"]), "ceil", format_rate(p["ceil_bps"]),
            "burst", f"{p['burst_bytes']}b", "cburst", f"{p['cburst_bytes']}b",
            "quantum", str(p["quantum_bytes"])]


def _class(p: dict[str, Any]) -> dict[str, Any]:
    rate, ceil = round(p["rate_bps"] / 8), round(p["ceil_bps"] / 8)
    parms = {"rate": min(rate, 2**32 - 1), "ceil": min(ceil, 2**32 - 1),
             "rate___reserved": TC_LINKLAYER_ETHERNET, "ceil___reserved": TC_LINKLAYER_ETHERNET,
             "buffer": ticks(p["burst_bytes"] / rate), "cbuffer": ticks(p["cburst_bytes"] / ceil),
             "quantum": p["quantum_bytes"], "prio": 0}
    attrs: list[list[Any]] = [["TCA_HTB_PARMS", parms]]
    if rate >= 2**32:
        attrs.append(["TCA_HTB_RATE64", rate])
    if ceil >= 2**32:
        attrs.append(["TCA_HTB_CEIL64", ceil])
    return {"attrs": attrs}


def options(o: TcLike, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    """TCA_OPTIONS of the root qdisc (TCA_HTB_INIT) or of the class (TCA_HTB_PARMS, 64-bit
    rates above 2**32-1 bytes/s)."""
    p = dict(o.params)
    if o.verb == "class":
        return _class(p)
    return {"attrs": [["TCA_HTB_INIT", {"version": 3, "rate2quantum": 10,
                                        "defcls": p["default_class"], "debug": 0,
                                        "direct_pkts": 0}]]}


def problems(o: TcLike, opts: Any) -> list[str]:
    """Readback: a class whose rate differs from the plan (the root qdisc is not compared)."""
    if o.verb != "class":
        return []
    parms = opts.get_attr("TCA_HTB_PARMS")
    rate = opts.get_attr("TCA_HTB_RATE64") or parms["rate"]
    want = round(o.params["rate_bps"] / 8)
    return [] if rate == want else [f"rate {rate * 8} bit/s, planned {want * 8}"]


def stats(opts: Any) -> dict[str, Any]:
    """What lab state shows beyond the counters: a class's ``rate_bps``."""
    if opts is not None and opts.get_attr("TCA_HTB_PARMS"):
        return {"rate_bps": 8 * (opts.get_attr("TCA_HTB_RATE64")
                                 or opts.get_attr("TCA_HTB_PARMS")["rate"])}
    return {}
