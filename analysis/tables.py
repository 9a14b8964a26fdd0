"""A run directory's records and counter samples as pandas tables, and their Parquet copies.

Inputs (models/records.py, models/counter_columns.py; every file optional except
``manifest.json``): the merged record files
``flows.jsonl``, ``collectives.jsonl``, ``bursts.jsonl``, ``timeline.jsonl``,
``failures.jsonl``, ``rounds.jsonl``, ``requests.jsonl``; the counter samples
``counters/{qdisc,links,tcp}.parquet`` and ``counters/sampler.json``; ``plan.json``,
``fidelity.json``, ``dci.json``, ``events.jsonl`` (the ``events:`` actions, models/events.py,
with the manifest's ``events.t0_unix_s``) and each workload's ``counters_end.json``
snapshot. A missing
file is an empty table (or None), never an error: a run without counters, captures, rounds or
requests is analysed with what it has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.io import write_parquet_atomic
from models.counter_columns import QDISC_COLUMNS
from models.errors import SpecError
from models.events import EVENT_RECORDS
from models.plan import LabPlan, plan_from_dict
from models.rundir import RECORD_FILES
from models.rundir import read_jsonl as _read_jsonl

__all__ = ["RECORD_FILES", "COUNTER_FILES", "QDISC_COLUMNS", "RunTables", "load_run",
           "read_jsonl", "write_tables"]

COUNTER_FILES: dict[str, str] = {
    "qdisc": "counters/qdisc.parquet", "links": "counters/links.parquet",
    "tcp": "counters/tcp.parquet"}
# counters/qdisc.parquet, one row per qdisc per sample: QDISC_COLUMNS of models.counter_columns
# tables/<name>.parquet written by :func:`write_tables` (the record files' rows, see models.records)
TABLE_NAMES = ("flows", "collectives", "bursts", "timeline", "rounds", "requests")


@dataclass
class RunTables:
    """Everything analysis reads from one run directory.

    ``records``: kind -> DataFrame (one row per record; nested ``tcp``/``udp`` of flows
    flattened to ``tcp_total_retrans`` etc.; empty when the file is absent). ``counters``:
    ``qdisc``/``links``/``tcp`` -> DataFrame of samples (empty when absent). ``plan``: the
    resolved LabPlan or None. ``snapshots``: per workload, in order, the cumulative kernel
    counters the runner saved at its end (``counters_end.json``). ``events``: the lines of
    ``events.jsonl`` as dicts (empty without ``events:``), ``events_t0_unix_s`` the instant
    their times count from (host clock, s; None when the manifest lacks it). ``warnings``:
    lines skipped.
    """

    run_dir: Path
    manifest: dict[str, Any]
    records: dict[str, pd.DataFrame]
    counters: dict[str, pd.DataFrame]
    plan: LabPlan | None = None
    sampler: dict[str, Any] | None = None
    fidelity: dict[str, Any] | None = None
    dci: Any = None
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    events_t0_unix_s: float | None = None
    captures: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def table(self, kind: str) -> pd.DataFrame:
        """The records of ``kind`` (a key of RECORD_FILES); empty if the run has none."""
        return self.records.get(kind, pd.DataFrame())


def read_jsonl(path: Path, warnings: list[str]) -> pd.DataFrame:
    """One row per JSON line of ``path`` (nested dicts flattened with ``_``); empty frame if
    the file is absent or empty. A line that is not a JSON object (a run killed mid-write) is
    skipped and named in ``warnings``."""
    rows = _read_jsonl(path, warnings)
    if not rows:
        return pd.DataFrame()
    return pd.json_normalize(rows, sep="_", max_level=1)


def _json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SpecError(f"not valid JSON: {exc}", file=str(path)) from None


def _counters(run_dir: Path) -> dict[str, pd.DataFrame]:
    out = {}
    for name, rel in COUNTER_FILES.items():
        path = run_dir / rel
        out[name] = pd.read_parquet(path) if path.is_file() else pd.DataFrame()
    if out["qdisc"].empty:
        text = ("node", "ifname", "kind", "handle", "parent")
        out["qdisc"] = pd.DataFrame({c: pd.Series(dtype="float64" if c in ("t_s", "t_err_s")
                                                  else "object" if c in text else "int64")
                                     for c in QDISC_COLUMNS})
    return out


def _snapshots(run_dir: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    snaps = []
    for w in manifest.get("workloads") or []:
        snap = _json(run_dir / w.get("dir", "") / "counters_end.json")
        if isinstance(snap, dict):
            snaps.append(snap)
    return snaps


def load_run(run_dir: Path) -> RunTables:
    """Read the run directory ``run_dir`` (no root, reads only).

    Raises :class:`SpecError` naming the directory if it does not exist or is not a run
    directory (no ``manifest.json``), or naming the file if a JSON file is malformed.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SpecError("no such run directory", file=str(run_dir))
    manifest = _json(run_dir / "manifest.json")
    if not isinstance(manifest, dict):
        raise SpecError("not a run directory: manifest.json is missing (expected "
                        "results/<experiment>/<run-id>/ from `aitb run`)", file=str(run_dir))
    warnings: list[str] = []
    records = {k: read_jsonl(run_dir / f, warnings) for k, f in RECORD_FILES.items()}
    plan_d = _json(run_dir / "plan.json")
    try:
        plan = plan_from_dict(plan_d) if plan_d else None
    except (KeyError, TypeError, ValueError) as exc:
        raise SpecError(f"cannot read the plan: {exc}", file=str(run_dir / "plan.json")) from None
    return RunTables(run_dir, manifest, records, _counters(run_dir), plan,
                     sampler=_json(run_dir / "counters" / "sampler.json"),
                     fidelity=_json(run_dir / "fidelity.json"), dci=_json(run_dir / "dci.json"),
                     snapshots=_snapshots(run_dir, manifest),
                     events=_read_jsonl(run_dir / EVENT_RECORDS, warnings),
                     events_t0_unix_s=(manifest.get("events") or {}).get("t0_unix_s"),
                     captures=sorted((run_dir / "captures").glob("*.pcap*")),
                     warnings=warnings)


