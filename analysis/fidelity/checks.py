"""The per-direction checks of the fidelity self-check: rate, RTT, loss and, on a native
delay line, the line's own added delay (pure).

Each returns ``(measured, status)`` with status ``"ok"`` (within tolerance), ``"off"``
(outside it: the emulation did not do what the plan said) or ``"not_exercised"`` (nothing to
measure: no traffic, no backlog, no address to probe, nothing configured).

Input frames have the columns of models/counter_columns.py (``counters/qdisc.parquet``: t_s,
node, ifname, kind, handle, parent, bytes, packets, drops, overlimits, requeues, backlog_bytes,
backlog_packets; ``counters/links.parquet``: t_s, node, ifname, rx_bytes, tx_bytes,
rx_packets, tx_packets, rx_dropped, tx_dropped), cumulative kernel counters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.fidelity.effects import DirectionEffects, expected_rates
from models.shaping import Shaping

__all__ = ["DirectionRef", "LineCounts", "expected_rtt_s", "rtt_tolerance_s", "rate_check",
           "loss_check", "rtt_check", "delay_check", "precise_tolerance_s",
           "PRECISE_ABS_TOLERANCE_S", "PRECISE_REL_TOLERANCE", "RATE_TOLERANCE",
           "MIN_BACKLOGGED_INTERVALS", "LOSS_Z", "rate_tolerance", "RATE_GRANULARITY_FRAMES",
           "RTT_ABS_TOLERANCE_S", "RTT_REL_TOLERANCE", "PROBE_IP_BYTES", "probe_wait_s",
           "host_drops_check", "interface_drops"]

# A backlogged HTB class dequeues at its rate on average (tokens pile up only while the queue
# is empty). 10% covers the sampler's timing error (its t_s is read once per sample, while
# the objects are dumped one after another: ~0.5 ms of a 10 ms interval) and GSO-sized
# dequeue quanta (64 KB is 5% of a 10 ms interval at 1 Gbit/s).
RATE_TOLERANCE = 0.10
# fewer backlogged sampling intervals than this measure timing noise, not a rate
MIN_BACKLOGGED_INTERVALS = 3
# HTB dequeues whole skbs: over a backlogged run the byte count can be off rate x time by one
# dequeue at each end (the phase of the first and the last packet against the samples). A
# slow TCP sender's skb holds tcp_min_tso_segs = 2 segments (tcp_tso_autosize,
# net/ipv4/tcp_output.c), so a dequeue is up to two frames: at 1 Mbit/s 24 ms, more than a
# 10 ms sample. This many frames per backlogged run widen the rate tolerance.
RATE_GRANULARITY_FRAMES = 2
# z of a two-sided 99.9% Wilson score interval: with ~200 checked directions per campaign
# point a 95% interval would flag about 10 correct directions by chance
LOSS_Z = 3.29
# RTT: the host's own stack adds tens of microseconds on bare metal and up to a few
# milliseconds under software emulation (TCG: 21-31 ms for a 20 ms netem RTT, KERNEL.md);
# the minimum of several echoes removes most of that. Timer slack grows with the delay.
RTT_ABS_TOLERANCE_S = 2e-3
RTT_REL_TOLERANCE = 0.10
# on a host kernel (no software emulation): the minimum of several echoes through idle
# namespaces is tens of microseconds above the configured delay (the native line's release
# error is ~1 us at p50, its wake-up and the probe's own socket calls add the rest), so
# max(0.3 ms, 3%) still separates a working line from a wrong or missing one (a 1 ms delay
# set as 2 ms is off by 100%)
PRECISE_ABS_TOLERANCE_S = 0.3e-3
PRECISE_REL_TOLERANCE = 0.03
PROBE_IP_BYTES = 84  # ICMP echo with 56 bytes of data: 20 IP + 8 ICMP + 56, like ping(8)
ETH_HLEN = 14  # what HTB counts on a veth on top of the IP packet


@dataclass(frozen=True, slots=True)
class DirectionRef:
    """One shaped direction of one link and where its counters live.

    link: link name; direction: ``"a->b"`` or ``"b->a"``; tx_node/tx_dev: the sending end
    (HTB rate limiter and bottleneck queue on its egress); rx_node/rx_dev: the receiving end;
    netem_dev: the IFB in rx_node that holds the delay line (None without one); configured:
    this direction's shaping; reverse: the other direction's (for the round trip).
    """

    link: str
    direction: str
    tx_node: str
    tx_dev: str
    rx_node: str
    rx_dev: str
    netem_dev: str | None
    configured: Shaping
    reverse: Shaping
    line: LineCounts | None = None  # the native delay line's own counts (None: netem/none)
    precise: bool = False  # host kernel, no software emulation: the tighter tolerances
    mtu: int = 1500  # the link's IP MTU: a frame is mtu + ETH_HLEN bytes (rate granularity)
    tx_host: bool = False
    effects: DirectionEffects | None = None


@dataclass(frozen=True, slots=True)
class LineCounts:
    """What the native delay line (testbed/delay/nfqueue helper) saw of one direction over the
    checked period: packets in, drops by its loss model, drops by the kernel (queue full or
    netlink socket full: loss nobody configured), and its added delay (release - arrival:
    what packets got, FIFO order's wait included) p50/p99 in seconds over its lifetime (None:
    no packet); ``drawn_max_s``: the largest delay it drew (delay + jitter, before that wait;
    None from a helper that does not report it); ``dropped_after``: packets it released that
    the receiver's backlog refused (a line in the wire namespace, where the receiving veth
    counts them on the wire's side: the port's ``tx_dropped``)."""

    in_packets: int
    dropped_model: int
    dropped_kernel: int
    delay_p50_s: float | None
    delay_p99_s: float | None
    drawn_max_s: float | None = None
    # released by the line, then refused by the receiver's backlog (the wire namespace's port
    # towards it: its tx_dropped); already among in_packets
    dropped_after: int = 0


def _rows(df: pd.DataFrame | None, node: str, ifname: str, **match: str) -> pd.DataFrame:
    if df is None or df.empty:
        return pd.DataFrame()
    keep = (df["node"] == node) & (df["ifname"] == ifname)
    for col, value in match.items():
        keep &= df[col] == value
    return df[keep].sort_values("t_s")


def rate_check(qdisc: pd.DataFrame | None, ref: DirectionRef
               ) -> tuple[float | None, float | None, str]:
    """Dequeue rate (bit/s) of the HTB root (handle ``1:``) on the sending interface over
    the sampling intervals the queue was backlogged throughout, against the rate in force
    then (the plan's, or the one an ``events:`` action set: :func:`expected_rates`).

    Returns ``(measured bit/s, expected bit/s, status)``; expected is the time-weighted rate
    in force over the intervals measured.

    An interval counts as backlogged throughout when the backlog at its start held more
    bytes than the class may send in it (the rate in force x its length x (1 +
    :data:`RATE_TOLERANCE`) plus :data:`RATE_GRANULARITY_FRAMES` frames): a FIFO that is
    never drained below its starting content was never empty, whatever arrived. Two
    backlogged end samples are not enough (the queue can empty in between, as in loss
    recovery), and the test does not look at the bytes the interval sent, so it selects no
    interval for being slow or fast. An interval whose two samples' timing errors
    (``t_err_s``: half of each dump's duration) add up to more than :data:`RATE_TOLERANCE`
    of it is left out too: a sampler stopped in the middle of a dump stamps counters read
    a second later with the time it began. Bytes are what HTB counts (IP packet plus the 14-byte
    Ethernet header on a veth), so the measured rate compares directly with the configured
    HTB rate. ``not_exercised`` without a configured rate or with fewer than
    :data:`MIN_BACKLOGGED_INTERVALS` backlogged intervals; ``off`` when the rate differs by
    more than :func:`rate_tolerance` (relative): :data:`RATE_TOLERANCE` plus the packet
    granularity of the backlogged runs.
    """
    rows = _rows(qdisc, ref.tx_node, ref.tx_dev, kind="htb")
    rows = rows[rows["handle"].isin(("1:", "1:0"))] if len(rows) else rows
    if len(rows) < 2:
        return None, None, "not_exercised"
    t = rows["t_s"].to_numpy(dtype=float)
    dt = np.diff(t)
    dbytes = np.diff(rows["bytes"].to_numpy(dtype=np.int64)).astype(float)
    start_backlog = rows["backlog_bytes"].to_numpy(dtype=float)[:-1]
    want = expected_rates(t[:-1], t[1:], ref.configured.rate_bps, ref.effects)
    frames = RATE_GRANULARITY_FRAMES * (ref.mtu + ETH_HLEN)
    err = rows["t_err_s"].to_numpy(dtype=float) if "t_err_s" in rows else np.zeros(len(t))
    with np.errstate(invalid="ignore"):
        busy = (dt > 0) & np.isfinite(want) & (
            start_backlog > want / 8.0 * dt * (1 + RATE_TOLERANCE) + frames) & (
            err[:-1] + err[1:] <= RATE_TOLERANCE * dt)
    if busy.sum() < MIN_BACKLOGGED_INTERVALS:
        return None, None, "not_exercised"
    busy_s = float(dt[busy].sum())
    runs = int(np.count_nonzero(busy[1:] & ~busy[:-1]) + busy[0])  # contiguous busy stretches
    measured = 8.0 * float(dbytes[busy].sum()) / busy_s
    expected = float((want[busy] * dt[busy]).sum()) / busy_s
    tol = rate_tolerance(expected, busy_s, runs, ref.mtu)
    return measured, expected, "ok" if abs(measured / expected - 1.0) <= tol else "off"


def rate_tolerance(rate_bps: float, busy_s: float, runs: int, mtu: int = 1500) -> float:
    """Relative tolerance of the rate check: :data:`RATE_TOLERANCE` plus the packet
    granularity, ``runs`` x :data:`RATE_GRANULARITY_FRAMES` frames of ``mtu`` + 14 bytes
    against the bytes the rate sends in the ``busy_s`` seconds of backlogged sampling
    intervals. At 1 Gbit/s over 1 s in 10 runs that is +0.02%; at 1 Mbit/s over three 30 ms
    runs +81% (that little backlog cannot tell the rate better)."""
    slack_bits = runs * RATE_GRANULARITY_FRAMES * (mtu + ETH_HLEN) * 8
    return RATE_TOLERANCE + slack_bits / (rate_bps * busy_s)


def interface_drops(qdisc: pd.DataFrame | None, node: str, ifname: str
                    ) -> tuple[int, int]:
    """(packets dropped, packets sent) by the egress queue of ``node``'s ``ifname`` between
    its first and last counter sample: drops of its segmenter (a tbf that cuts GSO packets
    into frames before a small buffer counts every frame the buffer drops, where the root HTB
    sees one packet: net/sched/sch_tbf.c tbf_segment) where it has one, else of its root
    HTB (which counts its leaf's drops, net/sched/sch_htb.c htb_enqueue); packets: the root
    HTB's dequeues. (0, 0) without samples."""
    htb = _rows(qdisc, node, ifname, kind="htb")
    htb = htb[htb["handle"].isin(("1:", "1:0"))] if len(htb) else htb
    seg = _rows(qdisc, node, ifname, kind="tbf")
    drops = _delta(seg, "drops") if len(seg) else _delta(htb, "drops")
    return drops, _delta(htb, "packets")


def host_drops_check(qdisc: pd.DataFrame | None, ref: DirectionRef
                     ) -> tuple[int | None, str | None]:
    """Drops at a host's own egress queue (``ref.tx_host``): ``(drops, status)``, status
    ``ok`` (none), ``off`` (any) or ``not_exercised`` (nothing sent); ``(None, None)`` for a
    direction a switch or router sends on (the check does not apply).

    A real host's NIC queue does not drop its own TCP segments: TCP Small Queues let a
    socket hold only a couple of packets in the qdisc (net/ipv4/tcp_output.c,
    tcp_small_queue_check) and a full device queue stops the qdisc, not the socket. A
    scaled host port whose buffer is a few frames is smaller than what TSQ lets in (two GSO
    packets of up to 64 KiB), so it drops; the local drop makes TCP wait (no retransmission
    counted, the probe timer at RTO scale) where the unscaled host would not: the run is then
    slower than the network it emulates for a reason that network does not have."""
    if not ref.tx_host:
        return None, None
    drops, sent = interface_drops(qdisc, ref.tx_node, ref.tx_dev)
    if sent + drops <= 0:
        return None, "not_exercised"
    return drops, "off" if drops > 0 else "ok"


def _delta(rows: pd.DataFrame, col: str) -> int:
    return int(rows[col].iloc[-1] - rows[col].iloc[0]) if len(rows) else 0


def configured_loss_pct(s: Shaping) -> float:
    """Mean configured loss in percent: random loss, or the Gilbert-Elliott stationary mean."""
    return s.loss_gemodel.mean_loss_pct() if s.loss_gemodel is not None else s.loss_pct


def _burst_length(s: Shaping) -> float:
    """Mean run length of losses: 100/r_pct for Gilbert-Elliott (the bad state's mean
    sojourn, geometric), 1 for random loss. Losses in runs are fewer independent draws."""
    if s.loss_gemodel is None or s.loss_gemodel.r_pct <= 0:
        return 1.0
    return 100.0 / s.loss_gemodel.r_pct


def wilson_interval(k: float, n: float, z: float = LOSS_Z) -> tuple[float, float]:
    """Wilson score interval (fractions) of k successes in n trials. Source: E. B. Wilson,
    "Probable inference, the law of succession, and statistical inference", JASA 22 (1927)."""
    p = k / n if n else 0.0
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def loss_check(qdisc: pd.DataFrame | None, links: pd.DataFrame | None,
               ref: DirectionRef) -> tuple[float | None, str]:
    """Measured loss (percent) of the direction over the sampled period, against the
    configured one.

    Drops: the netem qdisc's drops (its loss model; its limit is sized never to overflow) plus
    the sending veth's tx_dropped (a full per-CPU backlog: loss nobody configured). Packets
    offered: netem's packets + drops where there is a delay line, else the veth's tx_packets
    + tx_dropped. A native line (``ref.line``) counts instead of netem: its loss-model and
    kernel drops and what the receiver's backlog refused after it (``dropped_after``), its
    packets in plus the kernel's drops. ``ok``: no drop at all for a
    configured 0%, else the configured mean inside
    the 99.9% Wilson interval of the measured fraction (trials thinned by the mean burst
    length for Gilbert-Elliott loss). ``not_exercised`` when no packet was offered, or when
    an ``events:`` action set the direction's loss or took its link down (``ref.effects``):
    those losses were planned, and the counters cannot tell them from the others.
    """
    if ref.effects is not None and ref.effects.loss_set:
        return None, "not_exercised"  # an event set its loss or took it down: planned loss
    veth = _rows(links, ref.tx_node, ref.tx_dev)
    drops, offered = _delta(veth, "tx_dropped"), _delta(veth, "tx_packets")
    offered += drops
    if ref.line is not None:  # the native line counts what it received and dropped
        line_drops = ref.line.dropped_model + ref.line.dropped_kernel + ref.line.dropped_after
        drops += line_drops
        offered = ref.line.in_packets + ref.line.dropped_kernel + _delta(veth, "tx_dropped")
    elif ref.netem_dev is not None:
        netem = _rows(qdisc, ref.rx_node, ref.netem_dev, kind="netem")
        netem_drops = _delta(netem, "drops")
        drops += netem_drops
        offered = _delta(netem, "packets") + netem_drops + _delta(veth, "tx_dropped")
    if offered <= 0:
        return None, "not_exercised"
    measured = 100.0 * drops / offered
    want = configured_loss_pct(ref.configured)
    if want == 0:
        return measured, "ok" if drops == 0 else "off"
    burst = _burst_length(ref.configured)
    low, high = wilson_interval(drops / burst, offered / burst)
    return measured, "ok" if low <= want / 100.0 <= high else "off"


def expected_rtt_s(fwd: Shaping, rev: Shaping) -> float:
    """The earliest one echo can come back over the link (seconds): both one-way delays,
    nothing for the rate limiters.

    Serialization at the shaped rate is not a floor of a probe's RTT: an HTB class sends
    whenever its token count is >= 0 and charges the packet's length after it is dequeued
    (net/sched/sch_htb.c: htb_class_mode compares the tokens with htb_lowater(), 0 without
    hysteresis, before htb_charge_class), and a veth has no line of its own, so a probe that
    finds tokens crosses at memory speed. aitb's classes hold burst = cburst >= two full frames
    (testbed/tc/qdiscs/htb.py: htb_burst_bytes; tc-htb(8): "burst: amount of bytes that can be
    burst at ceil speed, in excess of the configured rate"), and the probe crosses an idle
    link, so it normally finds them. What the shaping guarantees is the configured delay (the
    netem/native line holds every packet that long); see :func:`rtt_tolerance_s` for the
    time a probe may wait for tokens."""
    return fwd.delay_s + rev.delay_s


def probe_wait_s(fwd: Shaping, rev: Shaping, probe_ip_bytes: int = PROBE_IP_BYTES) -> float:
    """The most the two rate limiters can add to an echo on an otherwise idle link (seconds):
    the probe's frame (IP packet + Ethernet header) at each direction's rate. A class whose
    tokens a previous packet drove below 0 (by at most one frame: the charge comes after the
    dequeue, see :func:`expected_rtt_s`) makes the probe wait until they are back at 0; with
    tokens to spare (the usual case) it waits nothing. An upper margin, never a floor."""
    bits = 8 * (probe_ip_bytes + ETH_HLEN)
    return sum(bits / s.rate_bps for s in (fwd, rev) if s.rate_bps)


def rtt_tolerance_s(fwd: Shaping, rev: Shaping, precise: bool = False) -> tuple[float, float]:
    """Accepted (low, high) of the measured minimum RTT in seconds around the floor
    :func:`expected_rtt_s` (both delays) and the ceiling floor + :func:`probe_wait_s`:
    low = floor minus both jitters and :data:`RTT_ABS_TOLERANCE_S`; high = ceiling plus
    :data:`RTT_ABS_TOLERANCE_S` and :data:`RTT_REL_TOLERANCE` of it. ``precise`` (a host
    kernel): :func:`precise_tolerance_s` of the floor instead, on both sides. A delay
    configured but missing or wrong by more than the tolerance is outside (low side); so
    is one longer than configured by more than the probe's wait plus the tolerance."""
    floor = expected_rtt_s(fwd, rev)
    ceiling = floor + probe_wait_s(fwd, rev)
    if precise:
        tol = precise_tolerance_s(floor)
        return max(0.0, floor - fwd.jitter_s - rev.jitter_s - tol), ceiling + tol
    low = floor - fwd.jitter_s - rev.jitter_s - RTT_ABS_TOLERANCE_S
    return max(0.0, low), ceiling * (1 + RTT_REL_TOLERANCE) + RTT_ABS_TOLERANCE_S


def precise_tolerance_s(want_s: float) -> float:
    """max(:data:`PRECISE_ABS_TOLERANCE_S`, :data:`PRECISE_REL_TOLERANCE` x ``want_s``)."""
    return max(PRECISE_ABS_TOLERANCE_S, PRECISE_REL_TOLERANCE * want_s)


def delay_check(ref: DirectionRef) -> tuple[float | None, str]:
    """The native line's median added delay (seconds, what packets got) against the
    configured one-way delay: ``ok`` within the configured jitter plus
    :func:`precise_tolerance_s` (``precise``) or :data:`RTT_ABS_TOLERANCE_S` +
    :data:`RTT_REL_TOLERANCE`; ``not_exercised`` without a native line or without packets
    through it. A jittered line that keeps FIFO order (no ``jitter_reorder``) holds a packet
    until the one ahead of it has left, so when packets come faster than the jitter's spread
    the median rises towards the largest draws (docs/delay-line.md): there the upper bound is
    the largest delay the line drew (``drawn_max_s``) plus the tolerance, since a FIFO release
    is the largest target of the packets up to it and never exceeds the largest draw.
    ``not_exercised`` too when an ``events:`` action changed the delay (the line's median then
    mixes both values)."""
    if ref.line is None or ref.line.delay_p50_s is None or (
            ref.effects is not None and ref.effects.delay_set):
        return None, "not_exercised"
    want = ref.configured.delay_s
    tol = precise_tolerance_s(want) if ref.precise else \
        RTT_ABS_TOLERANCE_S + RTT_REL_TOLERANCE * want
    got = ref.line.delay_p50_s
    low, high = want - ref.configured.jitter_s - tol, want + ref.configured.jitter_s + tol
    if ref.configured.jitter_s and not ref.configured.jitter_reorder \
            and ref.line.drawn_max_s is not None:
        high = max(high, ref.line.drawn_max_s + tol)
    return got, "ok" if low <= got <= high else "off"


def rtt_check(rtt_s: float | None, ref: DirectionRef) -> str:
    """``ok`` when the probed minimum RTT of the link lies within :func:`rtt_tolerance_s`,
    ``off`` outside, ``not_exercised`` when it was not probed (an end without address)."""
    if rtt_s is None:
        return "not_exercised"
    low, high = rtt_tolerance_s(ref.configured, ref.reverse, ref.precise)
    return "ok" if low <= rtt_s <= high else "off"
