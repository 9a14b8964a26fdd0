"""Atomic file writes, the one copy every layer uses: a temporary file beside the target,
written, flushed to disk (fsync), given the mode a plain ``open`` would give it, then renamed
onto the target with ``os.replace``. A reader sees the old or the complete new content, and
after a crash the new content is on disk or absent, never half-written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_atomic", "write_text_atomic"]

_UMASK = os.umask(0o022)  # read once at import: os.umask can only be read by setting it
os.umask(_UMASK)


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` for a temporary file beside ``path``, fsync it, then ``os.replace``
    it onto ``path`` (mode 0666 minus the umask). The temporary file is removed if anything
    raises (the exception propagates). Side effect: one fsync."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(Path(tmp))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` with :func:`write_atomic`."""
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
