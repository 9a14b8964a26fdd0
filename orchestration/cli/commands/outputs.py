"""Output locations given on the command line, checked before any work: a folder that can
be created and written, a file whose folder can. Bad ones are a :class:`SpecError` naming
the option and the path (exit 2), never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

from aitb.errors import SpecError

__all__ = ["output_dir", "write_output_file"]


def output_dir(path: Path, option: str) -> Path:
    """``path`` created if missing (parents too) and checked writable; returns it.

    Raises:
        SpecError: it is a file, cannot be created, or is not writable (names ``option``).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise SpecError(f"{option}: not a folder", file=str(path)) from None
    except OSError as exc:
        raise SpecError(f"{option}: cannot create this folder: {exc.strerror}",
                        file=str(path)) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise SpecError(f"{option}: this folder is not writable", file=str(path))
    return path


def write_output_file(path: Path, text: str, option: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, creating its folder if missing.

    Raises:
        SpecError: the folder cannot be created or the file cannot be written (names
            ``option``); nothing is written then.
    """
    output_dir(path.parent, option)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{option}: cannot write this file: {exc.strerror}",
                        file=str(path)) from None
