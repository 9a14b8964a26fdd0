"""``fidelity.json`` of a cluster run: every machine's part checked on its machine as a local
run's lab is (orchestration.fidelity.run: rates, loss, RTTs, native lines, CPU), merged, plus a
``cluster`` section with the two checks only a cluster has. Pure.

Clock check. Times from two machines are compared in every cross-machine quantity (a CCT
starts on one rank and ends on another; a flow's records come from both ends); each corrected
time is off by at most its machine's ``uncertainty_s`` u (orchestration.cluster.lab), so a
difference of two is off by at most 2 u_max. The run is untrustworthy when that bound exceeds
:data:`DIFFERENCE_SHARE` of the smallest duration it reports:

    2 * u_max > DIFFERENCE_SHARE * min(FCT of every flow, CCT of every collective)

i.e. u_max > 5 % of the smallest FCT/CCT (u_max over the machines, before and after the run;
FCT = ``fct_s`` of flows.jsonl, CCT = ``cct_s`` of collectives.jsonl). 10 % is the rate
check's tolerance (analysis.fidelity.checks.RATE_TOLERANCE): a time error the size of the
effects the run's other checks already refuse.

Underlay check (orchestration.cluster.underlay): a cut link direction whose configured delay
is shorter than the underlay's one-way delay is too slow by ``excess_s``; the run is
untrustworthy when that exceeds the RTT check's tolerance for that delay
(analysis.fidelity.checks.precise_tolerance_s), or when the underlay's RTT could not be
measured (its delay then adds to every cut link's unaccounted).

End-to-end RTT of a cut link (orchestration.cluster.cut_rtt): probed from one end to the other
across the tunnel and compared with the configured round trip (the underlay included); its
entry is added to each of that link's ``links`` entries as ``end_to_end`` (and to their
``checks`` as ``end_to_end_rtt``), the run is untrustworthy when it is ``off``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analysis.fidelity.checks import precise_tolerance_s

__all__ = ["DIFFERENCE_SHARE", "clock_check", "underlay_check", "cluster_fidelity"]

DIFFERENCE_SHARE = 0.10


def _smallest(flows: Sequence[Mapping[str, Any]], colls: Sequence[Mapping[str, Any]]
              ) -> tuple[float | None, str | None]:
    best: tuple[float | None, str | None] = (None, None)
    for f in flows:
        fct = f.get("fct_s")
        if fct is not None and fct > 0 and (best[0] is None or fct < best[0]):
            best = (float(fct), f"FCT of the flow {f.get('src_node')} -> {f.get('dst_node')}"
                                f" (iteration {f.get('iteration', 0)})")
    for c in colls:
        cct = c.get("cct_s")
        if cct is not None and cct > 0 and (best[0] is None or cct < best[0]):
            best = (float(cct), f"CCT of collective {c.get('collective_id')}")
    return best


def clock_check(machines: Mapping[str, Mapping[str, Any]], flows: Sequence[Mapping[str, Any]],
                colls: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """The clock check (module docstring) of the manifest's ``cluster.machines`` against the
    run's flow and collective records: (section, reasons). ``check`` is ``ok``, ``off`` or
    ``not_exercised`` (no machine has an offset, or no duration was measured)."""
    unc = {m: r["clock"]["uncertainty_s"] for m, r in machines.items() if r.get("clock")}
    smallest, what = _smallest(flows, colls)
    sec: dict[str, Any] = {"uncertainty_s": unc,
                           "max_uncertainty_s": max(unc.values()) if unc else None,
                           "smallest_duration_s": smallest, "smallest_is": what,
                           "difference_share": DIFFERENCE_SHARE,
                           "rule": "2 * max_uncertainty_s <= difference_share * "
                                   "smallest_duration_s"}
    if not unc or smallest is None:
        return {**sec, "check": "not_exercised"}, []
    u = sec["max_uncertainty_s"]
    if 2 * u <= DIFFERENCE_SHARE * smallest:
        return {**sec, "check": "ok"}, []
    worst = max(unc, key=unc.__getitem__)
    return {**sec, "check": "off"}, [
        f"clock offset uncertainty {u * 1e6:.0f} us (machine {worst}) is too large for the "
        f"{what} of {smallest * 1e3:.3f} ms: a difference of two corrected times may be off "
        f"by {2 * u * 1e6:.0f} us, more than {DIFFERENCE_SHARE:.0%} of it"]


def underlay_check(cut_links: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]],
                                                                       list[str]]:
    """Each cut link direction's excess over its tolerance (module docstring): (entries,
    reasons)."""
    entries, reasons = [], []
    for rec in cut_links:
        if rec["underlay_rtt_s"] is None:
            entries += [{"link": rec["link"], "direction": d, **rec[d], "tolerance_s": None,
                         "check": "off"} for d in ("a_to_b", "b_to_a")]
            reasons.append(f"link {rec['link']} (cut between {' and '.join(rec['machines'])})"
                           ": the underlay's RTT was not measured (no ICMP echo reply), so "
                           "its delay is added to the configured one unaccounted")
            continue
        for d in ("a_to_b", "b_to_a"):
            r = rec[d]
            tol = precise_tolerance_s(r["configured_delay_s"])
            ok = r["excess_s"] <= tol
            entries.append({"link": rec["link"], "direction": d, **r, "tolerance_s": tol,
                            "check": "ok" if ok else "off"})
            if not ok:
                reasons.append(
                    f"link {rec['link']} {d} (cut between {' and '.join(rec['machines'])}): "
                    f"the underlay's one-way delay {rec['underlay_one_way_s'] * 1e3:.3f} ms "
                    f"exceeds the configured {r['configured_delay_s'] * 1e3:.3f} ms by "
                    f"{r['excess_s'] * 1e3:.3f} ms")
    return entries, reasons


def cluster_fidelity(parts: Mapping[str, Mapping[str, Any]], cluster: Mapping[str, Any],
                     flows: Sequence[Mapping[str, Any]], colls: Sequence[Mapping[str, Any]],
                     cut_rtts: Mapping[str, Mapping[str, Any]] | None = None
                     ) -> dict[str, Any]:
    """The cluster run's fidelity.json: ``links`` (every part's entries, each with its
    ``machine``), ``cpu`` (the busiest machine's summary, ``saturated`` if any is; each
    machine's under ``cpu.machines``), ``cluster`` (the clock and underlay checks, the
    underlay's round trips), ``reasons`` (each part's, naming its machine, and the cluster
    checks'), ``warnings`` (each part's, naming its machine) and ``trustworthy``: False
    when a part is untrustworthy or a cluster check is
    off; else None when a part was not assessed or a machine sent no part; else True.
    ``parts``: machine -> its fidelity.json; ``cluster``: the manifest's ``cluster``
    block; ``cut_rtts``: cut link -> its end-to-end RTT entry (module docstring)."""
    links, reasons, verdicts, warnings = [], [], [], []
    cpus: dict[str, Any] = {}
    for m, doc in parts.items():
        warnings += [f"machine {m}: {w}" for w in doc.get("warnings") or []]
        links += [{**e, "machine": m} for e in doc["links"]]
        cpus[m] = doc["cpu"]
        verdicts.append(doc["trustworthy"])
        reasons += [f"machine {m}: {r}" for r in doc["reasons"]]
    missing = [m for m in cluster["machines"] if m not in parts]
    if missing:
        verdicts.append(None)
        reasons.append(f"not assessed on machine(s) {', '.join(missing)}: no fidelity data "
                       "came back")
    e2e, e2e_reasons = _end_to_end(links, cut_rtts or {})
    reasons += e2e_reasons
    clock, clock_reasons = clock_check(cluster["machines"], flows, colls)
    under, under_reasons = underlay_check(cluster.get("cut_links", []))
    reasons += clock_reasons + under_reasons
    if False in verdicts or clock_reasons or under_reasons or e2e_reasons:
        trustworthy: bool | None = False
    elif None in verdicts:
        trustworthy = None
    else:
        trustworthy = True
    busiest = max(cpus.values(), key=lambda c: c.get("busy_pct_p95") or -1.0, default={})
    cpu = {**busiest, "saturated": any(c.get("saturated") for c in cpus.values()),
           "machines": cpus}
    return {"links": links, "cpu": cpu, "trustworthy": trustworthy, "reasons": reasons,
            "warnings": warnings,
            "cluster": {"clock": clock, "underlay": dict(cluster.get("underlay", {})),
                        "cut_links": under, "end_to_end": e2e}}


def _end_to_end(links: list[dict[str, Any]], cut_rtts: Mapping[str, Mapping[str, Any]]
                ) -> tuple[dict[str, Any], list[str]]:
    """Add each cut link's end-to-end entry to its ``links`` entries (in place); (the
    entries by link, reasons)."""
    for e in links:
        if e["link"] in cut_rtts:
            e["end_to_end"] = dict(cut_rtts[e["link"]])
            e["checks"] = {**e["checks"], "end_to_end_rtt": cut_rtts[e["link"]]["check"]}
            e["ok"] = e["ok"] and cut_rtts[e["link"]]["check"] != "off"
    reasons = [f"cut link {name}: end-to-end RTT {r['rtt_s'] * 1e3:.3f} ms measured across "
               f"the tunnel, {r['expected_rtt_s'] * 1e3:.3f} ms configured (underlay "
               f"included), outside {r['tolerance_s'][0] * 1e3:.3f}.."
               f"{r['tolerance_s'][1] * 1e3:.3f} ms"
               for name, r in cut_rtts.items() if r["check"] == "off"]
    return {k: dict(v) for k, v in cut_rtts.items()}, reasons
