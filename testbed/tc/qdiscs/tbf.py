"""TBF (sch_tbf) as the *segmenter* of a buffer given in packets, or in bytes smaller than two
GSO packets (:func:`segmented`): GSO super-packets become wire-sized packets before the buffer
counts them.

A pfifo counts skbs, and a veth carries TCP's 64 KB GSO super-packets whole, so a "100-packet"
pfifo could hold 6.4 MB. Forcing wire-sized packets on every interface instead (``gso_max_segs
1``, :mod:`testbed.ns.links`) makes TCP build each 1448-byte segment itself and every hop handle
it one by one. Of the stock qdiscs, TBF is the one that cuts a GSO packet into its segments at
enqueue: when a packet is longer than its bucket (``max_size``), net/sched/sch_tbf.c
``tbf_enqueue`` calls ``tbf_segment``, which hands each segment to TBF's child qdisc on its own
(tail-dropping each segment that does not fit). So below HTB's class ``1:1``::

    class 1:1 (rate) -> tbf 9: (bucket = one frame, rate far above any link) -> pfifo 10: limit N

counts and drops wire-sized packets, as a switch port does, while the hops before it keep
their GSO packets. The bucket is one full frame (``mtu`` + Ethernet header, sent exactly as
``TCA_TBF_BURST``): every GSO packet (two segments or more) is longer, every frame fits. The
rate, :data:`SEGMENTER_RATE_BPS`, is far above any veth's (about 17 Gbit/s measured here), so
the bucket refills a frame in 12 ns and TBF never holds a packet back: HTB above it stays the
only rate limiter. TBF's own limit is only the byte size of the default child it creates; the
pfifo ``10:`` replaces that child at once (tc's graft). Its backlog and the root's count
right on kernels with upstream fix 1596a135e318 ("tbf: correct backlog statistic for GSO
packets": Linux 6.13, stable 6.1.120 and 5.4.287), which this machine's 6.18 and the VM's
Debian 6.1 have; before it a dropped segment's bytes stayed in the root's backlog. A GSO
packet no longer than one frame (a few segments of a much smaller MSS) passes whole, so
:func:`testbed.lab.layout.needs_wire_packets` keeps wire-sized packets where links of the plan
differ in MTU. The segmenter's parameters never
change on a live lab: a TBF "change" would also reset its child's limit
(``fifo_set_limit``), so :mod:`testbed.live.reshape` leaves it out of in-place changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyroute2.netlink import nla

from models.shaping import Shaping
from models.units import format_rate
from testbed.tc.qdiscs.common import ETH_HLEN, TC_LINKLAYER_ETHERNET, TcLike, no_stats, ticks

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "SEGMENTER_RATE_BPS", "GSO_MAX_BYTES",
           "counts_packets", "largest_gso_bytes", "segmented", "segmenter",
           "words", "options", "problems", "stats"]

KINDS = ("tbf",)
CAPABILITIES = ("tbf",)
KMODS = ("sch_tbf",)
SEGMENTER_RATE_BPS = 10**12  # 1 Tbit/s: never the limit (a veth carries ~17 Gbit/s here)
# gso_max_size of a veth: GSO_LEGACY_MAX_SIZE (include/linux/netdevice.h); BIG TCP, which
# raises it, is off unless a device is told otherwise
GSO_MAX_BYTES = 65536


class TbfOptions(nla):
    """TBF options without rate tables (the ratespec names its link layer, so the kernel
    computes the rate itself, as for HTB): TCA_TBF_PARMS, the 64-bit rate, the bucket in bytes
    (include/uapi/linux/pkt_sched.h)."""

    nla_map = (("TCA_TBF_UNSPEC", "none"), ("TCA_TBF_PARMS", "parms"),
               ("TCA_TBF_RTAB", "hex"), ("TCA_TBF_PTAB", "hex"),
               ("TCA_TBF_RATE64", "uint64"), ("TCA_TBF_PRATE64", "uint64"),
               ("TCA_TBF_BURST", "uint32"), ("TCA_TBF_PBURST", "uint32"))

    class parms(nla):
        fields = (("rate_cell_log", "B"), ("rate___reserved", "B"), ("rate_overhead", "H"),
                  ("rate_cell_align", "h"), ("rate_mpu", "H"), ("rate", "I"),
                  ("peak_cell_log", "B"), ("peak___reserved", "B"), ("peak_overhead", "H"),
                  ("peak_cell_align", "h"), ("peak_mpu", "H"), ("peak", "I"),
                  ("limit", "I"), ("buffer", "I"), ("mtu", "I"))


NLA = {"tbf": TbfOptions}
stats = no_stats  # nothing beyond the counters: the segmenter holds no packet of its own


def counts_packets(shaping: Shaping) -> bool:
    """True when ``shaping``'s bottleneck buffer is a pfifo whose size is given in packets
    (each of those gets a segmenter, :func:`segmented`)."""
    return shaping.aqm == "fifo" and shaping.buffer is not None \
        and shaping.buffer.packets is not None


def largest_gso_bytes(mtu: int) -> int:
    """The length a qdisc counts for the largest GSO packet TCP hands a veth of IP MTU
    ``mtu`` (bytes): :data:`GSO_MAX_BYTES` (the device's ``gso_max_size``, IP packet) plus
    its Ethernet header, plus the headers of each further segment, which
    ``qdisc_pkt_len_init`` (net/core/dev.c) adds so that a GSO packet counts what its
    segments will take on the wire (Ethernet 14 + IPv4 20 + TCP with timestamps 32 each;
    segments of ``mtu`` - 52 payload bytes). 68520 at MTU 1500. Pure."""
    header = ETH_HLEN + 20 + 32
    segments = -(-GSO_MAX_BYTES // (mtu - 52))
    return GSO_MAX_BYTES + ETH_HLEN + (segments - 1) * header


def segmented(shaping: Shaping, mtu: int) -> bool:
    """True when ``shaping``'s fifo buffer gets the segmenter before it
    (:func:`testbed.tc.direction_recipe`): a buffer given in packets (a pfifo counts skbs),
    and a byte buffer that cannot hold two of the largest GSO packets
    (:func:`largest_gso_bytes`). A bfifo counts a GSO packet's bytes whole: one smaller than
    a GSO packet refuses every full-size one (its sender's TCP sees a local drop, no loss, and
    retries on a timer: a 64 MiB all-reduce behind 41 KB host buffers ran 600 times slower
    than its rate allows); one that holds a single GSO packet drops the next one's ~45
    frames at once where a switch port drops one frame. Cut into frames first, the buffer
    counts and drops frames as a switch port does. Larger byte buffers keep GSO packets:
    their occupancy counts the same bytes either way, and segmenting costs the receiver one
    stack traversal per frame instead of per ~45 (the reason byte buffers skip it)."""
    if shaping.aqm != "fifo" or shaping.buffer is None:
        return False
    if shaping.buffer.packets is not None:
        return True
    return shaping.buffer.size_bytes is not None \
        and shaping.buffer.size_bytes < 2 * largest_gso_bytes(mtu)


def segmenter(mtu: int) -> dict[str, Any]:
    """Params of the segmenter for a link of IP MTU ``mtu`` bytes: ``rate_bps``,
    ``burst_bytes`` (one frame) and ``limit_bytes`` (the default child's, replaced). Pure."""
    frame = mtu + ETH_HLEN
    return {"rate_bps": SEGMENTER_RATE_BPS, "burst_bytes": frame, "limit_bytes": frame}


def words(o: TcLike) -> list[str]:
    """tc words after ``tbf``: ``rate R burst Bb limit Lb``."""
    p = o.params
    return ["rate", format_rate(p["rate_bps"]), "burst", f"{p['burst_bytes']}b",
            "limit", f"{p['limit_bytes']}b"]


def options(o: TcLike, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    """TCA_OPTIONS: the ratespec (rate above 2**32-1 bytes/s in TCA_TBF_RATE64), the bucket
    as time (``buffer``, ticks) and exactly in bytes (TCA_TBF_BURST, which the kernel takes as
    ``max_size``), the default child's limit."""
    p = o.params
    rate = round(p["rate_bps"] / 8)
    parms = {"rate": min(rate, 2**32 - 1), "rate___reserved": TC_LINKLAYER_ETHERNET,
             "limit": p["limit_bytes"], "buffer": max(1, ticks(p["burst_bytes"] / rate)),
             "mtu": 0}
    attrs: list[list[Any]] = [["TCA_TBF_PARMS", parms], ["TCA_TBF_BURST", p["burst_bytes"]]]
    if rate >= 2**32:
        attrs.append(["TCA_TBF_RATE64", rate])
    return {"attrs": attrs}


def problems(o: TcLike, opts: Any) -> list[str]:
    """Readback: the rate (the bucket is not dumped in bytes)."""
    rate = opts.get_attr("TCA_TBF_RATE64") or opts.get_attr("TCA_TBF_PARMS")["rate"]
    want = round(o.params["rate_bps"] / 8)
    return [] if rate == want else [f"rate {rate * 8} bit/s, planned {want * 8}"]


