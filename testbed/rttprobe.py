"""RTT of links by ICMP echo, all links at once, from raw sockets opened inside the nodes'
namespaces (a socket stays in the namespace it was created in, so one thread drives them
all with ``select``). Needs root (raw sockets, namespaces); sends only to lab addresses.
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

from aitb.models.errors import LabError
from testbed import netns

if TYPE_CHECKING:
    from testbed.lab import Lab

__all__ = ["EchoProbe", "probe_rtts", "echo_request", "parse_echo_reply", "ECHO_DATA_BYTES"]

ECHO_DATA_BYTES = 56  # ping(8)'s default: an 84-byte IP packet
SO_BINDTODEVICE = 25  # include/uapi/asm-generic/socket.h
ICMP_ECHO, ICMP_ECHOREPLY = 8, 0


@dataclass(frozen=True, slots=True)
class EchoProbe:
    """Echo from ``node`` (interface ``ifname``, address ``src``) to ``dst`` across one link;
    ``key`` names the result (the link name)."""

    key: str
    node: str
    ifname: str
    src: ipaddress.IPv4Address
    dst: ipaddress.IPv4Address


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


def _round(socks: list[socket.socket], probes: Sequence[EchoProbe], idents: list[int],
           seq: int, timeout_s: float) -> list[float | None]:
    """Send one echo on every socket at once; the RTT of each reply (None: none in time)."""
    sent, got = [0.0] * len(socks), [None] * len(socks)
    want = {(p.dst.packed, idents[i], seq): i for i, p in enumerate(probes)}
    for i, (s, p) in enumerate(zip(socks, probes, strict=True)):
        sent[i] = time.perf_counter()
        s.sendto(echo_request(idents[i], seq), (str(p.dst), 0))
    deadline, pending = time.perf_counter() + timeout_s, set(range(len(socks)))
    while pending and (left := deadline - time.perf_counter()) > 0:
        ready, _, _ = select.select([socks[i] for i in pending], [], [], left)
        now = time.perf_counter()
        for s in ready:
            i = socks.index(s)
            while (pkt := _recv(s)) is not None:
                if want.get(parse_echo_reply(pkt) or (b"", -1, -1)) == i and i in pending:
                    got[i] = now - sent[i]
                    pending.discard(i)
    return got  # type: ignore[return-value]


def _recv(s: socket.socket) -> bytes | None:
    try:
        return s.recv(2048)
    except BlockingIOError:
        return None


def probe_rtts(lab: Lab, probes: Sequence[EchoProbe], count: int = 5,
               timeout_s: float = 1.0) -> dict[str, float | None]:
    """Minimum RTT (seconds) of ``count`` echoes per probe, all probes concurrently, after
    one unmeasured warm-up echo (it pays for ARP). ``timeout_s``: how long one round waits
    for its replies. Returns probe key -> min RTT, None where no reply came. Raises LabError
    naming node and interface if a socket cannot be opened. Needs root; the lab must be up.
    """
    socks: list[socket.socket] = []
    try:
        for p in probes:
            socks.append(netns.run_in(lab.node_io(p.node).fd, _open, p))
        base = os.getpid() & 0xFF00
        idents = [(base + i) & 0xFFFF for i in range(len(probes))]
        rounds = [_round(socks, probes, idents, seq, timeout_s) for seq in range(count + 1)]
    finally:
        for s in socks:
            s.close()
    out: dict[str, float | None] = {}
    for i, p in enumerate(probes):
        seen = [r[i] for r in rounds[1:] if r[i] is not None]
        out[p.key] = min(seen) if seen else None
    return out
