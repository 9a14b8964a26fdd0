"""Paced UDP transfers with sequence numbers: the receiver counts loss and reordering.

Every datagram carries a 12-byte header (message number on this channel, sequence number,
packet count of the message). The sender paces datagrams at ``rate_bps`` (payload bits,
headers included) by absolute send times (no drift). The receiver ends a message when all its
datagrams arrived, or ``idle_s`` after the last datagram (after ``expected + grace`` if none
arrives); what did not arrive is lost, a datagram arriving after a higher sequence number is
counted as reordered. UDP loss is data, not a failure.
"""

from __future__ import annotations

import math
import socket
import struct
import time
from typing import Any

from traffic_gen.transfers import Job, Shared, _Worker, sleep_until

__all__ = ["UdpSender", "UdpReceiver", "IDLE_S", "GRACE_S"]

_HDR = struct.Struct("!III")
IDLE_S = 0.2  # silence after the last datagram that ends a message
GRACE_S = 1.0  # extra wait beyond the paced duration before declaring a message fully lost


class UdpSender(_Worker):
    """Sends one message per job as paced datagrams of ``payload_bytes``."""

    sends = True

    def __init__(self, sock: socket.socket, shared: Shared, info: dict[str, Any],
                 payload_bytes: int) -> None:
        super().__init__(sock, shared, info)
        self.payload, self.msg = payload_bytes, 0

    def timed_start(self, job: Job) -> None:
        """Sleep until the instant, also when the controller runs starters: they arm TCP
        sockets only (kick.py), so without this a UDP burst began as soon as its agent got
        the phase start, before the instant."""
        self.boost()
        sleep_until(job.start_at, self.shared.spin_s)

    def transfer(self, job: Job) -> None:
        """Move ``job.size_bytes`` (see the class docstring)."""
        rate = job.meta["rate_bps"]
        npkts = max(1, math.ceil(job.size_bytes / self.payload))
        gap_s = self.payload * 8 / rate
        buf = bytearray(self.payload)
        t0 = time.time()
        for seq in range(npkts):
            due = t0 + seq * gap_s
            while (now := time.time()) < due:
                if due - now > 0.001:
                    time.sleep(due - now - 0.0005)
            _HDR.pack_into(buf, 0, self.msg, seq, npkts)
            size = min(self.payload, job.size_bytes - seq * self.payload) or _HDR.size
            try:
                self.sock.send(memoryview(buf)[:max(size, _HDR.size)])
            except (ConnectionRefusedError, BlockingIOError):
                pass  # a full or absent receiver is loss, counted at the receiver
            self.unboost()
        self.shared.emit({"half": "send", "key": job.key, "t_start": t0, "t_sent": time.time(),
                          "packets_sent": npkts, **job.meta, **self.info})
        self.msg += 1


class UdpReceiver(_Worker):
    """Receives one message per job; see the module docstring for when it ends."""

    def __init__(self, sock: socket.socket, shared: Shared, info: dict[str, Any],
                 payload_bytes: int) -> None:
        super().__init__(sock, shared, info)
        self.payload, self.msg = payload_bytes, 0
        self.buf = bytearray(65536)

    def transfer(self, job: Job) -> None:
        """Move ``job.size_bytes`` (see the class docstring)."""
        npkts = max(1, math.ceil(job.size_bytes / self.payload))
        expected_s = job.size_bytes * 8 / job.meta["rate_bps"]
        seen: set[int] = set()
        top, reordered, first, last = -1, 0, None, None
        start = time.time()
        while len(seen) < npkts:
            now = time.time()
            end = (last + IDLE_S) if last else (start + expected_s + GRACE_S)
            if now >= end or self.shared.aborted.is_set():
                break
            self.sock.settimeout(min(end - now, 0.05))
            try:
                n, addr = self.sock.recvfrom_into(self.buf)
            except TimeoutError:
                continue
            self.unboost()
            msg, seq, _ = _HDR.unpack_from(self.buf, 0)
            if msg != self.msg or n < _HDR.size:
                continue  # a late datagram of an earlier message
            first, last = first or time.time(), time.time()
            reordered += seq < top
            top = max(top, seq)
            seen.add(seq)
            self.info.setdefault("src_ip", addr[0])
            self.info.setdefault("sport", addr[1])
        self.msg += 1
        self.shared.emit({"half": "recv", "key": job.key, "t_first_byte": first, "t_end": last,
                          "packets_received": len(seen), "lost": npkts - len(seen),
                          "reordered": reordered, **job.meta, **self.info})
