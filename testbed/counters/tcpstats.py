"""The TCP stack's own event counters of each host namespace (``/proc/net/netstat``, the
``TcpExt`` line: the kernel's per-namespace MIB, include/uapi/linux/snmp.h), read before and
after the workloads so the fidelity check can count retransmission timeouts
(``TCPTimeouts``: every RTO that fired, net/ipv4/tcp_timer.c tcp_retransmit_timer) that a
transfer's TCP_INFO does not keep. Needs root; reads, changes nothing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from models.errors import AitbError
from testbed.ns import netns

if TYPE_CHECKING:
    from testbed.lab.lab import Lab

__all__ = ["tcp_ext", "read_tcp_ext", "parse_netstat", "COUNTERS"]

# the TcpExt counters kept: RTOs fired, RTOs later found spurious (F-RTO, RFC 5682), tail
# loss probes sent (RFC 8985)
COUNTERS = ("TCPTimeouts", "TCPSpuriousRTOs", "TCPLossProbes")


def parse_netstat(text: str) -> dict[str, int]:
    """The ``TcpExt`` counters of a ``/proc/net/netstat`` text (a header line of names and a
    line of values per MIB) that are in :data:`COUNTERS`; absent ones left out."""
    lines = [ln.split() for ln in text.splitlines() if ln.startswith("TcpExt:")]
    if len(lines) < 2:
        return {}
    values = dict(zip(lines[0][1:], lines[1][1:], strict=False))
    return {k: int(values[k]) for k in COUNTERS if k in values}


def read_tcp_ext(fd: int) -> dict[str, int]:
    """:func:`parse_netstat` of the namespace ``fd`` (read by a thread inside it:
    ``/proc/thread-self/net`` is that thread's namespace's view)."""
    def _read() -> str:
        with open("/proc/thread-self/net/netstat", encoding="ascii") as f:
            return f.read()
    return parse_netstat(netns.run_in(fd, _read))


def tcp_ext(lab: Lab, nodes: Iterable[str]) -> dict[str, dict[str, int]]:
    """node -> :func:`read_tcp_ext` of its namespace, for each of ``nodes``; a node whose
    namespace cannot be read (a lab backend without namespace fds, a namespace gone) is
    left out, so the check says it could not count there."""
    out = {}
    for node in nodes:
        try:
            out[node] = read_tcp_ext(lab.node_io(node).fd)
        except (OSError, AttributeError, LookupError, AitbError):
            continue
    return out
