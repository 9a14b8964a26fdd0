"""TCP socket knobs and TCP_INFO, read back from the kernel (Linux only).

TCP_INFO layout: ``struct tcp_info`` of include/uapi/linux/tcp.h (Linux 6.x), read as its
first 224 bytes; older kernels return fewer bytes and the missing fields read as 0.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from models.records import TcpInfo

__all__ = ["TcpKnobs", "apply_knobs", "read_tcp_info", "tcp_info_delta", "TCP_INFO_FIELDS",
           "namespace_sysctls", "SYSCTLS"]

# per-namespace TCP settings worth recording with every run (read, never written, here:
# the lab sets them from NodePlan.sysctls); tcp_ecn: 0 off, 1 request and accept, 2 accept
SYSCTLS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_ecn", "net.ipv4.tcp_rmem",
           "net.ipv4.tcp_wmem", "net.ipv4.tcp_early_retrans", "net.ipv4.tcp_no_metrics_save",
           "net.core.default_qdisc")

_FMT = "=8B24I4Q6I4Q2I2Q2I"
_SIZE = struct.calcsize(_FMT)  # 224
TCPI_OPT_ECN = 8  # include/uapi/linux/tcp.h: ECN was negotiated at the handshake
NO_RTT_SAMPLE = 0xFFFFFFFF  # tcpi_min_rtt before the first sample (minmax reset to ~0U, tcp.c)
TCP_INFO_FIELDS = (
    "state ca_state retransmits probes backoff options wscale flags "
    "rto ato snd_mss rcv_mss unacked sacked lost retrans fackets "
    "last_data_sent last_ack_sent last_data_recv last_ack_recv "
    "pmtu rcv_ssthresh rtt rttvar snd_ssthresh snd_cwnd advmss reordering "
    "rcv_rtt rcv_space total_retrans pacing_rate max_pacing_rate bytes_acked bytes_received "
    "segs_out segs_in notsent_bytes min_rtt data_segs_in data_segs_out delivery_rate "
    "busy_time rwnd_limited sndbuf_limited delivered delivered_ce bytes_sent bytes_retrans "
    "dsack_dups reord_seen").split()


@dataclass(frozen=True, slots=True)
class TcpKnobs:
    """Per-socket TCP settings: ``congestion_control`` (None: the namespace default),
    ``sndbuf_bytes``/``rcvbuf_bytes`` (None: autotuning; the kernel doubles what is set,
    socket(7)), ``nodelay`` (TCP_NODELAY)."""

    congestion_control: str | None = None
    sndbuf_bytes: int | None = None
    rcvbuf_bytes: int | None = None
    nodelay: bool = True


def apply_knobs(sock: socket.socket, knobs: TcpKnobs) -> dict[str, object]:
    """Set ``knobs`` on ``sock`` and return what the kernel reports back (congestion control,
    SO_SNDBUF, SO_RCVBUF in bytes, TCP_NODELAY). Raises OSError if the kernel refuses a
    congestion control (for example one it does not have)."""
    if knobs.nodelay:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if knobs.sndbuf_bytes:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, knobs.sndbuf_bytes)
    if knobs.rcvbuf_bytes:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, knobs.rcvbuf_bytes)
    if knobs.congestion_control:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION,
                        knobs.congestion_control.encode())
    cc = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    return {"congestion_control": cc.split(b"\0", 1)[0].decode(),
            "sndbuf_bytes": sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            "rcvbuf_bytes": sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            "nodelay": bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))}


def read_tcp_info(sock: socket.socket) -> dict[str, int]:
    """``struct tcp_info`` of ``sock`` as a dict (times in microseconds as the kernel gives)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _SIZE)
    raw = raw + bytes(_SIZE - len(raw))
    return dict(zip(TCP_INFO_FIELDS, struct.unpack(_FMT, raw), strict=True))


def tcp_info_delta(before: Mapping[str, int], after: Mapping[str, int],
                   congestion_control: str = "", size_bytes: int | None = None) -> TcpInfo:
    """A :class:`TcpInfo` for one transfer from the readings at the previous transfer's ack
    instant (``before``; the connection's baseline for its first one) and at this one's
    (``after``): retransmission, reordering and CE counters are their differences, gauges
    come from ``after`` (``ecn`` from its options; rtt and rttvar converted from microseconds
    to seconds, delivery rate from bytes/s to bit/s; the kernel's latest rate sample, never
    differenced).

    ``bytes_sent`` with ``size_bytes`` given: ``size_bytes`` (each new byte leaves once as new
    data; the kernel's ``tcpi_bytes_sent - tcpi_bytes_retrans``) plus the retransmitted bytes
    between the two readings. The plain difference of ``tcpi_bytes_sent`` would also count the
    next transfer's new bytes already sent at ``after`` (back-to-back transfers pipeline) and
    drop this transfer's sent before ``before``. Without ``size_bytes``: that plain
    difference."""
    retrans = after["bytes_retrans"] - before["bytes_retrans"]
    sent = (size_bytes + retrans if size_bytes is not None
            else after["bytes_sent"] - before["bytes_sent"])
    return TcpInfo(
        total_retrans=after["total_retrans"] - before["total_retrans"],
        bytes_retrans=retrans,
        bytes_sent=sent,
        lost=after["lost"],
        rtt_s=after["rtt"] / 1e6,
        rttvar_s=after["rttvar"] / 1e6,
        snd_cwnd=after["snd_cwnd"],
        delivery_rate_bps=after["delivery_rate"] * 8,
        congestion_control=congestion_control,
        dsack_dups=after["dsack_dups"] - before["dsack_dups"],
        min_rtt_s=after["min_rtt"] / 1e6 if 0 < after["min_rtt"] < NO_RTT_SAMPLE else None,
        reord_seen=after["reord_seen"] - before["reord_seen"],
        delivered_ce=after["delivered_ce"] - before["delivered_ce"],
        ecn=bool(after["options"] & TCPI_OPT_ECN),
    )


def namespace_sysctls() -> dict[str, str]:
    """The :data:`SYSCTLS` of the calling process's network namespace (/proc/sys/net is per
    namespace); a key the kernel lacks reads as ""."""
    out = {}
    for key in SYSCTLS:
        try:
            out[key] = Path("/proc/sys", *key.split(".")).read_text().strip()
        except OSError:
            out[key] = ""
    return out
