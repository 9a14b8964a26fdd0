"""Metrics of one run: one module per family, each formula in one place with its source.

:func:`compute_metrics` turns :class:`analysis.tables.RunTables` into the ``metrics.json``
dict; :data:`~models.records.SUMMARY_KEYS` (the ground's, shared with campaign plots) are its
``summary`` keys (null when the run has none of that).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.metrics.apps import app_metrics
from analysis.metrics.attribution import attribution_metrics
from analysis.metrics.collectives import cct_metrics, iteration_times
from analysis.metrics.dci import dci_metrics
from analysis.metrics.energy import energy_metrics
from analysis.metrics.events import event_metrics
from analysis.metrics.fairness import fairness_metrics
from analysis.metrics.fct import fct_metrics
from analysis.metrics.incast import incast_metrics
from analysis.metrics.links import queue_metrics, utilization_metrics
from analysis.metrics.requests import request_metrics
from analysis.metrics.retrans import flow_retrans, retrans_metrics
from analysis.metrics.stragglers import round_metrics, straggler_metrics
from analysis.tables import RunTables
from models.records import SUMMARY, SUMMARY_KEYS

__all__ = ["SCHEMA_VERSION", "SUMMARY_KEYS", "compute_metrics", "summary_of", "jsonable",
           "scale_section"]

SCHEMA_VERSION = 1


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers, NaN/inf as None, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def _at(m: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``m``, None where a key is missing."""
    for key in path.split("."):
        if not isinstance(m, dict) or key not in m:
            return None
        m = m[key]
    return m


def _count_at(m: dict[str, Any], path: str) -> int | None:
    """The count at ``path`` (an int, or a list's length), None rather than 0."""
    v = _at(m, path)
    n = len(v) if isinstance(v, list) else v
    return n or None


def summary_value(m: dict[str, Any], where: str) -> Any:
    """The value of one summary key in metrics dict ``m``, ``where`` in the language of
    :data:`models.records.SUMMARY` ("PATH", "PATH#", "PATH?WHEN", "A|B")."""
    for option in where.split("|"):
        path, _, when = option.partition("?")
        if when and not _count_at(m, when):
            v = None
        elif path.endswith("#"):
            v = _count_at(m, path[:-1])
        else:
            v = _at(m, path)
        if v is not None:
            return v
    return None


def summary_of(m: dict[str, Any]) -> dict[str, float | int | None]:
    """The flat ``summary`` of a metrics dict in SUMMARY_KEYS order, each key read where
    :data:`models.records.SUMMARY` says (a new summary metric: one line there).
    ``retransmissions``: the records' TCP_INFO total, else the captures' count.
    ``goodput_bps``: the mean burst goodput at the receiver when the run has bursts
    (analysis.metrics.incast), else the mean per-flow goodput size_bytes * 8 / fct_s.
    ``queue_drops``: packets, root queues of every interface (analysis.metrics.links).
    ``iteration_time_s_mean``: of the main workload's iterations (the one with the most
    iteration time; analysis.metrics.collectives.cct_metrics), not of every workload's.
    ``incast_finish_s_mean`` and ``incast_finish_s_max``: the bursts' mean finish time and the
    worst burst's (analysis.metrics.incast).
    ``events``, ``events_not_recovered``, ``event_recovery_s_max``,
    ``event_iteration_inflation_max``: of the ``events:`` timeline (analysis.metrics.events),
    null without one. ``mfu_mean``, ``network_wait_s_mean`` (accelerator-seconds) and
    ``energy_j_mean`` (J): per iteration, analysis.metrics.energy.
    Counts (``flows``, ``collectives``, ``rounds``, ``events``) are null rather than 0 when
    absent."""
    return {k: jsonable(summary_value(m, where)) for k, where in SUMMARY.items()}


def _goodput(flows: pd.DataFrame) -> float | None:
    """Mean per-flow goodput size_bytes * 8 / fct_s (bit/s) of completed flows."""
    if flows.empty or "fct_s" not in flows:
        return None
    done = flows[flows["fct_s"].notna() & (flows["fct_s"] > 0)]
    return float((done["size_bytes"] * 8 / done["fct_s"]).mean()) if len(done) else None


