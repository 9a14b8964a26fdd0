"""JSON and Parquet outputs of the analysis, written atomically (:mod:`models.atomic`: a reader
never sees half a file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from models.atomic import write_atomic, write_text_atomic

__all__ = ["write_json_atomic", "write_parquet_atomic"]


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically. NaN and infinities are refused
    (ValueError): metrics use null for "no value"."""
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


def write_parquet_atomic(path: Path, frame: pd.DataFrame) -> None:
    """Write ``frame`` as Parquet (pyarrow, no index) to ``path`` atomically."""
    write_atomic(path, lambda tmp: frame.to_parquet(tmp, engine="pyarrow", index=False))
