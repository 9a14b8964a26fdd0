"""netem (sch_netem): the delay line's discipline (delay, jitter, loss, reorder, duplicate,
corrupt), sized so that it never drops on its own, keeping FIFO order under jitter unless
told otherwise.

Order under jitter: netem draws each packet's delay independently and sends packets in order
of their time_to_send (a time-sorted queue), so with jitter a later packet with a smaller draw
passes an earlier one. With a ``rate``, netem instead takes the last queued packet's
time_to_send as the reference: time_to_send = max(last's time_to_send, now + delay) +
len / rate (``netem_enqueue``, net/sched/sch_netem.c; tc-netem(8), "rate"), so no packet
leaves before the one ahead of it. :func:`params` gives netem such a rate,
:data:`NETEM_ORDER_RATE_BPS`, whenever a direction has jitter and no ``jitter_reorder``.

pyroute2 0.9 lacks netem's Gilbert-Elliott loss, delay distributions and 64-bit latencies:
:class:`NetemOptions` has them. Where the delay line sits (an IFB on the receiving side) is
the business of :mod:`testbed.delay.netem`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from pyroute2.netlink import nla

from models.errors import LabError
from models.shaping import Shaping
from models.units import format_duration
from testbed.tc.qdiscs.common import UNSHAPED_RATE_BPS, TcLike, pct_u32, pct_word, ticks

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "NetemOptions", "netem_limit_packets",
           "params", "dist_table", "words", "options", "problems", "stats",
           "NETEM_MIN_FRAME_BYTES", "NETEM_LIMIT_MARGIN", "DIST_DIRS", "NETEM_ORDER_RATE_BPS"]

KINDS = ("netem",)
CAPABILITIES = ("netem",)
KMODS = ("sch_netem",)
NETEM_MIN_FRAME_BYTES = 64  # IEEE 802.3 minimum frame: the smallest packet the delay line holds
NETEM_LIMIT_MARGIN = 1000  # packets on top of the in-flight count (HTB burst, timer slack)
# netem's rate when it is there only to keep FIFO order under jitter (bit/s). The rate adds
# len/rate to every packet's time and serialises packets at it, so it must not become a second
# bottleneck: the link's own rate would (one more serialisation time per packet, 1.2 ms per
# 1500-byte packet at 10 Mbit/s, and HTB's bursts re-paced). At 10 Tbit/s, 500 x the fastest
# veth measured here (~17 Gbit/s, common.UNSHAPED_RATE_BPS's note), a 1514-byte frame adds
# 1.2 ns and a 64 KiB GSO packet 52 ns, far below timer slack (tens of us); the kernel keeps the
# rate in bytes/s as u64 (TCA_NETEM_RATE64 above 2^32-1 bytes/s).
NETEM_ORDER_RATE_BPS = 10 * 10**12
DIST_DIRS = ("/usr/lib/tc", "/usr/lib/x86_64-linux-gnu/tc", "/usr/lib64/tc", "/usr/share/tc")


class NetemOptions(nla):
    """struct tc_netem_qopt followed by netem attributes (include/uapi/linux/pkt_sched.h)."""

    fields = (("delay", "I"), ("limit", "I"), ("loss", "I"), ("gap", "I"),
              ("duplicate", "I"), ("jitter", "I"))
    nla_map = (
        ("TCA_NETEM_UNSPEC", "none"), ("TCA_NETEM_CORR", "corr"),
        ("TCA_NETEM_DELAY_DIST", "cdata"), ("TCA_NETEM_REORDER", "pair"),
        ("TCA_NETEM_CORRUPT", "pair"), ("TCA_NETEM_LOSS", "loss"),
        ("TCA_NETEM_RATE", "rate"), ("TCA_NETEM_ECN", "uint32"),
        ("TCA_NETEM_RATE64", "uint64"), ("TCA_NETEM_PAD", "hex"),
        ("TCA_NETEM_LATENCY64", "int64"), ("TCA_NETEM_JITTER64", "int64"),
    )

    class corr(nla):
        """TCA_NETEM_CORR: correlations (u32 probabilities)."""

        fields = (("delay_corr", "I"), ("loss_corr", "I"), ("dup_corr", "I"))

    class rate(nla):
        """TCA_NETEM_RATE: struct tc_netem_rate (rate in bytes/s, clamped to u32; the full
        value in TCA_NETEM_RATE64)."""

        fields = (("rate", "I"), ("packet_overhead", "i"), ("cell_size", "I"),
                  ("cell_overhead", "i"))

    class pair(nla):
        """A (probability, correlation) pair: TCA_NETEM_REORDER, TCA_NETEM_CORRUPT."""

        fields = (("probability", "I"), ("correlation", "I"))

    class loss(nla):
        """TCA_NETEM_LOSS: the loss model's nested attributes."""

        nla_map = (("NETEM_LOSS_UNSPEC", "none"), ("NETEM_LOSS_GI", "hex"),
                   ("NETEM_LOSS_GE", "gemodel"))

        class gemodel(nla):
            """NETEM_LOSS_GE: Gilbert-Elliott p, r, h (1-h as tc stores it), 1-k."""

            fields = (("p", "I"), ("r", "I"), ("h", "I"), ("k1", "I"))


