"""Fidelity checks of a whole run, beside the per-direction ones (pure): retransmission
timeouts nobody planned, a counter sampler that stalled, and a scale that shrank paths to a
few packets. Each returns a dict of figures with, where it found something, ``reason`` (the
run is not trustworthy) or ``warning`` (it may be, read with care);
:func:`analysis.fidelity.fidelity_report` takes them as ``run_checks``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from models.paths import PathError, PathWalker
from models.plan import LabPlan

__all__ = ["rto_stalls", "sampler_gaps", "scaled_paths", "RTO_MIN_S", "SAMPLER_STALL_S",
           "FEW_PACKETS"]

# Linux's minimum retransmission timeout (include/net/tcp.h TCP_RTO_MIN, 200 ms): each RTO
# stalls its transfer at least this long, longer than any queue of these labs drains
RTO_MIN_S = 0.2
# a counter sampler (its own process, sampling every ~10 ms) that went this long without a
# sample was not scheduled for 100 intervals: whatever starved it starved the delay line's
# helper and the agents too, and per-interval figures across the gap are unknown
SAMPLER_STALL_S = 1.0
# below this many packets in flight (a path's bandwidth-delay product) or queued (a buffer)
# TCP loses its ACK clock on one loss (three duplicate ACKs need four segments in flight,
# RFC 5681 section 3.2) and a loss is repaired by a timeout instead
FEW_PACKETS = 4
_FRAME_OVERHEAD = 14  # Ethernet header: a frame is the IP MTU + 14 bytes on a veth


def rto_stalls(before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]],
               *, network_drops: int, planned_loss: bool) -> dict[str, Any]:
    """Retransmission timeouts during the workloads per host: ``before``/``after`` node ->
    the TcpExt counters of its namespace (testbed/counters/tcpstats.py) around them.

    Each RTO stalls a transfer for at least :data:`RTO_MIN_S`. In the network the plan
    describes a timeout needs a loss there: a drop at a switch or router queue
    (``network_drops``), configured loss or one an event set (``planned_loss``). With one
    of those the timeouts are the network's own (a ``warning``: the run's times are
    RTO-bound); without, they come from the emulation (local drops, a starved delay line)
    and the run is not trustworthy (``reason``). Returns ``{"timeouts", "spurious",
    "per_host", "hosts_read"}`` and the reason or warning; ``timeouts`` None when no host's
    counters could be read."""
    per_host = {n: max(0, int(after[n].get("TCPTimeouts", 0))
                       - int(before[n].get("TCPTimeouts", 0)))
                for n in after if n in before}
    spurious = sum(max(0, int(after[n].get("TCPSpuriousRTOs", 0))
                       - int(before[n].get("TCPSpuriousRTOs", 0))) for n in per_host)
    total = sum(per_host.values()) if per_host else None
    out: dict[str, Any] = {"timeouts": total, "spurious": spurious if per_host else None,
                           "per_host": {n: k for n, k in per_host.items() if k},
                           "hosts_read": len(per_host)}
    if not total:
        return out
    worst = sorted(out["per_host"].items(), key=lambda kv: -kv[1])[:3]
    where = ", ".join(f"{n} {k}" for n, k in worst)
    if network_drops > 0 or planned_loss:
        out["warning"] = (f"{total} TCP retransmission timeouts ({where}), each a stall of "
                          f">= {RTO_MIN_S * 1e3:.0f} ms: the run's times are bound by "
                          "timeouts after the losses its network drops or plans")
    else:
        out["reason"] = (f"{total} TCP retransmission timeouts ({where}), each a stall of "
                         f">= {RTO_MIN_S * 1e3:.0f} ms, while no switch or router queue "
                         "dropped and no loss was configured: transfers stalled for "
                         "something the emulated network does not have")
    return out


def sampler_gaps(t_s: Iterable[float], windows: Sequence[tuple[float, float]],
                 interval_s: float | None) -> dict[str, Any]:
    """The counter sampler's largest gap between two readings (``t_s``: when each reading
    was complete, s: a row's ``t_s + t_err_s``, the end of its dump, so that a sampler
    stopped in the middle of a dump shows the whole stop) that overlaps the workloads'
    ``windows`` ((start, end) s); a ``reason`` when it is :data:`SAMPLER_STALL_S` or more.
    ``{"interval_s", "gap_max_s", "gap_at_s"}`` (None without two samples)."""
    t = np.unique(np.asarray(list(t_s), dtype=float))
    out: dict[str, Any] = {"interval_s": interval_s, "gap_max_s": None, "gap_at_s": None}
    if len(t) < 2:
        return out
    lo, hi = t[:-1], t[1:]
    inside = np.zeros(len(lo), dtype=bool) if windows else np.ones(len(lo), dtype=bool)
    for a, b in windows:
        inside |= (hi > a) & (lo < b)
    if not inside.any():
        return out
    gaps = np.where(inside, hi - lo, 0.0)
    i = int(np.argmax(gaps))
    out.update(gap_max_s=round(float(gaps[i]), 4), gap_at_s=round(float(lo[i]), 4))
    if gaps[i] >= SAMPLER_STALL_S:
        out["reason"] = (f"the counter sampler went {gaps[i]:.2f} s without a sample during "
                         f"the workloads (every {interval_s or 0:g} s planned): whatever "
                         "stopped it stopped the delay line's helper and the agents too, and "
                         "per-interval counts (backlogged rates, per-burst drops) across the "
                         "gap are unknown")
    return out


def _frames(size_bytes: float, mtu: int) -> float:
    return size_bytes / (mtu + _FRAME_OVERHEAD)


def _buffer_frames(buf: Any, mtu: int) -> float | None:
    if buf is None:
        return None
    return float(buf.packets) if buf.packets is not None else _frames(buf.size_bytes, mtu)


def _path(walker: PathWalker, src: str, src_ip: str, dst: str, dst_ip: str
          ) -> tuple[int | None, float]:
    """As analysis/paths.py ideal_params, on one walker: the best path's bottleneck rate
    (None: a path unshaped) and the smallest forward plus reverse delay sum (s)."""
    fwd, rev = walker.paths(src, dst_ip), walker.paths(dst, src_ip)
    rates = [min((h.shaping.rate_bps for h in p if h.shaping.rate_bps is not None),
                 default=None) for p in fwd]
    rate = None if not rates or None in rates else max(r for r in rates if r is not None)
    delay = min(sum(h.shaping.delay_s for h in p) for p in fwd) \
        + min(sum(h.shaping.delay_s for h in p) for p in rev)
    return rate, delay


def scaled_paths(plan: LabPlan, scale: float,
                 pairs: Iterable[tuple[str, str, str, str]]) -> dict[str, Any]:
    """Paths and buffers that ``scale`` (> 1: rates and buffers divided, delays kept,
    topologies/scaling.py) shrank below :data:`FEW_PACKETS` packets while the unscaled
    network has at least that many: a ``warning`` naming the worst ones.

    pairs: (src_node, src_ip, dst_node, dst_ip) of the transfers the run made; a path's BDP
    in packets is its bottleneck rate x base RTT (as analysis/paths.py ideal_params) / 8 /
    the frame size (link MTU + 14). Buffers: every shaped direction's, in frames. Returns
    ``{"scale", "paths_few_packets", "buffers_few_packets"}`` (counts) and the warning."""
    out: dict[str, Any] = {"scale": scale, "paths_few_packets": 0, "buffers_few_packets": 0}
    if scale <= 1:
        return out
    mtu = min((lk.mtu for lk in plan.links), default=1500)
    small: list[tuple[float, str]] = []
    walker = PathWalker(plan)
    for src, src_ip, dst, dst_ip in sorted(set(pairs)):
        try:
            rate, rtt = _path(walker, src, src_ip, dst, dst_ip)
        except PathError:
            continue
        if rate is None:
            continue
        bdp = _frames(rate * rtt / 8, mtu)
        if bdp < FEW_PACKETS <= bdp * scale:
            small.append((bdp, f"path {src} -> {dst} BDP {bdp:.2g} packets "
                               f"({bdp * scale:.3g} unscaled)"))
    out["paths_few_packets"] = len(small)
    bufs: list[tuple[float, str]] = []
    for lk in plan.links:
        for d, arrow in (("a_to_b", "a->b"), ("b_to_a", "b->a")):
            frames = _buffer_frames(getattr(lk, d).buffer, lk.mtu)
            if frames is not None and frames < FEW_PACKETS <= frames * scale:
                bufs.append((frames, f"buffer of {lk.name} {arrow} {frames:.2g} packets "
                                     f"({frames * scale:.3g} unscaled)"))
    out["buffers_few_packets"] = len(bufs)
    found = sorted(small)[:3] + sorted(bufs)[:3]
    if found:
        more = len(small) + len(bufs) - len(found)
        out["warning"] = (f"scale {scale:g} divides rates and buffers but keeps delays: "
                          + "; ".join(w for _, w in found)
                          + (f"; and {more} more" if more else "")
                          + f". Below {FEW_PACKETS} packets TCP repairs a loss by a timeout "
                          "where the unscaled network would not; times do not scale back")
    return out
