"""Import AICB workload files (aliyun/aicb): the "physical" CSV (one rank's view, or one
section per pipeline stage) and the SimAI text format.

Chakra execution traces (mlcommons/chakra) are read by workloads/chakra.py (``kind: chakra``).
"""

from __future__ import annotations

from pathlib import Path

from models.errors import SpecError
from models.schedule import Schedule
from workloads.aicb.build import AicbOptions, build_schedule, scale_size
from workloads.aicb.csv_reader import read_csv
from workloads.aicb.rows import AicbFile, AicbRow
from workloads.aicb.simai_reader import read_simai

__all__ = ["AicbOptions", "AicbFile", "AicbRow", "load_aicb", "read_aicb", "read_csv",
           "read_simai", "build_schedule", "scale_size"]


def read_aicb(path: str | Path) -> AicbFile:
    """Parse ``path`` as a CSV (``.csv``, or gzip-compressed ``.csv.gz``) or SimAI text
    (``.txt``) AICB workload.

    Raises :class:`SpecError` for another suffix or a malformed file (naming file and line).
    """
    name = Path(path).name.lower()
    suffix = Path(name.removesuffix(".gz")).suffix
    if suffix == ".csv":
        return read_csv(path)
    if suffix == ".txt":
        return read_simai(path)
    raise SpecError(f"unknown AICB file type {suffix!r}; expected .csv (physical) or .txt "
                    "(SimAI)", file=str(path))


def load_aicb(path: str | Path, options: AicbOptions | None = None) -> Schedule:
    """The :class:`Schedule` of the AICB file at ``path`` (see :class:`AicbOptions`).

    Reads the file; raises :class:`SpecError` naming file and line for bad input.
    """
    return build_schedule(read_aicb(path), options)
