"""tc recipes as pure data: what one direction of one link needs, before anything is applied.

A :class:`DirectionRecipe` lists the queueing objects (qdiscs, classes, filters) for the
traffic that node ``tx`` sends to node ``rx`` over one veth pair. It is built by a pure
function from a :class:`~aitb.shaping.Shaping` (no root, golden-tested), applied through
netlink by :mod:`testbed.tcnl`, and printed as equivalent ``tc`` command lines for people and
for exports.

Layout (issue 2 item 7: the bottleneck buffer is independent of the delay line)::

    tx egress:  htb 1: (default 1) -> class 1:1 rate=ceil=R -> leaf 10: = the bottleneck buffer
                (pfifo / bfifo / fq_codel / red)
    rx ingress: ingress ffff: -> u32 match-all -> mirred redirect -> IFB (in rx's namespace)
    IFB egress: netem 1: = the delay line (delay, jitter, loss, reorder, duplicate, corrupt),
                its limit sized so that it never drops (see :func:`netem_limit_packets`)

So queueing drops happen only in the leaf qdisc; netem drops only what its loss model says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aitb.shaping import Shaping
from aitb.units import format_duration, format_rate

__all__ = [
    "TcObject", "DirectionRecipe", "direction_recipe", "htb_burst_bytes", "htb_quantum_bytes",
    "netem_limit_packets", "default_buffer_packets", "ETH_HLEN", "HTB_BURST_S",
]

ETH_HLEN = 14  # Ethernet header that HTB and fifo limits count on a veth (skb->len), if_ether.h
HTB_BURST_S = 1e-3  # token bucket depth in seconds of line rate, see htb_burst_bytes
DEFAULT_BUFFER_PACKETS = 1000  # like a txqueuelen: used when a rate has no explicit buffer
NETEM_MIN_FRAME_BYTES = 64  # IEEE 802.3 minimum frame: the smallest packet the delay line holds
NETEM_LIMIT_MARGIN = 1000  # packets on top of the in-flight count (HTB burst, timer slack)
NETEM_UNSHAPED_RATE_BPS = 40 * 10**9  # assumed line rate of an unshaped veth (measured ~17 Gbit/s)

Verb = Literal["qdisc", "class", "filter"]


@dataclass(frozen=True, slots=True)
class TcObject:
    """One qdisc, class or filter on interface ``dev`` of node ``node``.

    parent/handle use tc's spelling (``"root"``, ``"ingress"``, ``"1:"``, ``"1:1"``); params
    hold numbers whose unit is in the key (``rate_bps``, ``limit_packets``, ``delay_s``).
    """

    verb: Verb
    node: str
    dev: str
    parent: str
    handle: str | None
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def tc_argv(self, action: str = "add") -> list[str]:
        """The equivalent ``tc`` command (argv list, without ``ip netns exec``)."""
        where = [self.parent] if self.parent in ("root", "ingress") else ["parent", self.parent]
        head = ["tc", self.verb, action, "dev", self.dev, *where]
        if self.verb == "filter":
            return head + _filter_words(self)
        ident = ["handle", self.handle] if self.verb == "qdisc" and self.handle else []
        if self.verb == "class":
            ident = ["classid", self.handle or ""]
        return head + ident + [self.kind] + _param_words(self.kind, self.params)


@dataclass(frozen=True, slots=True)
class DirectionRecipe:
    """Everything one direction of a link needs: objects on ``tx`` and on ``rx``.

    ifb: name of the IFB device to create in ``rx``'s namespace (``None`` without delay line).
    egress: objects on tx's interface; ingress: objects on rx's interface and on the IFB.
    """

    tx_node: str
    tx_dev: str
    rx_node: str
    rx_dev: str
    ifb: str | None
    egress: tuple[TcObject, ...]
    ingress: tuple[TcObject, ...]

    def objects(self) -> tuple[TcObject, ...]:
        """Egress then ingress objects, in the order they must be created."""
        return self.egress + self.ingress

    def kinds(self) -> set[str]:
        """Qdisc/filter kinds this recipe needs from the kernel (for capability checks)."""
        return {o.kind for o in self.objects()}

    def needs_netem(self) -> bool:
        """True when the recipe has a delay line (netem)."""
        return self.ifb is not None

    def commands(self) -> list[list[str]]:
        """Equivalent commands for people: ``ip netns exec``-less argv lists, in order."""
        out = [o.tc_argv() for o in self.egress]
        if self.ifb:
            out.append(["ip", "link", "add", self.ifb, "type", "ifb"])
            out.append(["ip", "link", "set", self.ifb, "up"])
        return out + [o.tc_argv() for o in self.ingress]


def default_buffer_packets() -> int:
    """Buffer of a rate-limited direction without an explicit one (packets): 1000, the
    default txqueuelen of an Ethernet device (``DEFAULT_TX_QUEUE_LEN``,
    include/linux/netdevice.h)."""
    return DEFAULT_BUFFER_PACKETS


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


def netem_limit_packets(shaping: Shaping, mtu: int) -> int:
    """netem queue limit (packets) for a delay line that must never drop.

    netem holds every packet that is on the delay line: at most what arrives during
    delay+jitter at the line rate R. A frame of s bytes occupies 8*s/R seconds, so the count is
    ceil(R*(delay+jitter)/(8*s)). We take s = 64 bytes (the IEEE 802.3 minimum frame), which
    covers any mix of data and ACKs (with s=MTU a stream of ACKs would overflow it), and add
    :data:`NETEM_LIMIT_MARGIN` for the HTB burst and timer slack. This is >= the
    ceil(R*(d+j)/(8*MTU))*2 + margin rule for every MTU >= 128. Without a rate we assume
    :data:`NETEM_UNSHAPED_RATE_BPS`. The limit costs no memory until packets are queued.
    """
    rate_bps = shaping.rate_bps or NETEM_UNSHAPED_RATE_BPS
    in_flight = math.ceil(rate_bps * (shaping.delay_s + shaping.jitter_s)
                          / (8 * NETEM_MIN_FRAME_BYTES))
    return min(2**32 - 1, in_flight + NETEM_LIMIT_MARGIN)


def _leaf(shaping: Shaping, mtu: int, node: str, dev: str) -> TcObject:
    buf = shaping.buffer
    frame = mtu + ETH_HLEN
    if shaping.aqm == "fifo":
        if buf is not None and buf.size_bytes is not None:
            return TcObject("qdisc", node, dev, "1:1", "10:", "bfifo",
                            {"limit_bytes": buf.size_bytes})
        packets = buf.packets if buf is not None else default_buffer_packets()
        return TcObject("qdisc", node, dev, "1:1", "10:", "pfifo", {"limit_packets": packets})
    limit_bytes = (buf.size_bytes if buf is not None and buf.size_bytes is not None
                   else (buf.packets if buf is not None else default_buffer_packets()) * frame)
    if shaping.aqm == "fq_codel":
        return TcObject("qdisc", node, dev, "1:1", "10:", "fq_codel",
                        {"limit_packets": max(1, limit_bytes // frame), "ecn": shaping.ecn})
    # red, parameters after tc-red(8): max = limit/4, min = max/3, avpkt = one frame
    qmax = limit_bytes // 4
    return TcObject("qdisc", node, dev, "1:1", "10:", "red", {
        "limit_bytes": limit_bytes, "min_bytes": qmax // 3, "max_bytes": qmax,
        "avpkt_bytes": frame, "probability": 0.1, "bandwidth_bps": shaping.rate_bps or 0,
        "ecn": shaping.ecn})


def _egress(shaping: Shaping, mtu: int, node: str, dev: str) -> tuple[TcObject, ...]:
    if shaping.rate_bps is None and shaping.buffer is None and shaping.aqm == "fifo":
        return ()
    rate = shaping.rate_bps if shaping.rate_bps is not None else NETEM_UNSHAPED_RATE_BPS
    burst = htb_burst_bytes(rate, mtu)
    return (
        TcObject("qdisc", node, dev, "root", "1:", "htb", {"default_class": 1}),
        TcObject("class", node, dev, "1:", "1:1", "htb", {
            "rate_bps": rate, "ceil_bps": rate, "burst_bytes": burst, "cburst_bytes": burst,
            "quantum_bytes": htb_quantum_bytes(rate, mtu)}),
        _leaf(shaping, mtu, node, dev),
    )


def _netem_params(shaping: Shaping, mtu: int) -> dict[str, Any]:
    p: dict[str, Any] = {"limit_packets": netem_limit_packets(shaping, mtu),
                         "delay_s": shaping.delay_s, "jitter_s": shaping.jitter_s}
    if shaping.jitter_s:
        p["delay_correlation_pct"] = shaping.delay_correlation_pct
        p["distribution"] = shaping.jitter_distribution
    for key in ("loss_pct", "reorder_pct", "duplicate_pct", "corrupt_pct"):
        if getattr(shaping, key):
            p[key] = getattr(shaping, key)
    if shaping.loss_gemodel is not None:
        ge = shaping.loss_gemodel
        p["loss_gemodel"] = (ge.p_pct, ge.r_pct, ge.bad_loss_pct, ge.good_loss_pct)
    return p


def direction_recipe(shaping: Shaping, mtu: int, tx: tuple[str, str], rx: tuple[str, str],
                     ifb: str) -> DirectionRecipe:
    """The recipe for traffic from ``tx`` = (node, ifname) to ``rx`` = (node, ifname).

    Args: shaping of that direction; mtu of the link (bytes, IP MTU); ifb: the name the IFB
    device gets in rx's namespace if a delay line is needed. Returns a recipe with no objects
    for an unshaped direction. Pure: no root, no I/O.
    """
    egress = _egress(shaping, mtu, *tx)
    if not shaping.needs_netem:
        return DirectionRecipe(tx[0], tx[1], rx[0], rx[1], None, egress, ())
    rx_node, rx_dev = rx
    ingress = (  # the delay line exists before traffic is redirected into it
        TcObject("qdisc", rx_node, ifb, "root", "1:", "netem", _netem_params(shaping, mtu)),
        TcObject("qdisc", rx_node, rx_dev, "ingress", "ffff:", "ingress"),
        TcObject("filter", rx_node, rx_dev, "ffff:", None, "u32",
                 {"prio": 1, "redirect_dev": ifb}),
    )
    return DirectionRecipe(tx[0], tx[1], rx_node, rx_dev, ifb, egress, ingress)


def _pct(x: float) -> str:
    return f"{x:g}%"


def _netem_words(p: Mapping[str, Any]) -> list[str]:
    words = ["limit", str(p["limit_packets"]), "delay", format_duration(p["delay_s"])]
    if p.get("jitter_s"):
        words += [format_duration(p["jitter_s"]), _pct(p.get("delay_correlation_pct", 0.0))]
        if p.get("distribution", "uniform") != "uniform":
            words += ["distribution", p["distribution"]]
    if p.get("loss_pct"):
        words += ["loss", "random", _pct(p["loss_pct"])]
    if p.get("loss_gemodel"):
        words += ["loss", "gemodel", *(_pct(x) for x in p["loss_gemodel"])]
    for key, word in (("reorder_pct", "reorder"), ("duplicate_pct", "duplicate"),
                      ("corrupt_pct", "corrupt")):
        if p.get(key):
            words += [word, _pct(p[key])]
    return words


def _param_words(kind: str, p: Mapping[str, Any]) -> list[str]:
    if kind == "htb" and "default_class" in p:
        return ["default", format(p["default_class"], "x")]
    if kind == "htb":
        return ["rate", format_rate(p["rate_bps"]), "ceil", format_rate(p["ceil_bps"]),
                "burst", f"{p['burst_bytes']}b", "cburst", f"{p['cburst_bytes']}b",
                "quantum", str(p["quantum_bytes"])]
    if kind == "pfifo":
        return ["limit", str(p["limit_packets"])]
    if kind == "bfifo":
        return ["limit", f"{p['limit_bytes']}b"]
    if kind == "fq_codel":
        return ["limit", str(p["limit_packets"])] + (["ecn"] if p["ecn"] else ["noecn"])
    if kind == "red":
        return ["limit", f"{p['limit_bytes']}b", "min", f"{p['min_bytes']}b",
                "max", f"{p['max_bytes']}b", "avpkt", str(p["avpkt_bytes"]),
                "probability", f"{p['probability']:g}",
                "bandwidth", format_rate(p["bandwidth_bps"] or NETEM_UNSHAPED_RATE_BPS)] + (
                    ["ecn"] if p["ecn"] else [])
    if kind == "netem":
        return _netem_words(p)
    return []


def _filter_words(o: TcObject) -> list[str]:
    return ["protocol", "all", "prio", str(o.params["prio"]), "u32", "match", "u32", "0", "0",
            "action", "mirred", "egress", "redirect", "dev", o.params["redirect_dev"]]