def write_tables(tables: RunTables, summary: dict[str, Any],
                 flows: pd.DataFrame | None = None,
                 events: pd.DataFrame | None = None) -> Path:
    """Write ``tables/{flows,collectives,bursts,timeline,rounds,requests}.parquet`` (records;
    ``flows`` replaces the flow records when given, e.g. with each flow's ideal FCT),
    ``tables/counters_qdisc.parquet`` (a copy of the qdisc samples; empty with the contract's
    columns when the run has none) and ``tables/metrics.parquet`` (one row: ``summary``) into
    the run directory, each atomically; with ``events`` (the impact rows of
    analysis.metrics.events) also ``tables/events_impact.parquet``. Returns the tables
    directory."""
    out = tables.run_dir / "tables"
    out.mkdir(exist_ok=True)
    for name in TABLE_NAMES:
        frame = flows if name == "flows" and flows is not None else tables.table(name)
        write_parquet_atomic(out / f"{name}.parquet", _parquet_ready(frame))
    write_parquet_atomic(out / "counters_qdisc.parquet", tables.counters["qdisc"])
    row = pd.DataFrame([{k: (float(v) if v is not None else None) for k, v in summary.items()}])
    write_parquet_atomic(out / "metrics.parquet", row.astype("float64"))
    if events is not None and not events.empty:
        write_parquet_atomic(out / "events_impact.parquet", events)
    else:
        (out / "events_impact.parquet").unlink(missing_ok=True)  # a re-analysis: no stale one
    return out


def _parquet_ready(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns Parquet can hold: dict columns (e.g. a failure's ``extra``) become JSON text."""
    frame = frame.copy()
    for col in frame.columns:
        if frame[col].map(lambda v: isinstance(v, dict)).any():
            frame[col] = frame[col].map(lambda v: json.dumps(v) if v is not None else None)
    return frame
