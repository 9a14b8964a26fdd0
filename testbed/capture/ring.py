"""One interface's packets through an AF_PACKET TPACKET_V3 ring, written as a pcap ring of files.

packet(7) and Documentation/networking/packet_mmap.rst: a ``SOCK_RAW`` packet socket with
``PACKET_VERSION`` = TPACKET_V3 and ``PACKET_RX_RING`` shares a ring of blocks with the
kernel; the kernel fills a block with packets (each a ``struct tpacket3_hdr`` with its
nanosecond CLOCK_REALTIME time stamp, captured and wire length) and hands it over when it is
full or ``retire_blk_tov`` ms after its first packet; the reader walks it and gives it back
by writing TP_STATUS_KERNEL into its status. A classic BPF program ``ret #snaplen`` (what
libpcap attaches for tcpdump's ``-s``) keeps the first ``snaplen`` bytes of each packet.
``PACKET_STATISTICS`` (``struct tpacket_stats_v3``) counts packets the ring had no room for
(reading it resets it, so it is summed here).

A socket keeps the network namespace it was created in (network_namespaces(7)): the caller
creates it while its thread is inside the node's namespace (:func:`open_ring`) and reads it
from anywhere. The socket is created with protocol 0 (it receives nothing) and bound to its
interface with ETH_P_ALL only once the ring and the filter are in place, so no packet of
another interface ever reaches it. Like tcpdump on a veth end it sees both directions.

Files: ``<node>__<ifname>.pcap<K>`` (K = 0, 1, ... as tcpdump's ``-C``/``-W`` ring names
them; nanosecond pcap, LINKTYPE_ETHERNET); a file is closed and the next one begun before a
packet is written to a file already larger than ``rotate_size_bytes``, and once there are
more than ``files`` files the oldest is removed (tcpdump's rules). Each block's records go
to the file in one write, so a killed reader loses at most the block it was writing.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RingConfig", "Ring", "open_ring", "ring_geometry", "PCAP_NS_MAGIC"]

SOL_PACKET, PACKET_RX_RING, PACKET_STATISTICS, PACKET_VERSION = 263, 5, 6, 10
TPACKET_V3 = 2
SO_ATTACH_FILTER, SO_RCVBUFFORCE = 26, 33
ETH_P_ALL = 0x0003
TP_STATUS_KERNEL, TP_STATUS_USER = 0, 1
BPF_RET_K = 0x06  # BPF_RET | BPF_K: accept the packet, keep k bytes
PCAP_NS_MAGIC = 0xA1B23C4D  # pcap with nanosecond time stamps
LINKTYPE_ETHERNET = 1
_REQ3 = struct.Struct("=7I")  # struct tpacket_req3
_BLOCK = struct.Struct("=III")  # block_status, num_pkts, offset_to_first_pkt (at byte 8)
_PKT = struct.Struct("=IIIIIIH")  # next_offset, sec, nsec, snaplen, len, status, mac
_STATS3 = struct.Struct("=III")  # tp_packets (drops included), tp_drops, tp_freeze_q_cnt
_REC = struct.Struct("=IIII")  # pcap record header: sec, nsec, captured, original length
FRAME_BYTES = 2048  # TPACKET_V3 ignores frames but checks frames * size == blocks * block size


@dataclass(frozen=True)
class RingConfig:
    """snaplen_bytes: bytes kept per packet; ring_kib: the kernel ring (blocks x block size);
    retire_ms: a block that is not full is handed over this long after its first packet;
    rotate_size_bytes / files: the pcap ring (see the module docstring)."""

    snaplen_bytes: int = 128
    ring_kib: int = 2048
    retire_ms: int = 50
    rotate_size_bytes: int = 10**8
    files: int = 4


HEADERS_BLOCK_BYTES = 16 * 1024


def ring_geometry(ring_kib: int, snaplen_bytes: int) -> tuple[int, int]:
    """(block size in bytes, number of blocks) of a ``ring_kib`` ring. Headers only
    (``snaplen_bytes`` <= 2048): 16 KiB blocks (some 60 packets each). The kernel hands a
    block over ``retire_ms`` after its first packet however full it is, so on a quiet
    interface every block holds a few packets and the ring buys blocks x retire_ms of time
    for a capturer that is not scheduled: many small blocks, not a few large ones (64 per
    MiB: 3.2 s at 50 ms). With the payload kept: blocks of a quarter of the ring, a power of
    two between 128 KiB (room for a whole 64 KiB GSO packet) and 1 MiB. At least 2 blocks."""
    if snaplen_bytes <= 2048:
        size = HEADERS_BLOCK_BYTES
    else:
        low = 128 * 1024 if snaplen_bytes <= 64 * 1024 else 256 * 1024
        size = 1 << max(0, (ring_kib * 1024 // 4).bit_length() - 1)
        size = max(low, min(1 << 20, size))
    return size, max(2, ring_kib * 1024 // size)


@dataclass
class _Writer:
    base: Path  # <node>__<ifname>.pcap; files base.with_name(name + str(k))
    limit: int
    files: int
    snaplen: int
    k: int = -1
    fd: int = -1
    size: int = 0

    def header(self) -> bytes:
        return struct.pack("=IHHiIII", PCAP_NS_MAGIC, 2, 4, 0, 0, self.snaplen,
                           LINKTYPE_ETHERNET)

    def next_file(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.k += 1
        path = self.base.with_name(f"{self.base.name}{self.k}")
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        head = self.header()
        os.write(self.fd, head)
        self.size = len(head)
        old = self.k - self.files
        if old >= 0:
            self.base.with_name(f"{self.base.name}{old}").unlink(missing_ok=True)

    def write(self, records: list[bytes], sizes: list[int]) -> None:
        """Write ``records`` (each one pcap record), rotating by tcpdump's rule."""
        start = 0
        for i, n in enumerate(sizes):
            if self.size > self.limit:
                self._flush(records[start:i])
                self.next_file()
                start = i
            self.size += n
        self._flush(records[start:])

    def _flush(self, records: list[bytes]) -> None:
        if records:
            os.write(self.fd, b"".join(records))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass
