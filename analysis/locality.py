"""Data-locality verdict of a run (``locality.json``; pure, reads the run directory).

Inputs: ``experiment.json`` (each workload's ``data`` policy: class, allowed regions and
countries; models.locality.DataPolicy), ``plan.json`` (routes and the nodes' ``region`` and
``country`` labels), ``flows.jsonl`` (each flow's source node, addresses, ports and workload)
and, where they exist, ``captures/`` (index.json and the pcaps).

Every flow of a marked workload is checked on every path the plan gives it
(models.locality.flow_violations: every node on the path, both ends of every link, must be in an
allowed region). A violating flow is **confirmed** when a capture of a link on a violating
path holds a packet of its connection (its 4-tuple in either direction); ``captured_on`` names
those pcaps (a link without a capture leaves it unconfirmed: the plan alone says so).

``verdict``: ``compliant`` (marked flows exist and none violates), ``violation`` or
``not_applicable`` (no workload is marked, or none of its flows was recorded). ``evidence``
is a hash chain (models.evidence) over the files the verdict rests on: experiment.json,
plan.json, flows.jsonl and every pcap listed in captures/index.json; ``aitb verify RUN_DIR``
recomputes it and the verdict (:func:`check_locality`), so neither the files nor the verdict
stated from them can change unnoticed.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

from analysis.io import write_json_atomic
from analysis.pcap import PROTO_TCP, DecodeStats, decode_frame, open_capture
from models.evidence import build_chain, verify_chain
from models.locality import DataPolicy, flow_violations
from models.paths import PathError, PathWalker
from models.plan import plan_from_dict
from models.rundir import read_jsonl

__all__ = ["policies_of", "locality_report", "write_locality", "evidence_files",
           "check_locality"]



def policies_of(experiment: dict[str, Any]) -> dict[int, DataPolicy]:
    """workload index -> its data policy, from an experiment.json mapping."""
    out = {}
    for i, w in enumerate(experiment.get("workloads", [])):
        d = w.get("data") if isinstance(w, dict) else None
        if d:
            countries = d.get("allowed_countries")
            out[i] = DataPolicy(d.get("data_class") or d.get("class") or "",
                                tuple(d["allowed_regions"]),
                                tuple(countries) if countries is not None else None)
    return out


def evidence_files(run_dir: Path) -> list[str]:
    """The files the verdict rests on, relative to ``run_dir`` (module docstring)."""
    names = [n for n in ("experiment.json", "plan.json", "flows.jsonl")
             if (run_dir / n).exists()]
    index = run_dir / "captures" / "index.json"
    if index.exists():
        names.append("captures/index.json")
        doc = json.loads(index.read_text(encoding="utf-8"))
        names += sorted(f for i in doc.get("interfaces", []) for f in i.get("files", [])
                        if (run_dir / f).exists())
    return names


def _captures_by_link(run_dir: Path) -> dict[str, list[str]]:
    index = run_dir / "captures" / "index.json"
    if not index.exists():
        return {}
    out: dict[str, list[str]] = {}
    for i in json.loads(index.read_text(encoding="utf-8")).get("interfaces", []):
        out.setdefault(i.get("link", ""), []).extend(i.get("files", []))
    return out


def _tuples_in(path: Path) -> set[tuple[str, int, str, int]]:
    """(src, sport, dst, dport) of every TCP packet of the pcap at ``path``."""
    seen, stats = set(), DecodeStats()
    for _t, link, buf, off, caplen, wirelen in open_capture(path).frames():
        d = decode_frame(link, buf, off, caplen, wirelen, stats)
        if d is not None and d[0] == PROTO_TCP:
            seen.add((str(ipaddress.ip_address(d[1])), d[3], str(ipaddress.ip_address(d[2])),
                      d[4]))
    return seen


def _confirm(run_dir: Path, bad: list[dict[str, Any]]) -> None:
    """Add ``captured_on`` to each violating flow (module docstring)."""
    by_link, cache = _captures_by_link(run_dir), {}
    for v in bad:
        f = v["flow"]
        conn = {(f["src_ip"], f["sport"], f["dst_ip"], f["dport"]),
                (f["dst_ip"], f["dport"], f["src_ip"], f["sport"])}
        files = sorted({p for path in v["paths"] for lk in path["links"]
                        for p in by_link.get(lk, [])})
        for name in files:
            if name not in cache and (run_dir / name).exists():
                cache[name] = _tuples_in(run_dir / name)
        v["captured_on"] = [n for n in files if conn & cache.get(n, set())]


def locality_report(run_dir: Path) -> dict[str, Any]:
    """The verdict of ``run_dir`` as a JSON-ready dict (module docstring): ``verdict``,
    ``policies`` (per marked workload), ``checked_flows``, ``violations`` (flow, paths,
    captured_on), ``unrouted`` and ``evidence``. Reads only."""
    experiment = json.loads((run_dir / "experiment.json").read_text(encoding="utf-8"))
    plan = plan_from_dict(json.loads((run_dir / "plan.json").read_text(encoding="utf-8")))
    policies = policies_of(experiment)
    walker, checked, bad, unrouted = PathWalker(plan), 0, [], []
    for f in read_jsonl(run_dir / "flows.jsonl"):
        policy = policies.get(f.get("workload_index", 0))
        if policy is None:
            continue
        checked += 1
        try:
            paths = flow_violations(walker, f["src_node"], f["dst_ip"], policy)
        except PathError as exc:
            unrouted.append(f"{f['src_node']} -> {f['dst_ip']}: {exc}")
            continue
        if paths:
            bad.append({"flow": {k: f.get(k) for k in (
                "workload_index", "workload", "collective_id", "burst_id", "src_node",
                "dst_node", "src_ip", "sport", "dst_ip", "dport", "size_bytes")},
                "data_class": policy.data_class, "paths": paths})
    _confirm(run_dir, bad)
    verdict = "violation" if bad else "compliant" if checked else "not_applicable"
    return {"schema_version": 1, "verdict": verdict,
            "policies": [{"workload_index": i, "data_class": p.data_class,
                          "allowed_regions": list(p.allowed_regions),
                          "allowed_countries": None if p.allowed_countries is None
                          else list(p.allowed_countries)} for i, p in sorted(policies.items())],
            "checked_flows": checked, "violating_flows": len(bad),
            "confirmed_by_capture": sum(bool(v["captured_on"]) for v in bad),
            "violations": bad, "unrouted": sorted(set(unrouted))[:20],
            "evidence": build_chain(run_dir, evidence_files(run_dir))}


# what a verdict states, re-derived by check_locality from the chained files
_STATED = ("verdict", "policies", "checked_flows", "violating_flows", "confirmed_by_capture",
           "violations", "unrouted")


def check_locality(run_dir: Path, doc: dict[str, Any]) -> list[str]:
    """What no longer holds of ``doc`` (a ``locality.json`` mapping) against ``run_dir``: the
    hash chain's changed or missing files (models.evidence.verify_chain), evidence files the
    chain leaves out or names beyond :func:`evidence_files`, and each stated key
    (``verdict``, ``violations``, counts) that differs from :func:`locality_report` recomputed
    from the files (or that it cannot be: an unreadable experiment.json, plan.json,
    flows.jsonl or captures/index.json); one message each, [] when all holds. Reads only."""
    chain = doc.get("evidence") or {}
    problems = verify_chain(run_dir, chain)
    chained = [link.get("name") for link in chain.get("links", [])]
    try:
        wanted = evidence_files(run_dir)
        fresh = locality_report(run_dir)
    except (OSError, ValueError, KeyError) as exc:
        return [*problems, f"the verdict cannot be recomputed from the run's files ({exc})"]
    missing = [n for n in wanted if n not in chained]
    extra = [n for n in chained if n not in wanted and (run_dir / str(n)).exists()]
    if missing:
        problems.append(f"the chain leaves out {', '.join(missing)}, which the verdict rests on")
    if extra:
        problems.append(f"the chain names {', '.join(map(str, extra))}, which the verdict does "
                        "not rest on")
    for key in _STATED:
        if doc.get(key) != fresh[key]:
            stated = doc.get(key)
            shown = (f"{stated!r}, the chained files give {fresh[key]!r}"
                     if key in ("verdict", "checked_flows", "violating_flows",
                                "confirmed_by_capture")
                     else "differs from what the chained files give")
            problems.append(f"locality.json: {key} {shown}")
    return problems


def write_locality(run_dir: Path) -> Path:
    """Write ``run_dir/locality.json`` (:func:`locality_report`) atomically; its path."""
    path = run_dir / "locality.json"
    write_json_atomic(path, locality_report(run_dir))
    return path
