"""RTT of links by ICMP echo from raw sockets opened inside the nodes' namespaces (a socket
stays in the namespace it was created in, so the calling thread drives it). Needs root (raw
sockets, namespaces); sends only to lab addresses.

The prober busy-polls its socket from :data:`SPIN_LEAD_S` before a reply is due: sleeping
until it, the reply (handed over by a delay line on the other core) waited for the prober's
wake-up on a halted vCPU, 0.08-0.1 ms per echo on the 2-core reference VM (ping -U through
2 x 5 ms of native line: min 10.22-10.33 ms sleeping, 10.15-10.19 ms polling), a third of
the 0.3 ms RTT tolerance spent on the host's scheduler rather than on the link.
"""

from __future__ import annotations

import ipaddress
import os
import select
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from models.errors import LabError
from testbed.ns import netns

if TYPE_CHECKING:
    from testbed.lab.lab import Lab

__all__ = ["EchoProbe", "probe_rtts", "echo_request", "parse_echo_reply", "ECHO_DATA_BYTES"]

ECHO_DATA_BYTES = 56  # ping(8)'s default: an 84-byte IP packet
SO_BINDTODEVICE = 25  # include/uapi/asm-generic/socket.h
ICMP_ECHO, ICMP_ECHOREPLY = 8, 0
SPIN_LEAD_S = 0.001  # busy-poll from this long before the expected RTT ...
SPIN_WINDOW_S = 0.005  # ... for at most this long (then asleep again: a lost echo costs no core)


@dataclass(frozen=True, slots=True)
class EchoProbe:
    """Echo from ``node`` (interface ``ifname``, address ``src``) to ``dst`` across one link;
    ``key`` names the result (the link name); ``expected_rtt_s``: the earliest the reply can
    come (seconds; 0 busy-polls from the send on)."""

    key: str
    node: str
    ifname: str
    src: ipaddress.IPv4Address
    dst: ipaddress.IPv4Address
    expected_rtt_s: float = 0.0


def _checksum(data: bytes) -> int:
    """Internet checksum, RFC 1071."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(ident: int, seq: int, data_bytes: int = ECHO_DATA_BYTES) -> bytes:
    """An ICMP echo request (RFC 792) with identifier ``ident`` and sequence ``seq``."""
    payload = bytes(i % 256 for i in range(data_bytes))
    head = struct.pack("!BBHHH", ICMP_ECHO, 0, 0, ident & 0xFFFF, seq & 0xFFFF)
    return struct.pack("!BBHHH", ICMP_ECHO, 0, _checksum(head + payload), ident & 0xFFFF,
                       seq & 0xFFFF) + payload


def parse_echo_reply(packet: bytes) -> tuple[bytes, int, int] | None:
    """(source address, identifier, sequence) of an IPv4 packet holding an ICMP echo reply
    (what a raw IPPROTO_ICMP socket receives), else None."""
    if len(packet) < 20:
        return None
    ihl = (packet[0] & 0x0F) * 4
    if len(packet) < ihl + 8 or packet[ihl] != ICMP_ECHOREPLY:
        return None
    ident, seq = struct.unpack("!HH", packet[ihl + 4:ihl + 8])
    return packet[12:16], ident, seq


def _open(probe: EchoProbe) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                         socket.IPPROTO_ICMP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, probe.ifname.encode())
        sock.bind((str(probe.src), 0))
    except OSError as exc:
        sock.close()
        raise LabError(f"RTT probe on node {probe.node} interface {probe.ifname} "
                       f"({probe.src}): {exc}") from exc
    sock.setblocking(False)
    return sock


def _echo(sock: socket.socket, probe: EchoProbe, ident: int, seq: int,
          timeout_s: float) -> float | None:
    """Send one echo and wait for its reply: asleep until :data:`SPIN_LEAD_S` before
    ``probe.expected_rtt_s`` (an earlier reply wakes it), then busy-polling for at most
    :data:`SPIN_WINDOW_S`, then asleep again. Its RTT in seconds (None: none in time)."""
    want = (probe.dst.packed, ident, seq)
    request, dst = echo_request(ident, seq), (str(probe.dst), 0)
    sent = time.perf_counter()
    sock.sendto(request, dst)
    deadline = sent + timeout_s
    spin_from = sent + max(0.0, probe.expected_rtt_s - SPIN_LEAD_S)
    spin_until = spin_from + SPIN_WINDOW_S
    while (now := time.perf_counter()) < deadline:
        if not spin_from <= now < spin_until:
            wake = spin_from if now < spin_from else deadline
            ready, _, _ = select.select([sock], [], [], wake - now)
            if not ready:
                continue
        pkt = _recv(sock)
        # after the read, never before it: a reply released between a clock read and the
        # recv (the delay line's helper runs at a real-time priority and preempts this
        # process right there) would count as arrived before it was released, up to 0.6 ms
        # early under load; so the RTT is an upper bound, by one recv (a few us)
        read_at = time.perf_counter()
        if pkt is not None and parse_echo_reply(pkt) == want:
            return read_at - sent
    return None


def _recv(s: socket.socket) -> bytes | None:
    try:
        return s.recv(2048)
    except BlockingIOError:
        return None


def probe_rtts(lab: Lab, probes: Sequence[EchoProbe], count: int = 5,
               timeout_s: float = 1.0) -> dict[str, float | None]:
    """Minimum RTT (seconds) of ``count`` echoes per probe, after one unmeasured warm-up
    echo (it pays for ARP). One echo is in flight at a time: sent all at once, the replies
    of the first links waited while the loop was still sending to the others (6-10 ms of
    error for 18 links under TCG), so the probes take the sum of the RTTs instead.
    ``timeout_s``: how long one echo waits for its reply. Returns probe key -> min RTT, None
    where no reply came. Raises LabError naming node and interface if a socket cannot be
    opened. Needs root; the lab must be up.
    """
    out: dict[str, float | None] = {}
    base = os.getpid() & 0xFF00
    for i, p in enumerate(probes):
        sock = netns.run_in(lab.node_io(p.node).fd, _open, p)
        try:
            ident = (base + i) & 0xFFFF
            rtts = [_echo(sock, p, ident, seq, timeout_s) for seq in range(count + 1)][1:]
        finally:
            sock.close()
        seen = [r for r in rtts if r is not None]
        out[p.key] = min(seen) if seen else None
    return out