def _events(t: RunTables) -> dict[str, Any]:
    names = {int(w["index"]): str(w["name"]) for w in t.manifest.get("workloads") or []
             if isinstance(w, dict) and "index" in w and "name" in w}
    section, _ = event_metrics(t.events, t.events_t0_unix_s, t.table("flows"),
                               t.table("collectives"), t.table("timeline"), t.table("rounds"),
                               t.table("failures"), t.plan, names, t.run_dir)
    return section


def scale_section(factor: Any) -> dict[str, Any]:
    """metrics.json's ``scale``: ``{"factor", "sizes"}``, the run's ``scale:`` (manifest) and
    what it did to the records' sizes in words: a scaled run divides every rate, buffer and
    workload size by the factor and keeps every delay (topologies/scaling.py,
    workloads.transform.scale_schedule), so its records' ``size_bytes`` (a 240 MB model at
    scale 10: 24 MB) and rates are the emulated ones. A run without one: factor 1."""
    f = factor if isinstance(factor, int | float) and factor > 0 else 1
    f = int(f) if float(f).is_integer() else f
    if f == 1:
        return {"factor": 1, "sizes": "not scaled"}
    return {"factor": f, "sizes": f"emulated: the experiment's sizes and rates divided by "
                                  f"{f:g} (delays and times are not scaled)"}


def compute_metrics(t: RunTables) -> tuple[dict[str, Any], pd.DataFrame]:
    """The metrics.json dict of run ``t`` (analysis/metrics/__init__.py, plus ``requests``,
    ``apps``, ``retransmissions``, ``dci``, ``events`` (analysis.metrics.events: per event
    the flows, iterations and collectives it hit, recovery, inflation) and ``warnings``
    sections; ``fidelity`` is the run's fidelity.json plus, when the run has captures, the
    ``retransmissions`` check of analysis.metrics.retrans: verdict and flagged connections)
    and the flow table with each flow's ideal FCT and slowdown and its one ``retrans`` count
    with its ``retrans_source``.
    Pure: reads nothing beyond ``t`` except capture files."""
    flows, colls = t.table("flows"), t.table("collectives")
    fct, flow_table = fct_metrics(flows, t.plan)
    fct["goodput_bps_mean"] = _goodput(flows)
    util = utilization_metrics(t.counters["links"], t.plan)
    util.update(queue_metrics(t.counters["qdisc"], t.snapshots))
    strag = straggler_metrics(colls)
    strag["rounds"] = round_metrics(t.table("rounds"))
    iters = iteration_times(t.table("timeline"), colls)
    m: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "run_id": t.manifest.get("run_id"),
        "experiment": t.manifest.get("experiment"), "summary": {}, "fct": fct,
        "cct": cct_metrics(colls, t.table("timeline"), iters),
        "incast": incast_metrics(t.table("bursts"), flows, t.plan, t.counters["qdisc"],
                                 t.snapshots),
        "stragglers": strag,
        "attribution": attribution_metrics(flows, t.table("timeline"), t.plan, colls,
                                           t.counters, t.fidelity),
        "utilization": util, "fairness": fairness_metrics(flows),
        "requests": request_metrics(t.table("requests")),
        "apps": app_metrics(t.table("apps")),
        "retransmissions": retrans_metrics(flows, t.captures, util["queue_drops"]),
        "dci": dci_metrics(t.dci), "events": _events(t), "sampler": t.sampler,
        "energy": energy_metrics(iters, t.table("timeline"), t.table("rounds"),
                                 t.counters["links"], t.plan, t.manifest),
        "fidelity": t.fidelity, "scale": scale_section(t.manifest.get("scale")),
        "trustworthy": t.fidelity.get("trustworthy") if isinstance(t.fidelity, dict) else None,
        "warnings": list(t.warnings)}
    flow_table = flow_retrans(flow_table, m["retransmissions"])
    rec = m["retransmissions"]["reconciliation"]
    if isinstance(m["fidelity"], dict) and rec is not None:
        m["fidelity"] = {**m["fidelity"], "retransmissions": {
            "verdict": rec["verdict"], "connections_compared": rec["connections_compared"],
            "flagged": rec["flagged"]}}
    m = jsonable(m)
    m["summary"] = summary_of(m)
    return m, flow_table
