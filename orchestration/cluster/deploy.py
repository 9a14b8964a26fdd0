"""Bring a lab up over the machines of a cluster, each part by the machine's own aitb over SSH.

First the underlay's round trip between every pair of machines a cut link joins is measured
and taken out of those links' delay (orchestration.cluster.underlay). Then for each machine:
its part (orchestration.cluster.partition) as a plan.json written over SSH, ``aitb topo
deploy PLAN --run-id <run><k>`` there (the native backend; the lab stays up), then the VXLAN
end of every cut link joined into its proxy switch; the clock offset of every machine is
measured over the same channel (orchestration.cluster.control) and returned. With
``parallel`` (the default) the machines deploy their parts and join their tunnels at once,
one thread per machine (models.fanout): bring-up takes about the slowest machine's time, not
the sum (the clock exchanges stay one machine at a time).
:func:`destroy` runs ``aitb topo destroy`` on each machine.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from models.errors import LabError
from models.fanout import fan_out
from models.plan import LabPlan, plan_to_dict
from orchestration.cluster.control import Control, Offset
from orchestration.cluster.partition import partition, proxy_argvs, proxy_name
from orchestration.cluster.spec import ClusterSpec
from orchestration.cluster.tunnels import tunnels
from orchestration.cluster.underlay import account, measure_rtts

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["Deployed", "deploy", "destroy"]


@dataclass(frozen=True)
class Deployed:
    """Run id per machine, the nodes each got, each machine's clock offset; the underlay's
    round trips (pair key -> measurement, orchestration.cluster.underlay.measure_rtts) and
    the cut links' delay accounting (underlay.account); seconds per bring-up step
    (``underlay_s``, ``parts_s``, ``tunnels_s``, ``clocks_s``) and per machine
    (``part_s``: its ``aitb topo deploy``)."""

    run_ids: dict[str, str]
    nodes: dict[str, list[str]]
    offsets: dict[str, Offset]
    underlay: dict[str, dict[str, Any]] = field(default_factory=dict)
    cut_links: list[dict[str, Any]] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)
    part_s: dict[str, float] = field(default_factory=dict)


def _each(fn: Callable[[T], R], items: Sequence[T], parallel: bool) -> list[R]:
    if parallel:
        return fan_out(fn, items, inline_single=True)
    return [fn(x) for x in items]


def deploy(plan: LabPlan, where: dict[str, str], cluster: ClusterSpec, run_id: str,
           controls: dict[str, Control], aitb: Sequence[str], parallel: bool = True
           ) -> Deployed:
    """Deploy ``plan`` placed by ``where`` (node -> machine) as run ``run_id`` (at most 10
    characters: machine k's part is ``run_id`` + k). ``aitb``: the argv that runs aitb's
    CLI on the machines (``["aitb"]``, or a venv's python -m orchestration.cli); ``parallel``:
    every machine at once (module docstring). Raises LabError naming the (first failing)
    machine; the parts deployed so far stay for the caller's :func:`destroy`."""
    index = {lk.name: i for i, lk in enumerate(plan.links)}
    ts = tunnels(plan, where, cluster)
    run_ids = {m.name: f"{run_id}{k}" for k, m in enumerate(cluster.machines)}
    timings: dict[str, float] = {}
    t = time.monotonic()
    rtts = measure_rtts(ts, cluster, controls)
    plan, cut_links = account(plan, ts, rtts)
    timings["underlay_s"] = time.monotonic() - t
    part_s: dict[str, float] = {}

    def one_part(name: str) -> None:
        t0 = time.monotonic()
        part = partition(plan, where, name)
        path = f"/tmp/aitb-part-{run_ids[name]}.json"
        controls[name].put_text(path, json.dumps(plan_to_dict(part)))
        try:  # the deployed part keeps its plan in its registry: the file was for deploy only
            controls[name].check([*aitb, "topo", "deploy", path, "--run-id", run_ids[name]],
                                 timeout_s=300)
        finally:
            controls[name].check(["rm", "-f", "--", path])
        part_s[name] = time.monotonic() - t0

    t = time.monotonic()
    _each(one_part, [m.name for m in cluster.machines], parallel)
    timings["parts_s"] = time.monotonic() - t
    joins: dict[str, list[list[str]]] = {m.name: [] for m in cluster.machines}
    for tn in ts:
        i = index[tn.link]
        for side, machine in (("a", tn.a_machine), ("b", tn.b_machine)):
            ns = f"aitb-{run_ids[machine]}-{proxy_name(i)}"
            joins[machine] += proxy_argvs(tn, side, i, cluster, ns)

    def one_join(name: str) -> None:
        for argv in joins[name]:
            controls[name].check(argv)

    t = time.monotonic()
    _each(one_join, list(joins), parallel)
    timings["tunnels_s"] = time.monotonic() - t
    t = time.monotonic()  # one machine at a time, also with parallel: a thread waiting for
    # the GIL would lengthen the exchanges' round trips, and with them the offsets' error
    offsets = {name: c.clock_offset() for name, c in controls.items()}
    timings["clocks_s"] = time.monotonic() - t
    nodes = {m.name: [n for n, w in where.items() if w == m.name] for m in cluster.machines}
    return Deployed(run_ids, nodes, offsets, rtts, cut_links, timings, part_s)


def destroy(deployed: Deployed, controls: dict[str, Control], aitb: Sequence[str]
            ) -> dict[str, str]:
    """``aitb topo destroy`` of every machine's part, each whatever happens to the others;
    machine -> error text (empty: ok)."""
    out = {}
    for name, rid in deployed.run_ids.items():
        try:
            status, _, err = controls[name].run([*aitb, "topo", "destroy", rid], timeout_s=300)
        except LabError as exc:  # that machine stopped answering: the others still go
            out[name] = str(exc)
            continue
        out[name] = "" if status == 0 else f"{shlex.join(aitb)} topo destroy {rid}: {err}"
    return out
