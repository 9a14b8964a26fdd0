"""Rows of counter samples, kept in memory in bounded chunks and written as Parquet.

Each table (qdisc, links, tcp) keeps its rows as column lists. When a table holds
:data:`CHUNK_ROWS` rows they are written to its Parquet file as one row group and dropped from
memory, so memory stays bounded by the chunk size whatever the run length; the files are
complete (footer written) only at :meth:`Store.close`. When all tables together reach
``max_rows`` the sampler stops sampling (and says so in sampler.json) rather than fill the disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.counter_columns import SCHEMAS

__all__ = ["Store", "SCHEMAS", "CHUNK_ROWS"]

CHUNK_ROWS = 100_000

class _Table:
    def __init__(self, path: Path, schema: tuple[tuple[str, str], ...]) -> None:
        self.path, self.schema = path, schema
        self.rows: list[tuple[Any, ...]] = []
        self.writer: Any = None
        self.total = 0

    def add(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows.extend(rows)
        self.total += len(rows)
        if len(self.rows) >= CHUNK_ROWS:
            self.flush()

    def _arrow_schema(self) -> Any:
        import pyarrow as pa
        return pa.schema([(name, pa.string() if t == "string" else pa.type_for_alias(t))
                          for name, t in self.schema])

    def flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        schema = self._arrow_schema()
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, schema)
        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(self.schema)
        self.writer.write_table(pa.table(
            [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)],
            schema=schema))
        self.rows = []

    def close(self) -> None:
        if self.rows or self.writer is None:
            self.flush()
        self.writer.close()


class Store:
    """The three tables of one sampler run under ``out_dir`` (``qdisc.parquet``,
    ``links.parquet``, ``tcp.parquet``); ``max_rows`` caps all rows together."""

    def __init__(self, out_dir: Path, max_rows: int) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.tables = {name: _Table(out_dir / f"{name}.parquet", schema)
                       for name, schema in SCHEMAS.items()}
        self.max_rows = max_rows

    def add(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        """Append ``rows`` (tuples in the order of ``SCHEMAS[table]``)."""
        self.tables[table].add(rows)

    def full(self) -> bool:
        """True once the tables together hold ``max_rows`` rows."""
        return sum(t.total for t in self.tables.values()) >= self.max_rows

    def rows(self) -> dict[str, int]:
        """Rows written or held per table."""
        return {name: t.total for name, t in self.tables.items()}

    def close(self) -> None:
        """Write what is held and finish every file (also the empty ones: zero rows with
        the schema, so readers need no special case)."""
        for t in self.tables.values():
            t.close()
