"""Driver of the compiled path for pcapng: chunks -> :func:`numba_scan_pcapng.run_ng`; section and
interface blocks, and every warning, are handled here with the reference reader's own code and
words, so both paths give identical results (tested)."""

from __future__ import annotations

import struct

import numpy as np

from analysis.pcap import DecodeStats, PcapWarning
from analysis.pcap.files import CHUNK_BYTES, Capture
from analysis.pcap.pcapng import _BOM, MAX_BLOCK, parse_idb, trailer_message
from analysis.tcpflows import numba_scan as k
from analysis.tcpflows import numba_scan_pcapng as kn
from analysis.tcpflows.compiled_pcap import _STAT_FIELDS, _Arrays, _flow, clock_checks


class Unsupported(Exception):
    """The file needs arithmetic the kernel does not do (an unusual clock); use the reference."""


class _Walk:
    """State of one pcapng walk: byte order, interfaces (``IF`` rows), warnings."""

    def __init__(self, cap: Capture) -> None:
        self.cap = cap
        self.ng = np.zeros(5, np.int64)  # big-endian, interfaces, have_t0, t0_ns, last_ns
        self.IF = np.zeros((16, 5), np.int64)  # linktype, snaplen, mode, value, offset_ns
        self.st, self.arr = np.zeros(k.NST, np.int64), _Arrays()
        self.stats = np.zeros(len(_STAT_FIELDS), np.int64)

    @property
    def e(self) -> str:
        return ">" if self.ng[0] else "<"

    def warn(self, offset: int, what: str) -> None:
        self.cap.warnings.append(PcapWarning(offset, what))

    def section(self, buf, pos: int, base: int) -> bool:
        """A section header at ``pos``: byte order, interfaces reset. False: stop (damage)."""
        bom = struct.unpack_from("<I", buf, pos + 8)[0]
        if bom not in (_BOM, 0x4D3C2B1A):
            self.warn(base + pos, "bad section header byte order")
            return False
        self.ng[0], self.ng[1] = bom != _BOM, 0
        return True

    def interface(self, buf, pos: int, blen: int) -> None:
        """An interface description block: append it (raises Unsupported for odd clocks)."""
        iface = parse_idb(bytes(buf[pos + 8:pos + blen - 4]), self.e)
        units, offset = iface.units_per_s, iface.offset_s
        if abs(offset) > 10**9:
            raise Unsupported("if_tsoffset")
        if units <= 10**9 and 10**9 % units == 0:
            mode, value = kn.MUL, 10**9 // units
        elif units % 10**9 == 0 and units <= 10**18:
            mode, value = kn.DIV, units // 10**9
        elif units & (units - 1) == 0 and units <= 2**33:
            mode, value = kn.SHIFT, units.bit_length() - 1
        else:
            raise Unsupported(f"if_tsresol {units}")
        n = int(self.ng[1])
        if n == len(self.IF):
            self.IF = np.concatenate([self.IF, np.zeros_like(self.IF)])
        self.IF[n] = (iface.linktype, iface.snaplen, mode, value, offset * 10**9)
        self.ng[1] = n + 1
        self.cap.linktypes.add(iface.linktype)


def analyse_pcapng(cap: Capture) -> tuple[int, list, DecodeStats]:
    """Analyse a pcapng file with the kernel: ``(packets, flows, decode stats)``.

    Raises :class:`Unsupported` for clocks the kernel cannot convert exactly.
    """
    w = _Walk(cap)
    _stream(w)
    dstats = DecodeStats()
    for name, value in zip(_STAT_FIELDS, w.stats, strict=True):
        setattr(dstats, name, int(value))
    if w.ng[2]:
        cap.start_ns = int(w.ng[3])
    clock_checks(cap, w.st)
    return int(w.st[1]), [_flow(w.arr, c) for c in range(int(w.st[0]))], dstats


def _stream(w: _Walk) -> None:
    buf = bytearray(CHUNK_BYTES + MAX_BLOCK)
    view, whole = memoryview(buf), np.frombuffer(buf, np.uint8)
    base, fill = 0, 0
    with open(w.cap.path, "rb") as fh:
        while n := fh.readinto(view[fill:fill + CHUNK_BYTES]):
            fill += n
            pos = _blocks(w, whole[:fill], buf, base)
            if pos < 0:
                return
            view[:fill - pos] = view[pos:fill]
            base, fill = base + pos, fill - pos
    if fill:
        w.warn(base, f"file ends inside a block ({fill} bytes of it present)")


def _blocks(w: _Walk, b, buf, base: int) -> int:
    """Run the kernel over ``b``; handle what it hands back. Returns where the first partial
    block starts, or -1 after damage that ends the file."""
    pos, arr = 0, w.arr
    while True:
        status, pos = kn.run_ng(b, pos, w.ng, w.IF, w.st, arr.HK, arr.HV, arr.DI, arr.DF,
                                arr.CI, arr.CF, arr.PE, arr.PT, w.stats)
        if status == kn.NEED_DATA:
            return pos
        if status == kn.NEED_ROOM:
            arr.grow()
            continue
        if status == kn.UNSUPPORTED:
            raise Unsupported("timestamp")
        step = _python_block(w, status, buf, pos, len(b), base)
        if step < 0:
            return step
        if step == 0:
            return pos
        pos += step


def _python_block(w: _Walk, status: int, buf, pos: int, end: int, base: int) -> int:
    """Handle the block at ``pos`` the kernel returned: its length to skip, 0 if it is not
    whole yet, -1 to stop."""
    if status == kn.PYTHON and struct.unpack_from("<I", buf, pos)[0] == kn.SHB:
        if not w.section(buf, pos, base):
            return -1
    blen = struct.unpack_from(w.e + "I", buf, pos + 4)[0]
    if status == kn.CORRUPT or blen < 12 or blen % 4 or blen > MAX_BLOCK:
        w.warn(base + pos, f"block length {blen} is impossible: file is corrupt from here")
        return -1
    if pos + blen > end:
        return 0
    btype = struct.unpack_from(w.e + "I", buf, pos)[0]
    trail = struct.unpack_from(w.e + "I", buf, pos + blen - 4)[0]
    if status == kn.BAD_TRAILER or trail != blen:
        w.warn(base + pos, trailer_message(btype, blen, trail))
        return -1
    if status == kn.SHORT or (btype == 1 and blen < 20):
        w.warn(base + pos, f"block of type {btype} has {blen} bytes, fewer than its fixed "
                           f"fields need; block skipped")
    elif status == kn.BAD_PACKET:
        w.warn(base + pos, _bad_packet(w, buf, pos, btype) + "; block skipped")
    elif btype == 1:
        w.interface(buf, pos, blen)
    return blen


def _bad_packet(w: _Walk, buf, pos: int, btype: int) -> str:
    e, n = w.e, int(w.ng[1])
    if btype == kn.SPB:
        return f"packet block names interface 0 but the section has {n}"
    if btype == kn.EPB:
        if_id, caplen = struct.unpack_from(e + "I", buf, pos + 8)[0], struct.unpack_from(
            e + "I", buf, pos + 20)[0]
    else:
        if_id, caplen = struct.unpack_from(e + "H", buf, pos + 8)[0], struct.unpack_from(
            e + "I", buf, pos + 20)[0]
    if if_id >= n:
        return f"packet block names interface {if_id} but the section has {n}"
    return f"packet block claims {caplen} captured bytes, more than the block holds"
