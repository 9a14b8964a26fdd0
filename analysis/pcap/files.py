"""Open a capture file, detect its format, and stream its frames.

A frame is ``(t_s, linktype, buf, off, caplen, wirelen)``: ``t_s`` is float seconds since the
first frame of the file (relative, so nanosecond stamps keep their precision in a float),
``buf[off:off+caplen]`` are the captured bytes, ``wirelen`` the length on the wire.
Formats: classic pcap (both byte orders, microsecond and nanosecond magic; libpcap's
pcap-savefile(5)) and pcapng (draft-ietf-opsawg-pcapng; see :mod:`analysis.pcap.pcapng`).
Damage (a cut record, an impossible length) ends the stream with a :class:`PcapWarning`;
frames before it are delivered.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from models.errors import SpecError

CHUNK_BYTES = 4 << 20
MAX_CAPLEN = 1 << 18  # libpcap's MAXIMUM_SNAPLEN (262144): larger records are corruption
NG_MAGIC = 0x0A0D0D0A

Frame = tuple[float, int, bytes, int, int, int]


@dataclass(frozen=True, slots=True)
class PcapWarning:
    """Damage found in a file: byte ``offset`` in the file (None for a finding about the
    whole file, e.g. a count of bad timestamps) and ``what`` happened there."""

    offset: int | None
    what: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"offset": self.offset, "what": self.what}


@dataclass(slots=True)
class ClockChecks:
    """Timestamps that are wrong or out of order, counted while reading (frames 1-based).

    ``bad_frac``: classic pcap records whose fraction field is not below one second
    (microseconds >= 10^6, nanoseconds >= 10^9; pcap-savefile(5) defines it as the fraction
    of the second). Such a time is still taken as seconds + fraction (it carries into the next
    second), with a warning: libpcap's own reader does no check, Wireshark's wiretap rejects
    such values when it guesses a file's format. ``backwards``: frames stamped earlier than
    the frame before them (merged or reordered captures; Wireshark's "frame.time_delta" < 0);
    the TCP analysis then takes no negative gap as a fast retransmission or out-of-order
    segment (:mod:`analysis.tcpflows.connection`).
    """

    bad_frac: int = 0
    bad_frac_first: int = 0
    backwards: int = 0
    backwards_first: int = 0

    def warnings(self, nano: bool) -> list[PcapWarning]:
        """The findings as whole-file warnings (none if all timestamps were fine)."""
        out = []
        if self.bad_frac:
            unit, limit = ("nanosecond", "10^9") if nano else ("microsecond", "10^6")
            out.append(PcapWarning(None, f"{self.bad_frac} records have a {unit} field of "
                                         f"{limit} or more, an invalid timestamp (first: frame "
                                         f"{self.bad_frac_first}); taken as seconds + fraction"))
        if self.backwards:
            out.append(PcapWarning(None, f"{self.backwards} frames are stamped earlier than the "
                                         f"frame before them (first: frame "
                                         f"{self.backwards_first}); no negative gap is taken "
                                         f"as a fast retransmission or out-of-order segment"))
        return out


@dataclass(slots=True)
class Capture:
    """A capture file opened for streaming; iterate :meth:`frames` once.

    ``format`` is ``"pcap"``, ``"pcap-ns"`` or ``"pcapng"``; ``start_ns`` the absolute time of
    the first frame (ns since the epoch, None before the first frame); ``warnings`` fills as
    damage is met; ``reader`` is the format's reader (:class:`ClassicReader` for classic pcap,
    whose header fields the compiled path uses); ``clock`` counts bad and out-of-order
    timestamps (complete once the frames have been read).
    """

    path: str
    format: str
    warnings: list[PcapWarning] = field(default_factory=list)
    start_ns: int | None = None
    linktypes: set[int] = field(default_factory=set)
    reader: object = None
    clock: ClockChecks = field(default_factory=ClockChecks)

    def frames(self) -> Iterator[Frame]:
        """Yield every readable frame in file order (see the module docstring)."""
        return self.reader.frames(self)  # type: ignore[attr-defined]


_MAGICS = {0xA1B2C3D4: False, 0xA1B23C4D: True}


class ClassicReader:
    """Records of a classic pcap file (pcap-savefile(5)): 24-byte header, 16-byte records."""

    __slots__ = ("path", "endian", "nano", "linktype", "snaplen")

    def __init__(self, path: str, endian: str, nano: bool, linktype: int, snaplen: int):
        self.path, self.endian, self.nano = path, endian, nano
        self.linktype, self.snaplen = linktype, snaplen

    @classmethod
    def from_header(cls, path: str, head: bytes) -> ClassicReader:
        """Parse the file header; raise :class:`SpecError` if it is not a pcap file."""
        if len(head) < 24:
            raise SpecError("not a pcap or pcapng file (shorter than a file header)", file=path)
        for endian in "<>":
            magic, _vmaj, _vmin, _zone, _sig, snaplen, link = struct.unpack_from(
                endian + "IHHiIII", head)
            if magic in _MAGICS:
                # the upper bits of the link type field carry FCS information (pcap-linktype(7))
                return cls(path, endian, _MAGICS[magic], link & 0x0FFFFFFF, snaplen)
        raise SpecError(f"not a pcap or pcapng file (magic {head[:4].hex()})", file=path)

    def frames(self, cap: Capture) -> Iterator[Frame]:
        """Yield frames; append a :class:`PcapWarning` to ``cap.warnings`` at damage."""
        rec = struct.Struct(self.endian + "IIII")
        unpack, link, scale = rec.unpack_from, self.linktype, 1e-9 if self.nano else 1e-6
        limit = max(self.snaplen, MAX_CAPLEN)
        frac_limit = 10**9 if self.nano else 10**6
        cap.linktypes.add(link)
        sec0 = frac0 = None
        clock, n, last = cap.clock, 0, 0
        base, tail = 24, b""
        with open(self.path, "rb") as fh:
            fh.seek(24)
            while chunk := fh.read(CHUNK_BYTES):
                buf = tail + chunk if tail else chunk
                end, pos = len(buf), 0
                while pos + 16 <= end:
                    sec, frac, caplen, wirelen = unpack(buf, pos)
                    if caplen > limit:
                        cap.warnings.append(PcapWarning(
                            base + pos, f"record header says {caplen} captured bytes, more than "
                                        f"the maximum {limit}: file is corrupt from here"))
                        return
                    nxt = pos + 16 + caplen
                    if nxt > end:
                        break
                    n += 1
                    if frac >= frac_limit:
                        if not clock.bad_frac:
                            clock.bad_frac_first = n
                        clock.bad_frac += 1
                    stamp = sec * frac_limit + frac
                    if sec0 is None:
                        sec0, frac0 = sec, frac
                        cap.start_ns = sec * 10**9 + int(frac * (1 if self.nano else 1000))
                    elif stamp < last:
                        if not clock.backwards:
                            clock.backwards_first = n
                        clock.backwards += 1
                    last = stamp
                    t = (sec - sec0) + (frac - frac0) * scale
                    yield t, link, buf, pos + 16, caplen, wirelen
                    pos = nxt
                base += pos
                tail = buf[pos:]
        if tail:
            cap.warnings.append(PcapWarning(base, cut_record_message(tail, unpack)))


def cut_record_message(tail: bytes, unpack) -> str:
    """Warning text for a file that ends inside a record (``tail``: the bytes left over)."""
    if len(tail) < 16:
        return f"file ends inside a record header ({len(tail)} of 16 bytes)"
    caplen = unpack(tail, 0)[2]
    return (f"file ends inside a record: header says {caplen} captured bytes, "
            f"{len(tail) - 16} present")
