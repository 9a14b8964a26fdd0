"""Compile the capture analysis' numba kernels ahead of use (``python -m
analysis.tcpflows.warm_cache``, run by scripts/setup.sh): numba caches them beside the
source, so the first large capture a user analyses does not wait for the compiler."""

from __future__ import annotations

import os
import struct
import tempfile

from analysis.tcpflows import analyse

__all__ = ["warm"]


def warm() -> None:
    """Compile both kernels now (numba caches them beside the source), so that the first
    large capture a user analyses does not wait ~15 s for it. Writes and removes a 1-frame
    pcap and pcapng; ``make setup`` runs it through ``python -m analysis.tcpflows.warm_cache``."""
    ip = bytes.fromhex("4500002800010000400600000a0000010a000002")
    tcp = bytes.fromhex("0001000200000001000000005002ffff00000000")
    frame = bytes(12) + b"\x08\x00" + ip + tcp
    pcap = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    pcap += struct.pack("<IIII", 1, 0, len(frame), len(frame)) + frame
    ng = _ng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    ng += _ng_block(1, struct.pack("<HHI", 1, 0, 0))
    ng += _ng_block(6, struct.pack("<IIIII", 0, 0, 1, len(frame), len(frame)) + frame)
    for suffix, data in ((".pcap", pcap), (".pcapng", ng)):
        fd, name = tempfile.mkstemp(suffix=suffix)
        try:
            os.write(fd, data)
            os.close(fd)
            analyse.analyse_capture(name, engine="compiled")
        finally:
            os.unlink(name)


def _ng_block(btype: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


if __name__ == "__main__":
    warm()
