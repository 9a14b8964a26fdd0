"""Open a capture file of either format: classic pcap (:mod:`analysis.pcap.files`) or pcapng
(:mod:`analysis.pcap.pcapng`), told apart by the first bytes."""

from __future__ import annotations

import os
import struct

from analysis.pcap.files import NG_MAGIC, Capture, ClassicReader
from analysis.pcap.pcapng import PcapngReader
from models.errors import SpecError

__all__ = ["open_capture"]


def open_capture(path: str | os.PathLike[str]) -> Capture:
    """Open ``path`` and detect its format from the first bytes.

    Raises :class:`SpecError` (exit 2, naming the file) if it is missing, unreadable, empty or
    not a pcap/pcapng file.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            head = fh.read(28)
    except OSError as exc:
        raise SpecError(f"cannot read capture file: {exc.strerror}", file=name) from exc
    if len(head) >= 4 and struct.unpack_from("<I", head)[0] == NG_MAGIC:
        return Capture(name, "pcapng", reader=PcapngReader(name))
    reader = ClassicReader.from_header(name, head)
    return Capture(name, "pcap-ns" if reader.nano else "pcap", reader=reader)