class Ring:
    """An open ring of one interface (see :func:`open_ring`); counters as the kernel and the
    writer saw them."""

    sock: socket.socket
    mm: mmap.mmap
    block_size: int
    blocks: int
    writer: _Writer
    next_block: int = 0
    packets_captured: int = 0
    packets_dropped: int = 0
    freeze_count: int = 0
    _filter: object = field(default=None, repr=False)

    def fileno(self) -> int:
        """The socket's fd (for epoll)."""
        return self.sock.fileno()

    def drain(self) -> int:
        """Write every block the kernel has handed over, give them back; packets written."""
        mm, got = self.mm, 0
        rec, pkt, wr = _REC.pack, _PKT.unpack_from, self.writer
        while True:
            off = self.next_block * self.block_size
            status, count, first = _BLOCK.unpack_from(mm, off + 8)
            if not status & TP_STATUS_USER:
                return got
            records: list[bytes] = []
            sizes: list[int] = []
            pos = off + first
            for _ in range(count):
                nxt, sec, nsec, caplen, length, _st, mac = pkt(mm, pos)
                records.append(rec(sec, nsec, caplen, length) + mm[pos + mac:pos + mac + caplen])
                sizes.append(16 + caplen)
                pos += nxt
            wr.write(records, sizes)
            got += count
            struct.pack_into("=I", mm, off + 8, TP_STATUS_KERNEL)
            self.next_block = (self.next_block + 1) % self.blocks
            self.packets_captured += count

    def read_stats(self) -> None:
        """Add the kernel's counters since the last read (PACKET_STATISTICS resets them)."""
        _packets, drops, freezes = _STATS3.unpack(
            self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _STATS3.size))
        self.packets_dropped += drops
        self.freeze_count += freezes

    def close(self) -> None:
        """Close the current pcap file, unmap the ring, close the socket."""
        self.writer.close()
        self.mm.close()
        self.sock.close()


def _snap_filter(snaplen: int) -> tuple[bytes, object]:
    """``struct sock_fprog`` of ``ret #snaplen`` and the buffer it points to (kept alive)."""
    prog = (ctypes.c_uint8 * 8).from_buffer_copy(struct.pack("=HBBI", BPF_RET_K, 0, 0,
                                                             snaplen))
    return struct.pack("=HxxxxxxQ", 1, ctypes.addressof(prog)), prog


def open_ring(ifname: str, pcap_base: Path, cfg: RingConfig) -> Ring:
    """Open a capturing ring on ``ifname`` *in the calling thread's network namespace* and
    begin its first pcap file ``pcap_base`` + ``0``. Raises OSError (no such interface: ENODEV;
    not root: EPERM; no memory for the ring: ENOMEM)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
    try:
        block_size, blocks = ring_geometry(cfg.ring_kib, cfg.snaplen_bytes)
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V3)
        prog, keep = _snap_filter(cfg.snaplen_bytes)
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, prog)
        frames = block_size // FRAME_BYTES * blocks
        sock.setsockopt(SOL_PACKET, PACKET_RX_RING, _REQ3.pack(
            block_size, blocks, FRAME_BYTES, frames, cfg.retire_ms, 0, 0))
        mm = mmap.mmap(sock.fileno(), block_size * blocks, mmap.MAP_SHARED,
                       mmap.PROT_READ | mmap.PROT_WRITE)
        sock.bind((ifname, ETH_P_ALL))
    except BaseException:
        sock.close()
        raise
    limit = max(1, -(-cfg.rotate_size_bytes // 10**6)) * 10**6  # tcpdump's -C: whole MB
    writer = _Writer(pcap_base, limit, cfg.files, cfg.snaplen_bytes)
    writer.next_file()
    return Ring(sock, mm, block_size, blocks, writer, _filter=keep)
