"""Read the helper's stats JSON and its per-packet binary log."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

# per-packet log record: arrival_ns, target_ns, release_ns (0: dropped), len, flags; all
# CLOCK_MONOTONIC nanoseconds of the helper
PKTLOG_RECORD = struct.Struct("<QQQII")
FLAG_LOSS, FLAG_GE, FLAG_CORRUPT, FLAG_REORDER = 1, 2, 4, 8


@dataclass(frozen=True)
class Histogram:
    """Percentiles (microseconds) of a log-linear histogram (1/64 relative resolution)."""

    n: int
    mean_us: float
    min_us: float
    p50_us: float
    p90_us: float
    p99_us: float
    p999_us: float
    max_us: float


@dataclass(frozen=True)
class QueueStats:
    """Counters of one queue (one link direction)."""

    num: int
    delay_us: float
    jitter_us: float
    dist: str
    loss_pct: float
    in_packets: int
    in_bytes: int
    out_packets: int
    out_bytes: int
    dropped_loss: int
    dropped_ge: int
    corrupted: int
    corrupt_skipped: int
    reordered: int
    held: int
    kernel_queue_total: int  # -1: /proc/net/netfilter/nfnetlink_queue unreadable
    kernel_queue_dropped: int  # dropped by the kernel: queue full (maxlen)
    kernel_user_dropped: int  # dropped by the kernel: netlink socket full
    added_delay: Histogram  # release - arrival
    release_error: Histogram  # release - intended release (>= 0)
    raw: dict = field(repr=False, default_factory=dict)
    # delay drawn for each held packet (delay + jitter), before FIFO order's wait for the
    # packet ahead; None from a helper that does not report it
    drawn_delay: Histogram | None = None

    @property
    def dropped(self) -> int:
        """All drops the helper decided (random + Gilbert-Elliott)."""
        return self.dropped_loss + self.dropped_ge


# the helper loop's own counts (whole process, all queues): netlink messages read and recvmmsg
# calls, verdict messages sent and sendto calls, wake-ups from epoll (arrivals, signals,
# timeouts) and from timer-only sleeps, and arrivals timed by the kernel's receive stamp or
# by the helper's read (no usable stamp), and the times a --pktlog record waited for room in
# the writer thread's ring (the thread a whole ring, 1.6 s at 80 000 packets/s, behind)
LOOP_KEYS = ("recv_calls", "recv_msgs", "send_calls", "verdict_msgs", "epoll_wakeups",
             "timer_wakeups", "arrivals_stamped", "arrivals_read", "pktlog_waits")


@dataclass(frozen=True)
class HelperStats:
    """One stats snapshot of a helper process (``loop``: :data:`LOOP_KEYS` -> count)."""

    pid: int
    final: bool
    clock: str
    uptime_s: float
    cpu_s: float
    send_errors: int
    recv_enobufs: int
    queues: dict[int, QueueStats]
    loop: dict[str, int] = field(default_factory=dict)
    # time inside each sendto of verdicts (ns -> us histogram): the kernel re-injects the
    # accepted packets within that call, so it delays every release due meanwhile
    verdict_send: Histogram | None = None


def _hist(d: dict) -> Histogram:
    return Histogram(**{k: d[k] for k in Histogram.__dataclass_fields__})


def parse_stats(doc: dict) -> HelperStats:
    """HelperStats from the decoded JSON."""
    qs = {}
    for q in doc["queues"]:
        kw = {k: q[k] for k in QueueStats.__dataclass_fields__
              if k not in ("added_delay", "release_error", "raw", "drawn_delay")}
        qs[q["num"]] = QueueStats(**kw, added_delay=_hist(q["added_delay"]),
                                  release_error=_hist(q["release_error"]), raw=q,
                                  drawn_delay=_hist(q["drawn_delay"]) if "drawn_delay" in q
                                  else None)
    return HelperStats(pid=doc["pid"], final=doc["final"], clock=doc["clock"],
                       uptime_s=doc["uptime_s"], cpu_s=doc["cpu_s"],
                       send_errors=doc["send_errors"], recv_enobufs=doc["recv_enobufs"], queues=qs,
                       loop={k: doc[k] for k in LOOP_KEYS if k in doc},
                       verdict_send=_hist(doc["verdict_send"]) if "verdict_send" in doc else None)


def read_stats(path: str | Path) -> HelperStats:
    """Read a stats file (written atomically by the helper: never half a file)."""
    return parse_stats(json.loads(Path(path).read_text()))


def read_pktlog(path: str | Path) -> list[tuple[int, int, int, int, int]]:
    """(arrival_ns, target_ns, release_ns, len, flags) per packet, in release order (drops at
    arrival, release_ns 0)."""
    data = Path(path).read_bytes()
    usable = len(data) - len(data) % PKTLOG_RECORD.size
    return list(PKTLOG_RECORD.iter_unpack(data[:usable]))
