"""Bring a lab up over the machines of a cluster, each part by the machine's own aitb over SSH.

For each machine: its part (orchestration.cluster.partition) as a plan.json written over SSH,
``aitb topo deploy PLAN --run-id <run><k>`` there (the native backend; the lab stays up), then
the VXLAN end of every cut link joined into its proxy switch; the clock offset of every
machine is measured over the same channel (orchestration.cluster.control) and returned.
:func:`destroy` runs ``aitb topo destroy`` on each machine.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from aitb.errors import LabError
from aitb.plan import LabPlan, plan_to_dict
from orchestration.cluster.control import Control, Offset
from orchestration.cluster.partition import partition, proxy_argvs, proxy_name
from orchestration.cluster.spec import ClusterSpec
from orchestration.cluster.tunnels import tunnels

__all__ = ["Deployed", "deploy", "destroy"]


@dataclass(frozen=True)
class Deployed:
    """Run id per machine, the nodes each got, and each machine's clock offset."""

    run_ids: dict[str, str]
    nodes: dict[str, list[str]]
    offsets: dict[str, Offset]


def deploy(plan: LabPlan, where: dict[str, str], cluster: ClusterSpec, run_id: str,
           controls: dict[str, Control], aitb: Sequence[str]) -> Deployed:
    """Deploy ``plan`` placed by ``where`` (node -> machine) as run ``run_id`` (at most 10
    characters: machine k's part is ``run_id`` + k). ``aitb``: the argv that runs aitb's
    CLI on the machines (``["aitb"]``, or a venv's python -m orchestration.cli)."""
    index = {lk.name: i for i, lk in enumerate(plan.links)}
    ts = tunnels(plan, where, cluster)
    run_ids = {m.name: f"{run_id}{k}" for k, m in enumerate(cluster.machines)}
    for m in cluster.machines:
        part = partition(plan, where, m.name)
        path = f"/tmp/aitb-part-{run_ids[m.name]}.json"
        controls[m.name].put_text(path, json.dumps(plan_to_dict(part)))
        controls[m.name].check([*aitb, "topo", "deploy", path, "--run-id", run_ids[m.name]],
                               timeout_s=300)
    for t in ts:
        i = index[t.link]
        for side, machine in (("a", t.a_machine), ("b", t.b_machine)):
            ns = f"aitb-{run_ids[machine]}-{proxy_name(i)}"
            for argv in proxy_argvs(t, side, i, cluster, ns):
                controls[machine].check(argv)
    offsets = {name: c.clock_offset() for name, c in controls.items()}
    nodes = {m.name: [n for n, w in where.items() if w == m.name] for m in cluster.machines}
    return Deployed(run_ids, nodes, offsets)


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
