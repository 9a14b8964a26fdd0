"""aitb from Python: build or load a topology, run an experiment from a dict or a file, read
a run's tables as pandas DataFrames and its metrics.

Import it as ``import aitb`` (this package sits above the roof, ``orchestration``, and is
imported by nothing of aitb's own)::

    import aitb

    plan = aitb.topology({"generator": "single_switch", "params": {"hosts": 4}})
    run = aitb.run({"name": "demo", "topology": {"generator": "single_switch"},
                    "workloads": [{"kind": "incast", "receiver": "h1", "size": "1MiB"}]})
    run.table("flows")[["src_node", "fct_s"]]      # a DataFrame
    run.summary["fct_s_p99"]                        # seconds

Everything but :func:`run` is pure (no root, nothing created). :func:`run` needs root (it
builds network namespaces and shapes links) and writes ``results_dir/<name>/<run-id>/``, the
same run directory as ``aitb run``. Errors in an experiment raise
:class:`models.errors.SpecError` naming the key path (and the file and line for a file).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

import topologies
from analysis.run import analyze_run
from analysis.tables import RECORD_FILES, RunTables
from analysis.tables import load_run as _load_tables
from models.plan import LabPlan
from orchestration.run.experiment import parse_experiment
from orchestration.run.runner import Prepared, _plan, execute, prepare_doc
from orchestration.run.runner import prepare as prepare_file

__all__ = ["Run", "topology", "prepare", "run", "load_run", "with_value"]


def topology(ref: str | Path | Mapping[str, Any]) -> LabPlan:
    """The resolved lab plan of a topology: a YAML file path, ``{"file": path}``,
    ``{"generator": name, "params": {...}}`` or ``{"inline": <topology mapping>}`` (as the
    experiment's ``topology`` key). Pure. Raises SpecError for an invalid topology."""
    if isinstance(ref, str | Path):
        return topologies.load_topology(Path(ref))
    doc = {"name": "topology", "topology": dict(ref), "workloads": [
        {"kind": "incast", "receiver": "-", "size": "1B"}]}
    # one resolver for experiments and the API: the runner's
    return _plan(parse_experiment(doc, "<api>"), "<api>", Path.cwd())


def prepare(experiment: str | Path | Mapping[str, Any],
            base_dir: str | Path | None = None) -> Prepared:
    """Check and build an experiment (a YAML file path or a mapping with the file's keys)
    without creating anything. Relative paths in a mapping are relative to ``base_dir``
    (default: the current directory), in a file to the file's folder. Raises SpecError."""
    if isinstance(experiment, str | Path):
        return prepare_file(Path(experiment))
    doc = copy.deepcopy(dict(experiment))
    return prepare_doc(doc, "<api>", Path(base_dir or Path.cwd()))


def with_value(experiment: Mapping[str, Any], key_path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``experiment`` with ``key_path`` (dotted, list indices as numbers:
    ``"workloads.0.size"``) set to ``value``: one point of a parameter sweep. Raises KeyError
    or IndexError naming the path when a key on the way is missing."""
    out = copy.deepcopy(dict(experiment))
    keys = key_path.split(".")
    node: Any = out
    for k in keys[:-1]:
        try:
            node = node[int(k)] if isinstance(node, list) else node[k]
        except (KeyError, IndexError, ValueError):
            raise KeyError(f"{key_path}: no {k!r} on the way") from None
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


def run(experiment: str | Path | Mapping[str, Any], results_dir: str | Path = "results",
        base_dir: str | Path | None = None, progress: Callable[[str], None] | None = None,
        analyze: bool = True) -> Run:
    """Run an experiment (as :func:`prepare` takes it) and return its :class:`Run`, also
    when it failed (``run.ok`` False, ``run.error`` why). Needs root; creates network
    namespaces for the run's duration and writes the run directory under ``results_dir``;
    with ``analyze`` also tables/, metrics.json and report.html. ``progress`` gets each
    progress line. Raises SpecError before anything is created for a bad experiment."""
    prep = prepare(experiment, base_dir)
    outcome = execute(prep, Path(results_dir), progress or (lambda _m: None), analyze=analyze)
    r = load_run(outcome.run_dir)
    r.error = outcome.error
    return r


def load_run(run_dir: str | Path) -> Run:
    """The run in ``run_dir`` (``results/<experiment>/<run-id>/``), read only. Raises
    SpecError naming the directory if it is not a run directory."""
    return Run(_load_tables(Path(run_dir)))


@dataclass
class Run:
    """One run directory: ``tables`` of records, ``metrics`` (metrics.json; computed by the
    analysis when the run has none yet, which writes it), ``manifest``, ``ok``,
    ``trustworthy`` (fidelity.json's verdict, None without one)."""

    tables: RunTables
    error: str | None = None
    _metrics: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def run_dir(self) -> Path:
        """The run directory."""
        return self.tables.run_dir

    @property
    def manifest(self) -> dict[str, Any]:
        """manifest.json: what ran (version, kernel, seed, scale, status...)."""
        return self.tables.manifest

    @property
    def ok(self) -> bool:
        """Whether the run finished (manifest status ``ok``)."""
        return self.manifest.get("status") == "ok"

    @property
    def trustworthy(self) -> bool | None:
        """fidelity.json's verdict: did the emulation deliver the configured links?"""
        fid = self.tables.fidelity
        return fid.get("trustworthy") if isinstance(fid, dict) else None

    @property
    def experiment(self) -> dict[str, Any]:
        """The resolved experiment (experiment.json), {} if absent."""
        path = self.run_dir / "experiment.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def table(self, name: str) -> pd.DataFrame:
        """Records of ``name`` (flows, collectives, bursts, timeline, failures, rounds,
        requests, apps; one row per record, nested fields flattened with ``_``) or counter
        samples (qdisc, links, tcp). Empty frame when the run has none. Raises KeyError for
        another name, listing the valid ones."""
        if name in RECORD_FILES:
            return self.tables.table(name)
        if name in self.tables.counters:
            return self.tables.counters[name]
        raise KeyError(f"no table {name!r}; known: "
                       f"{', '.join([*RECORD_FILES, *self.tables.counters])}")

    @property
    def metrics(self) -> dict[str, Any]:
        """metrics.json (the analysis' numbers with their formulas' sources in
        analysis/metrics/); analyses the run first if it has none."""
        if self._metrics is None:
            path = self.run_dir / "metrics.json"
            self._metrics = (json.loads(path.read_text()) if path.exists()
                             else analyze_run(self.run_dir))
        return self._metrics

    @property
    def summary(self) -> dict[str, Any]:
        """The flat summary of the metrics (seconds, bit/s, counts; names carry the unit)."""
        return dict(self.metrics.get("summary", {}))
