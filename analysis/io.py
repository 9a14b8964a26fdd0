"""Atomic file writes for analysis outputs (a reader never sees half a file)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["write_atomic", "write_text_atomic", "write_json_atomic", "write_parquet_atomic"]


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` for a temporary file beside ``path``, then ``os.replace`` it onto
    ``path``: the file is either the old or the complete new content. The temporary file is
    removed if ``write`` raises (the exception propagates)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically. NaN and infinities are refused
    (ValueError): metrics use null for "no value"."""
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


def write_parquet_atomic(path: Path, frame: pd.DataFrame) -> None:
    """Write ``frame`` as Parquet (pyarrow, no index) to ``path`` atomically."""
    write_atomic(path, lambda tmp: frame.to_parquet(tmp, engine="pyarrow", index=False))
