"""JSONL writers and readers for run records (the models do no I/O)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TypeVar

from models.records import (
    BurstRecord,
    CollectiveRecord,
    FailureRecord,
    FlowRecord,
    RankOpRecord,
    RoundRecord,
)
from models.requests import RequestRecord
from models.rundir import RECORD_FILES

__all__ = ["RecordWriter", "read_records", "FILES"]

T = TypeVar("T")

FILES = {FlowRecord: RECORD_FILES["flows"], CollectiveRecord: RECORD_FILES["collectives"],
         BurstRecord: RECORD_FILES["bursts"], RankOpRecord: RECORD_FILES["timeline"],
         FailureRecord: RECORD_FILES["failures"], RoundRecord: RECORD_FILES["rounds"],
         RequestRecord: RECORD_FILES["requests"]}


class RecordWriter:
    """Appends records to one JSONL file per kind in ``run_dir`` (files always exist, maybe
    empty, once the writer is open); flushes after every batch so partial runs keep data."""

    def __init__(self, run_dir: Path) -> None:
        self.paths = {cls: run_dir / name for cls, name in FILES.items()}
        self.files: dict[type, IO[str]] = {cls: p.open("a") for cls, p in self.paths.items()}

    def write(self, records: Iterable[object]) -> None:
        """Append ``records`` (any of the kinds in FILES)."""
        for rec in records:
            self.files[type(rec)].write(json.dumps(rec.to_dict()) + "\n")  # type: ignore[attr-defined]
        for f in self.files.values():
            f.flush()

    def close(self) -> None:
        """Close every file."""
        for f in self.files.values():
            f.close()


def read_records(path: Path, cls: type[T]) -> Iterator[T]:
    """Records of type ``cls`` from a JSONL file (RecordError on another kind or version)."""
    with path.open() as f:
        for line in f:
            if line.strip():
                yield cls.from_dict(json.loads(line))  # type: ignore[attr-defined]
