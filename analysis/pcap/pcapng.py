"""pcapng blocks (draft-ietf-opsawg-pcapng, "PCAP Next Generation Dump File Format").

Read: Section Header (SHB, 0x0A0D0D0A; byte order from its magic 0x1A2B3C4D), Interface
Description (IDB, 1: link type, snap length, ``if_tsresol`` option 9, ``if_tsoffset`` option
14), Enhanced Packet (EPB, 6), Simple Packet (SPB, 3: no timestamp, takes the last one seen)
and the obsolete Packet Block (2). Every other block type is skipped by its length. Each
section restarts the interface list, so several interfaces may each have their own link type
and timestamp resolution. A block whose trailing Block Total Length differs from its leading
one ends the file with a warning, as Wireshark's wiretap/pcapng.c does ("total block lengths
(first %u and second %u) don't match", WTAP_ERR_BAD_FILE): which length is right cannot be
told, so nothing after it can be trusted.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from analysis.pcap.files import CHUNK_BYTES, Capture, Frame, PcapWarning

_SHB, _IDB, _EPB, _SPB, _OPB = 0x0A0D0D0A, 1, 6, 3, 2
# smallest whole block of each type: header, fixed fields, trailing length
_MIN_LEN = {_IDB: 20, _EPB: 32, _OPB: 32, _SPB: 16}
_BOM = 0x1A2B3C4D
MAX_BLOCK = 1 << 26  # 64 MiB: larger blocks are corruption, not packets


def trailer_message(btype: int, blen: int, trail: int) -> str:
    """Warning text for a block whose trailing length ``trail`` is not its leading ``blen``."""
    return (f"block of type {btype} says {blen} bytes at its start but {trail} at its end: "
            f"file is corrupt from here")


class Interface:
    """One IDB: link type, snap length, and its clock as (units per second, offset in s)."""

    __slots__ = ("linktype", "snaplen", "units_per_s", "offset_s")

    def __init__(self, linktype: int, snaplen: int, units_per_s: int, offset_s: int):
        self.linktype, self.snaplen = linktype, snaplen
        self.units_per_s, self.offset_s = units_per_s, offset_s

    def to_ns(self, ts: int) -> int:
        """Timestamp in interface units -> ns since the epoch (exact for 10^-k resolutions)."""
        return (ts * 10**9) // self.units_per_s + self.offset_s * 10**9


def parse_idb(body: bytes, e: str) -> Interface:
    """Read an IDB body (after the 8-byte block header) with byte order ``e``."""
    linktype, _res, snaplen = struct.unpack_from(e + "HHI", body)
    units, offset = 10**6, 0
    for code, value in _options(body, 8, e):
        if code == 9 and value:
            # if_tsresol: MSB clear -> 10^-v s, MSB set -> 2^-(v & 0x7f) s
            v = value[0]
            units = 2 ** (v & 0x7F) if v & 0x80 else 10 ** v
        elif code == 14 and len(value) >= 8:
            offset = struct.unpack_from(e + "q", value)[0]
    return Interface(linktype, snaplen, units, offset)


def _options(body: bytes, pos: int, e: str) -> Iterator[tuple[int, bytes]]:
    while pos + 4 <= len(body):
        code, length = struct.unpack_from(e + "HH", body, pos)
        if code == 0:
            return
        yield code, body[pos + 4: pos + 4 + length]
        pos += 4 + (length + 3) // 4 * 4


class PcapngReader:
    """Streams the packet blocks of a pcapng file in chunks."""

    __slots__ = ("path",)

    def __init__(self, path: str):
        self.path = path

    def frames(self, cap: Capture) -> Iterator[Frame]:
        """Yield frames; append a :class:`PcapWarning` to ``cap.warnings`` at damage."""
        st = _State(cap)
        base, tail = 0, b""
        with open(self.path, "rb") as fh:
            while chunk := fh.read(CHUNK_BYTES):
                buf = tail + chunk if tail else chunk
                pos = yield from st.blocks(buf, base)
                if pos < 0:
                    return
                base += pos
                tail = buf[pos:]
        if tail:
            cap.warnings.append(PcapWarning(
                base, f"file ends inside a block ({len(tail)} bytes of it present)"))


class _State:
    __slots__ = ("cap", "e", "ifaces", "t0_ns", "last_ns", "n")

    def __init__(self, cap: Capture):
        self.cap, self.e, self.ifaces = cap, "<", []
        self.t0_ns: int | None = None
        self.last_ns = 0
        self.n = 0  # frames delivered

    def blocks(self, buf: bytes, base: int):
        """Yield the frames of the whole blocks in ``buf``; return where the first partial
        block starts, or -1 after damage."""
        pos, end = 0, len(buf)
        while pos + 12 <= end:
            btype = struct.unpack_from("<I", buf, pos)[0]
            if btype == _SHB and not self._section(buf, pos):
                self.cap.warnings.append(PcapWarning(base + pos, "bad section header byte order"))
                return -1
            blen = struct.unpack_from(self.e + "I", buf, pos + 4)[0]
            if blen < 12 or blen % 4 or blen > MAX_BLOCK:
                self.cap.warnings.append(PcapWarning(
                    base + pos, f"block length {blen} is impossible: file is corrupt from here"))
                return -1
            if pos + blen > end:
                break
            trail = struct.unpack_from(self.e + "I", buf, pos + blen - 4)[0]
            if trail != blen:
                self.cap.warnings.append(PcapWarning(base + pos, trailer_message(
                    struct.unpack_from(self.e + "I", buf, pos)[0], blen, trail)))
                return -1
            frame = self._block(btype, buf, pos, blen, base)
            if frame is not None:
                yield frame
            pos += blen
        return pos

    def _section(self, buf: bytes, pos: int) -> bool:
        if pos + 12 > len(buf):
            return True
        bom = struct.unpack_from("<I", buf, pos + 8)[0]
        if bom == _BOM:
            self.e = "<"
        elif bom == 0x4D3C2B1A:
            self.e = ">"
        else:
            return False
        self.ifaces = []
        return True

    def _block(self, btype: int, buf: bytes, pos: int, blen: int, base: int) -> Frame | None:
        e = self.e
        if blen < _MIN_LEN.get(btype, 12):
            self.cap.warnings.append(PcapWarning(
                base + pos, f"block of type {btype} has {blen} bytes, fewer than its fixed "
                            f"fields need; block skipped"))
            return None
        if btype == _IDB:
            iface = parse_idb(buf[pos + 8: pos + blen - 4], e)
            self.ifaces.append(iface)
            self.cap.linktypes.add(iface.linktype)
            return None
        if btype == _EPB:
            if_id, hi, lo, caplen, wirelen = struct.unpack_from(e + "IIIII", buf, pos + 8)
            return self._frame(if_id, (hi << 32) | lo, buf, pos + 28, caplen, wirelen, blen, base,
                               pos)
        if btype == _OPB:
            if_id, _drops, hi, lo, caplen, wirelen = struct.unpack_from(e + "HHIIII", buf, pos + 8)
            return self._frame(if_id, (hi << 32) | lo, buf, pos + 28, caplen, wirelen, blen, base,
                               pos)
        if btype == _SPB:
            wirelen = struct.unpack_from(e + "I", buf, pos + 8)[0]
            caplen = min(wirelen, blen - 16)
            if self.ifaces and self.ifaces[0].snaplen:
                caplen = min(caplen, self.ifaces[0].snaplen)
            return self._frame(0, None, buf, pos + 12, caplen, wirelen, blen, base, pos)
        return None

    def _frame(self, if_id, ts, buf, data, caplen, wirelen, blen, base, pos) -> Frame | None:
        if if_id >= len(self.ifaces) or data + caplen > pos + blen - 4:
            what = (f"packet block names interface {if_id} but the section has "
                    f"{len(self.ifaces)}" if if_id >= len(self.ifaces)
                    else f"packet block claims {caplen} captured bytes, more than the block holds")
            self.cap.warnings.append(PcapWarning(base + pos, what + "; block skipped"))
            return None
        iface = self.ifaces[if_id]
        ns = iface.to_ns(ts) if ts is not None else self.last_ns
        self.n += 1
        if self.t0_ns is None:
            self.t0_ns = self.cap.start_ns = ns
        elif ns < self.last_ns:
            clock = self.cap.clock
            if not clock.backwards:
                clock.backwards_first = self.n
            clock.backwards += 1
        self.last_ns = ns
        return (ns - self.t0_ns) * 1e-9, iface.linktype, buf, data, caplen, wirelen
