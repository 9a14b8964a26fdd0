"""Output locations given on the command line, checked before any work: a folder that can
be created and written, a file whose folder can. Bad ones are a :class:`SpecError` naming
the option and the path (exit 2), never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

from models.errors import SpecError

__all__ = ["output_dir", "output_file", "write_output_file"]


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


def output_file(path: Path, option: str) -> Path:
    """``path`` checked, before a long piece of work, as a file that can be written later
    (:func:`write_output_file`): not a folder, writable if it exists, else its nearest
    existing folder writable (missing folders are made only when the file is written).
    Creates nothing; returns ``path``.

    Raises:
        SpecError: it is a folder, an ancestor is a file, or it cannot be written (names
            ``option``).
    """
    if path.is_dir():
        raise SpecError(f"{option}: is a folder, not a file", file=str(path))
    if path.exists():
        if not os.access(path, os.W_OK):
            raise SpecError(f"{option}: this file is not writable", file=str(path))
        return path
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise SpecError(f"{option}: {folder} is not a folder", file=str(path))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SpecError(f"{option}: folder {folder} is not writable", file=str(path))
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
