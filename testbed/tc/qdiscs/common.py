"""Numbers every discipline module of :mod:`testbed.tc.qdiscs` shares: frame overhead, default
buffer, scheduler ticks and netlink percentages (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from models.shaping import Shaping

__all__ = ["ETH_HLEN", "DEFAULT_BUFFER_PACKETS", "UNSHAPED_RATE_BPS", "PSCHED_TICK_NS",
           "TC_LINKLAYER_ETHERNET", "default_buffer_packets", "ticks", "pct_u32", "pct_word",
           "TcLike", "Spec", "buffer_bytes", "no_words", "no_options", "no_problems",
           "no_stats"]

ETH_HLEN = 14  # Ethernet header that HTB and fifo limits count on a veth (skb->len), if_ether.h
DEFAULT_BUFFER_PACKETS = 1000  # like a txqueuelen: used when a rate has no explicit buffer
UNSHAPED_RATE_BPS = 40 * 10**9  # assumed line rate of an unshaped veth (measured ~17 Gbit/s)
PSCHED_TICK_NS = 64  # PSCHED_SHIFT in include/net/pkt_sched.h
TC_LINKLAYER_ETHERNET = 1  # tc_ratespec.linklayer, include/uapi/linux/pkt_sched.h

# (kind, params) of a qdisc a discipline module proposes; testbed.tc.recipe places it on a device
Spec = tuple[str, Mapping[str, Any]]


class TcLike(Protocol):
    """What a discipline module reads of a :class:`testbed.tc.objects.TcObject`."""

    @property
    def verb(self) -> str: ...  # noqa: D102

    @property
    def kind(self) -> str: ...  # noqa: D102

    @property
    def params(self) -> Mapping[str, Any]: ...  # noqa: D102


def default_buffer_packets() -> int:
    """Buffer of a rate-limited direction without an explicit one (packets): 1000, the
    default txqueuelen of an Ethernet device (``DEFAULT_TX_QUEUE_LEN``,
    include/linux/netdevice.h)."""
    return DEFAULT_BUFFER_PACKETS


def ticks(seconds: float) -> int:
    """``seconds`` in packet-scheduler ticks of :data:`PSCHED_TICK_NS` nanoseconds."""
    return round(seconds * 1e9 / PSCHED_TICK_NS)


def pct_u32(pct: float) -> int:
    """A percentage as netem's u32 probability (tc's set_percent: rint(p * UINT32_MAX))."""
    return round(pct / 100 * 0xFFFFFFFF)


def pct_word(x: float) -> str:
    """A percentage as tc spells it on its command line (``"0.5%"``)."""
    return f"{x:g}%"


def buffer_bytes(shaping: Shaping, mtu: int) -> int:
    """The bottleneck buffer of ``shaping`` in bytes, for an AQM that sizes itself in bytes:
    a packet buffer counts full frames (``mtu`` + :data:`ETH_HLEN`); none given means
    :func:`default_buffer_packets` frames."""
    buf = shaping.buffer
    if buf is not None and buf.size_bytes is not None:
        return buf.size_bytes
    return (buf.packets if buf is not None else default_buffer_packets()) * (mtu + ETH_HLEN)


# the interface functions of a discipline with nothing of its own to say (no parameters, only
# its kind compared on readback, no extra lab-state fields): tbf, ingress


def no_words(o: TcLike) -> list[str]:
    """No tc words beyond the kind."""
    return []


def no_options(o: TcLike, ifindex_of: Any) -> dict[str, Any] | None:
    """No TCA_OPTIONS."""
    return None


def no_problems(o: TcLike, opts: Any) -> list[str]:
    """Readback compares the kind only (testbed.lab.verify does)."""
    return []


def no_stats(opts: Any) -> dict[str, Any]:
    """Nothing beyond the counters."""
    return {}
