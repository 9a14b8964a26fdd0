"""JSON and Parquet outputs of the analysis, written atomically (:mod:`models.atomic`: a reader
never sees half a file); JSON through the run directory's one writer (:mod:`models.rundir`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from models.atomic import write_atomic
from models.rundir import write_json_atomic

__all__ = ["write_json_atomic", "write_parquet_atomic"]


def write_parquet_atomic(path: Path, frame: pd.DataFrame) -> None:
    """Write ``frame`` as Parquet (pyarrow, no index) to ``path`` atomically."""
    write_atomic(path, lambda tmp: frame.to_parquet(tmp, engine="pyarrow", index=False))