NLA = {"netem": NetemOptions}


def netem_limit_packets(shaping: Shaping, mtu: int) -> int:
    """netem queue limit (packets) for a delay line that must never drop.

    netem holds every packet that is on the delay line: at most what arrives during
    delay+jitter at the line rate R. A frame of s bytes occupies 8*s/R seconds, so the count is
    ceil(R*(delay+jitter)/(8*s)). We take s = 64 bytes (the IEEE 802.3 minimum frame), which
    covers any mix of data and ACKs (with s=MTU a stream of ACKs would overflow it), and add
    :data:`NETEM_LIMIT_MARGIN` for the HTB burst and timer slack. This is >= the
    ceil(R*(d+j)/(8*MTU))*2 + margin rule for every MTU >= 128. Without a rate we assume
    :data:`~testbed.tc.qdiscs.common.UNSHAPED_RATE_BPS`. The limit costs no memory until packets
    are queued.
    """
    rate_bps = shaping.rate_bps or UNSHAPED_RATE_BPS
    in_flight = math.ceil(rate_bps * (shaping.delay_s + shaping.jitter_s)
                          / (8 * NETEM_MIN_FRAME_BYTES))
    return min(2**32 - 1, in_flight + NETEM_LIMIT_MARGIN)


def params(shaping: Shaping, mtu: int) -> dict[str, Any]:
    """The netem qdisc's params for ``shaping`` (seconds, percent; only the impairments set);
    with jitter and no ``jitter_reorder``, ``order_rate_bps`` = :data:`NETEM_ORDER_RATE_BPS`
    (FIFO order: the module docstring)."""
    p: dict[str, Any] = {"limit_packets": netem_limit_packets(shaping, mtu),
                         "delay_s": shaping.delay_s, "jitter_s": shaping.jitter_s}
    if shaping.jitter_s:
        p["delay_correlation_pct"] = shaping.delay_correlation_pct
        p["distribution"] = shaping.jitter_distribution
        if not shaping.jitter_reorder:
            p["order_rate_bps"] = NETEM_ORDER_RATE_BPS
    for key in ("loss_pct", "reorder_pct", "duplicate_pct", "corrupt_pct"):
        if getattr(shaping, key):
            p[key] = getattr(shaping, key)
    if shaping.loss_gemodel is not None:
        ge = shaping.loss_gemodel
        p["loss_gemodel"] = (ge.p_pct, ge.r_pct, ge.bad_loss_pct, ge.good_loss_pct)
    return p


def words(o: TcLike) -> list[str]:
    """tc-netem(8) words: ``limit N delay D [J C% [distribution X]] [loss ...] ...
    [rate R]``."""
    p: Mapping[str, Any] = o.params
    out = ["limit", str(p["limit_packets"]), "delay", format_duration(p["delay_s"])]
    if p.get("jitter_s"):
        out += [format_duration(p["jitter_s"]), pct_word(p.get("delay_correlation_pct", 0.0))]
        if p.get("distribution", "uniform") != "uniform":
            out += ["distribution", p["distribution"]]
    if p.get("loss_pct"):
        out += ["loss", "random", pct_word(p["loss_pct"])]
    if p.get("loss_gemodel"):
        out += ["loss", "gemodel", *(pct_word(x) for x in p["loss_gemodel"])]
    for key, word in (("reorder_pct", "reorder"), ("duplicate_pct", "duplicate"),
                      ("corrupt_pct", "corrupt")):
        if p.get(key):
            out += [word, pct_word(p[key])]
    if p.get("order_rate_bps"):
        out += ["rate", f"{p['order_rate_bps'] / 1e12:g}Tbit"]
    return out


