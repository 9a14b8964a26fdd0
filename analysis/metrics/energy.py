"""What the network costs the job: MFU, accelerator-seconds waiting, and joules.

Per iteration (every workload: the iterations of analysis.metrics.collectives.iteration_times),
per FL round (``rounds.jsonl``: fedavg, hierarchical, gossip) and per workload. A window is an
iteration or a round: its busy time ``T`` (s; an iteration's ``iteration_time_s``, a round's
``round_time_s``), the span ``[t_start, t_end]`` the counters are read over, and the ``N``
ranks of its workload (the manifest's ``world_size``, else the ranks in its timeline).

* **MFU** = ``F / (N x peak x T)``: model FLOPs per iteration ``F`` (the schedule's
  ``model_flops``, forward + backward without recomputation, workloads/training/flops.py
  ``iteration_model_flops``: Megatron's ``72 B s l h^2 (1 + s/(6h) + V/(12 l h))`` per
  iteration and micro-batch step, Narayanan et al., SC 2021, eq. (3) without the
  recomputation forward) over the peak FLOPs the ``N`` accelerators could have done in the
  measured time: "the ratio of the observed throughput (tokens-per-second) relative to the
  theoretical maximum throughput of a system operating at peak FLOPs", Chowdhery et al.,
  "PaLM", 2022, Appendix B (model FLOPs count no recomputation). ``peak``: the workload's
  accelerator (``flops_per_s``), else the profile's ``peak_flops_per_s``. None for kinds
  without a model (FL, collectives).
* **network wait** = ``sum_r (T - c_r)`` accelerator-seconds, ``c_r`` rank ``r``'s compute
  time in the window (its compute ops of the iteration; for a round, the parts of its compute
  ops inside the round's span), at most ``T``: the time each accelerator spent not computing
  while the job waited for the network (and for stragglers the network made wait).
  ``network_wait_share`` = wait / (N x T).
* **accelerator energy** = ``sum_r busy_w x c_r + idle_w x (T - c_r)`` J (a waiting
  accelerator drawn at its idle board power, a computing one at its busy power; profile in
  models/data/energy_profiles.yaml).
* **network energy** = ``sum_d pj_per_bit(d) x 1e-12 x 8 x bytes_d x scale`` (every link
  direction ``d``: the tx bytes its sending interface counted over ``[t_start, t_end]``,
  counters/links.parquet, widened to the enclosing samples) ``+ sum_p idle_w(p) x T`` (every
  port ``p`` of the lab, both ends of every link). Port kinds: an interface of a host is a
  ``host_nic``, an end of a DCI link (models.paths.dci_links) is ``dci``, every other end a
  ``switch_port``. The whole lab's network is charged to the window.
* **scaled runs** (``scale: f``): rates, buffers and sizes were divided by ``f`` and delays
  and compute kept (topologies/scaling.py), so every transfer and iteration took as long as
  unscaled: times are used as measured, bytes are multiplied by ``f``; model FLOPs come from
  the unscaled model. So MFU, wait and energy are the unscaled job's:
  ``E_net = sum_d e(d) x 8 x f x bytes_d + sum_p idle_w(p) x T``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from models.energy import PROFILES_FILE, AcceleratorProfile, NetworkProfile, selected
from models.errors import SpecError
from models.paths import dci_links
from models.plan import LabPlan

__all__ = ["port_kinds", "window_bytes", "window_energy", "energy_metrics"]

PJ = 1e-12


def port_kinds(plan: LabPlan | None) -> dict[tuple[str, str], str]:
    """(node, ifname) -> ``host_nic``, ``switch_port`` or ``dci`` for every link end of
    ``plan`` (module docstring); empty without a plan."""
    if plan is None:
        return {}
    hosts = {n.name for n in plan.nodes if n.kind == "host"}
    dci = dci_links(plan)
    out = {}
    for lk in plan.links:
        for ep in (lk.a, lk.b):
            out[(ep.node, ep.ifname)] = ("host_nic" if ep.node in hosts else
                                         "dci" if lk.name in dci else "switch_port")
    return out


def window_bytes(links: pd.DataFrame, kinds: Mapping[tuple[str, str], str],
                 t0: np.ndarray, t1: np.ndarray) -> dict[str, np.ndarray]:
    """Port kind -> (n,) tx bytes the interfaces of that kind sent in each window
    ``[t0[i], t1[i]]`` (host clock, s): the last sample at or before t0 (else the first) to
    the first at or after t1 (else the last), as analysis.metrics.counters.window_delta."""
    out = {k: np.zeros(len(t0)) for k in ("host_nic", "switch_port", "dci")}
    if links.empty or not len(t0):
        return out
    for (node, ifname), g in links.sort_values("t_s").groupby(["node", "ifname"], sort=False):
        kind = kinds.get((str(node), str(ifname)))
        if kind is None:
            continue
        t = g["t_s"].to_numpy(float)
        b = g["tx_bytes"].to_numpy(float)
        i0 = np.clip(np.searchsorted(t, t0, side="right") - 1, 0, len(t) - 1)
        i1 = np.clip(np.searchsorted(t, t1, side="left"), 0, len(t) - 1)
        out[kind] += np.maximum(b[np.maximum(i1, i0)] - b[i0], 0.0)
    return out


def window_energy(time_s: float, compute_s: list[float], n_ranks: int,
                  bytes_by_kind: Mapping[str, float], ports_by_kind: Mapping[str, int],
                  acc: AcceleratorProfile, net: NetworkProfile, scale: float = 1.0,
                  model_flops: float | None = None, peak_flops_per_s: float | None = None
                  ) -> dict[str, Any]:
    """MFU, network wait and energy of one window (module docstring). ``compute_s``: the
    compute seconds of the ranks that computed (ranks missing from it computed 0 s);
    ``bytes_by_kind``: emulated tx bytes per port kind; ``ports_by_kind``: port counts.
    Returns time_s, network_wait_s (accelerator-s), network_wait_share, mfu (None without
    model_flops), accelerator_j, network_bits_j, network_idle_j, network_j, energy_j."""
    T = max(float(time_s), 0.0)
    c = [min(max(float(x), 0.0), T) for x in compute_s][:n_ranks]
    busy = sum(c)
    wait = n_ranks * T - busy
    acc_j = acc.busy_w * busy + acc.idle_w * wait
    bits_j = sum(getattr(net, k).pj_per_bit * PJ * 8 * float(v) * scale
                 for k, v in bytes_by_kind.items())
    idle_j = sum(getattr(net, k).idle_w * n * T for k, n in ports_by_kind.items())
    mfu = None
    if model_flops and peak_flops_per_s and T > 0 and n_ranks:
        mfu = float(model_flops) / (n_ranks * float(peak_flops_per_s) * T)
    return {"time_s": T, "network_wait_s": wait,
            "network_wait_share": wait / (n_ranks * T) if n_ranks and T > 0 else None,
            "mfu": mfu, "accelerator_j": acc_j, "network_bits_j": bits_j,
            "network_idle_j": idle_j, "network_j": bits_j + idle_j,
            "energy_j": acc_j + bits_j + idle_j}


def _overlap(ops: pd.DataFrame, t0: float, t1: float) -> dict[int, float]:
    """Rank -> seconds of ``ops`` (compute rows) inside [t0, t1]."""
    if ops.empty:
        return {}
    d = (np.minimum(ops["t_end"], t1) - np.maximum(ops["t_start"], t0)).clip(lower=0)
    return {int(r): float(v) for r, v in d.groupby(ops["rank"]).sum().items()}


def _train(w: Mapping[str, Any], round_no: Any, hosts: Any) -> dict[int, float]:
    """Rank -> local training seconds of an FL workload (the manifest's ``train_s``, one
    mapping per round; they run inside the FL ops, so the timeline has no compute rows for
    them): of round ``round_no`` (None: all rounds) and, given ``hosts``, only the ranks on
    those hosts (a cluster round's clients)."""
    per = w.get("train_s") or []
    rank_host = w.get("hosts") or {}
    out: dict[int, float] = {}
    for i, r in enumerate(per):
        if round_no is not None and i != round_no:
            continue
        for rank, sec in r.items():
            if isinstance(hosts, list | tuple | np.ndarray) and \
                    rank_host.get(str(rank)) not in set(hosts):
                continue
            out[int(rank)] = out.get(int(rank), 0.0) + float(sec)
    return out


def _add(a: Mapping[int, float], b: Mapping[int, float]) -> list[float]:
    """Per rank, a + b (ranks of either)."""
    return [a.get(r, 0.0) + b.get(r, 0.0) for r in sorted(set(a) | set(b))]


def _workload_info(manifest: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(w["index"]): w for w in manifest.get("workloads") or []
            if isinstance(w, dict) and "index" in w}


def energy_metrics(iters: pd.DataFrame, timeline: pd.DataFrame, rounds: pd.DataFrame,
                   links: pd.DataFrame, plan: LabPlan | None, manifest: Mapping[str, Any],
                   profiles: str | Path = PROFILES_FILE) -> dict[str, Any]:
    """metrics.json's ``energy``: ``profiles`` (names, numbers and sources used),
    ``scale``, ``iterations`` (per workload and iteration: :func:`window_energy`'s keys),
    ``rounds`` (per FL round, the same plus ``round``, ``level``), ``workloads`` (per
    workload: iterations, totals of time, wait and joules, MFU = sum F / (N peak sum T)),
    ``mfu_mean``, ``network_wait_s_mean`` and ``energy_j_mean`` over iterations.
    ``profiles``: the profile file (models.energy); the manifest's ``energy`` selects in it.
    A manifest naming a profile the file no longer has: the defaults, said in ``warning``."""
    warning = None
    try:
        acc, net, names = selected(manifest.get("energy"), profiles)
    except (SpecError, ValueError) as exc:
        acc, net, names = selected(None, profiles)
        warning = f"energy profile of the run not found ({exc}); used the defaults"
    scale = manifest.get("scale") or 1
    scale = float(scale) if isinstance(scale, int | float) and scale > 0 else 1.0
    kinds = port_kinds(plan)
    ports = {k: sum(1 for v in kinds.values() if v == k) for k in ("host_nic", "switch_port",
                                                                      "dci")}
    info = _workload_info(manifest)
    tl = timeline.assign(workload_index=timeline["workload_index"].fillna(0).astype(int)) \
        if not timeline.empty and "workload_index" in timeline else timeline
    comp = tl[tl["kind"] == "compute"] if not tl.empty and "kind" in tl else pd.DataFrame()

    def ranks_of(wi: int) -> int:
        n = info.get(wi, {}).get("world_size")
        if n:
            return int(n)
        if not tl.empty and "rank" in tl:
            return int(tl.loc[tl["workload_index"] == wi, "rank"].nunique())
        return 0

    def flops(wi: int) -> tuple[float | None, float]:
        w = info.get(wi, {})
        return w.get("model_flops"), float(w.get("flops_per_s") or acc.peak_flops_per_s)

    out_iters = []
    if not iters.empty:
        t0, t1 = iters["t_start"].to_numpy(float), iters["t_end"].to_numpy(float)
        nbytes = window_bytes(links, kinds, t0, t1)
        per_iter: dict[tuple[int, int], dict[int, float]] = {}
        if not comp.empty:  # one groupby for every (workload, iteration, rank)
            sums = (comp["t_end"] - comp["t_start"]).groupby(
                [comp["workload_index"], comp["iteration"], comp["rank"]]).sum()
            for (wi_, it_, rank), v in sums.items():
                per_iter.setdefault((int(wi_), int(it_)), {})[int(rank)] = float(v)
        for i, row in enumerate(iters.itertuples(index=False)):
            wi, it = int(row.workload_index), int(row.iteration)
            c = _add(per_iter.get((wi, it), {}), _train(info.get(wi, {}), None, None))
            f, peak = flops(wi)
            e = window_energy(row.iteration_time_s, c, ranks_of(wi),
                              {k: v[i] for k, v in nbytes.items()}, ports, acc, net, scale,
                              f, peak)
            out_iters.append({"workload_index": wi, "iteration": it, **e})
    out_rounds = []
    if not rounds.empty and "round_time_s" in rounds:
        r = rounds.assign(workload_index=rounds["workload_index"].fillna(0).astype(int)) \
            if "workload_index" in rounds else rounds.assign(workload_index=0)
        t0, t1 = r["t_start"].to_numpy(float), r["t_end"].to_numpy(float)
        nbytes = window_bytes(links, kinds, t0, t1)
        for i, row in enumerate(r.to_dict("records")):
            wi = int(row["workload_index"])
            ops = comp[comp["workload_index"] == wi] if not comp.empty else comp
            rn = row.get("round")
            rn = int(rn) if isinstance(rn, int | float) and np.isfinite(rn) else None
            c = _add(_overlap(ops, t0[i], t1[i]), _train(info.get(wi, {}), rn,
                                                          row.get("selected_hosts")))
            e = window_energy(row["round_time_s"], c, ranks_of(wi),
                              {k: v[i] for k, v in nbytes.items()}, ports, acc, net, scale)
            out_rounds.append({"workload_index": wi, "round": rn,
                               "level": row.get("level"), **e})
    per_w = []
    frame = pd.DataFrame(out_iters)
    for wi, g in (frame.groupby("workload_index") if not frame.empty else []):
        f, peak = flops(int(wi))
        n, total_t = ranks_of(int(wi)), float(g["time_s"].sum())
        per_w.append({"workload_index": int(wi), "name": info.get(int(wi), {}).get("name"),
                      "ranks": n, "iterations": int(len(g)), "time_s": total_t,
                      "network_wait_s": float(g["network_wait_s"].sum()),
                      "accelerator_j": float(g["accelerator_j"].sum()),
                      "network_j": float(g["network_j"].sum()),
                      "energy_j": float(g["energy_j"].sum()),
                      "mfu": f * len(g) / (n * peak * total_t) if f and n and total_t > 0
                      else None})
    mfu = [x["mfu"] for x in out_iters if x["mfu"] is not None]
    return {"profiles": {**names, "accelerator_profile": acc.model_dump(),
                         "network_profile": net.model_dump()},
            "scale": scale, "ports": ports, "warning": warning, "iterations": out_iters,
            "rounds": out_rounds,
            "workloads": per_w,
            "mfu_mean": float(np.mean(mfu)) if mfu else None,
            "network_wait_s_mean": float(frame["network_wait_s"].mean())
            if not frame.empty else None,
            "energy_j_mean": float(frame["energy_j"].mean()) if not frame.empty else None}