def dist_table(name: str) -> bytes:
    """netem's delay distribution table ``name`` (normal, pareto, paretonormal) as the s16
    array the kernel wants, read from iproute2's ``<name>.dist``. Raises LabError if absent."""
    for d in DIST_DIRS:
        path = os.path.join(d, f"{name}.dist")
        if os.path.exists(path):
            with open(path) as f:
                numbers = [w for line in f if not line.startswith("#") for w in line.split()]
            return b"".join(int(w).to_bytes(2, "little", signed=True) for w in numbers)
    raise LabError(f"netem distribution table {name}.dist not found in {', '.join(DIST_DIRS)}"
                   " (install iproute2)")


def options(o: TcLike, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    """struct tc_netem_qopt (32-bit ticks, clamped) plus 64-bit latency and jitter in ns,
    correlation, distribution table, reorder, corrupt and Gilbert-Elliott loss attributes,
    and always a rate (``order_rate_bps``, 0 without: netem keeps a rate until one is given,
    so a change from FIFO to reordering must clear it)."""
    p = o.params
    opts: dict[str, Any] = {
        "delay": min(ticks(p["delay_s"]), 2**32 - 1), "jitter": min(ticks(p["jitter_s"]),
                                                                       2**32 - 1),
        "limit": p["limit_packets"], "loss": pct_u32(p.get("loss_pct", 0.0)), "gap": 0,
        "duplicate": pct_u32(p.get("duplicate_pct", 0.0)),
        "attrs": [["TCA_NETEM_LATENCY64", round(p["delay_s"] * 1e9)],
                  ["TCA_NETEM_JITTER64", round(p["jitter_s"] * 1e9)]]}
    if p.get("delay_correlation_pct"):
        opts["attrs"].append(["TCA_NETEM_CORR", {"delay_corr": pct_u32(
            p["delay_correlation_pct"]), "loss_corr": 0, "dup_corr": 0}])
    if p.get("distribution") not in (None, "uniform"):
        opts["attrs"].append(["TCA_NETEM_DELAY_DIST", dist_table(p["distribution"])])
    if p.get("reorder_pct"):
        opts["gap"] = 1  # as tc: reorder without gap reorders with probability per packet
        opts["attrs"].append(["TCA_NETEM_REORDER", {"probability": pct_u32(p["reorder_pct"]),
                                                    "correlation": 0}])
    rate_bytes = p.get("order_rate_bps", 0) // 8
    opts["attrs"].append(["TCA_NETEM_RATE", {"rate": min(rate_bytes, 2**32 - 1),
                                             "packet_overhead": 0, "cell_size": 0,
                                             "cell_overhead": 0}])
    if rate_bytes > 2**32 - 1:
        opts["attrs"].append(["TCA_NETEM_RATE64", rate_bytes])
    if p.get("corrupt_pct"):
        opts["attrs"].append(["TCA_NETEM_CORRUPT", {"probability": pct_u32(p["corrupt_pct"]),
                                                    "correlation": 0}])
    if p.get("loss_gemodel"):
        gp, gr, bad, good = p["loss_gemodel"]
        opts["attrs"].append(["TCA_NETEM_LOSS", {"attrs": [["NETEM_LOSS_GE", {
            "p": pct_u32(gp), "r": pct_u32(gr), "h": 0xFFFFFFFF - pct_u32(bad),
            "k1": pct_u32(good)}]]}])  # tc stores 1-h as h (q_netem.c)
    return opts


def problems(o: TcLike, opts: Any) -> list[str]:
    """Readback: limit, random loss and the delay (within one tick)."""
    p = o.params
    got = (opts["limit"], opts["loss"], abs(opts["delay"] * 64 - p["delay_s"] * 1e9) <= 64)
    want = (p["limit_packets"], pct_u32(p.get("loss_pct", 0.0)), True)
    return [] if got == want else [f"netem (limit, loss, delay ok) {got}, planned {want}"]


def stats(opts: Any) -> dict[str, Any]:
    """What lab state shows beyond the counters: ``limit``."""
    return {} if opts is None else {"limit": opts["limit"]}
