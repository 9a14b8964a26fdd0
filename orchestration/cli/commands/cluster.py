"""``aitb cluster up FILE [--cluster CLUSTER.yaml]`` and ``aitb cluster down RUN_ID``: a lab over
several machines, each part deployed by the machine's own aitb over SSH
(orchestration/cluster/). ``aitb cluster trust MACHINE... --cluster FILE``: add machines' SSH
host keys to the trusted known_hosts file."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shlex
from pathlib import Path
from typing import Annotated

import typer

from models.errors import LabError, SpecError, SpecIssue

cluster_app = typer.Typer(help="Labs over several machines (SSH, VXLAN).", no_args_is_help=True)


def _state_dir() -> Path:
    from testbed.lab.registry import DEFAULT_STATE_DIR

    return Path(os.environ.get("AITB_STATE_DIR", str(DEFAULT_STATE_DIR)))


def _load_cluster(path: Path):
    from orchestration.cluster.spec import parse_cluster
    from topologies.loader import read_yaml

    doc, dups = read_yaml(path, "a mapping with a cluster: section")
    if dups:
        raise SpecError(dups)
    if not isinstance(doc, dict) or "cluster" not in doc:
        raise SpecError(SpecIssue("expected a mapping with a cluster: section", file=str(path)))
    return parse_cluster(doc["cluster"], str(path))


def _controls(cluster, source: Path):
    from orchestration.cluster.lab import connect

    return connect(cluster, str(source))


@cluster_app.command("up")
def up(file: Annotated[Path, typer.Argument(help="Topology file (YAML) or plan.json.")],
       cluster_file: Annotated[Path | None, typer.Option(
           "--cluster", help="File with a cluster: section (orchestration/cluster/spec.py); "
           "default: FILE's own cluster: section.")] = None,
       run_id: Annotated[str | None, typer.Option("--run-id", help="Run id (a-z0-9, at most "
                                                  "10 characters).")] = None,
       aitb: Annotated[str, typer.Option("--aitb", help="How the machines run aitb.")
                       ] = "aitb") -> None:
    """Place the lab's nodes on the machines (by site, else the planner's cut), deploy each
    part there (all at once unless the section says deploy: serial), join the cut links with
    VXLAN, the underlay's RTT taken off their delay; prints a JSON summary (run ids, nodes per
    machine, clock offsets, underlay RTTs, cut links, bring-up seconds) and keeps it as
    <state dir>/cluster-<run id>.json."""
    from orchestration.cli.commands.topo import load_plan
    from orchestration.cluster.deploy import deploy
    from orchestration.cluster.tunnels import place

    cluster_file = cluster_file or file  # a topology file may carry its own cluster:
    cluster = _load_cluster(cluster_file)
    plan = load_plan(file)
    where = place(plan, cluster)
    rid = run_id or secrets.token_hex(3)
    if len(rid) > 10 or not rid.isalnum():
        raise SpecError(SpecIssue(f"--run-id {rid!r}: a-z0-9, at most 10 characters"))
    controls = _controls(cluster, cluster_file)
    try:
        d = deploy(plan, where, cluster, rid, controls, shlex.split(aitb))
    finally:
        for c in controls.values():
            c.close()
    summary = {"run_id": rid, "cluster": str(cluster_file.resolve()), "aitb": aitb,
               "run_ids": d.run_ids, "nodes": d.nodes,
               "clock_offsets": {k: dataclasses.asdict(v) for k, v in d.offsets.items()},
               "underlay": d.underlay, "cut_links": d.cut_links, "timings_s": d.timings_s}
    _state_dir().mkdir(parents=True, exist_ok=True)
    (_state_dir() / f"cluster-{rid}.json").write_text(json.dumps(summary, indent=2))
    typer.echo(json.dumps(summary))


@cluster_app.command("down")
def down(run_id: Annotated[str, typer.Argument(help="The run id cluster up printed.")]) -> None:
    """Destroy every machine's part of a lab brought up by ``aitb cluster up``."""
    from orchestration.cluster.control import Offset
    from orchestration.cluster.deploy import Deployed, destroy

    path = _state_dir() / f"cluster-{run_id}.json"
    if not path.exists():
        raise SpecError(SpecIssue(f"no cluster lab {run_id} (no {path})"))
    s = json.loads(path.read_text())
    cluster = _load_cluster(Path(s["cluster"]))
    controls = _controls(cluster, Path(s["cluster"]))
    try:
        errors = destroy(Deployed(s["run_ids"], s["nodes"],
                                  {k: Offset(**v) for k, v in s["clock_offsets"].items()}),
                         controls, shlex.split(s["aitb"]))
    finally:
        for c in controls.values():
            c.close()
    bad = {k: v for k, v in errors.items() if v}
    if bad:
        raise LabError("; ".join(f"{k}: {v}" for k, v in bad.items()))
    path.unlink()
    typer.echo(run_id)


@cluster_app.command("trust")
def trust(machines: Annotated[list[str], typer.Argument(
              metavar="MACHINE", help="Machine names of the cluster section.")],
          cluster_file: Annotated[Path, typer.Option(
              "--cluster", help="File with a cluster: section (a cluster, topology or "
              "experiment file).")]) -> None:
    """Trust each MACHINE's SSH host key: connect (a key exchange, no login), print its type
    and SHA256 fingerprint and append it to the cluster section's known_hosts file, else to
    ~/.ssh/known_hosts (a key already on file is left as it is). Asks nothing; prints one
    line per machine. Exit 2 for an unknown machine name or a machine whose key on file is
    another one (it is not replaced: remove the old one with ssh-keygen -R first)."""
    from orchestration.cluster.control import host_trust, trust_machine

    cluster = _load_cluster(cluster_file)
    by_name = {m.name: m for m in cluster.machines}
    unknown = [n for n in machines if n not in by_name]
    if unknown:
        raise SpecError(SpecIssue(f"no machine {', '.join(unknown)} in its cluster: section "
                                  f"(machines: {', '.join(by_name)})", file=str(cluster_file),
                                  key_path=("cluster", "machines")))
    policy = host_trust(cluster, str(cluster_file))
    for name in machines:
        m = by_name[name]
        done, key = trust_machine(m, policy)
        verb = "added to" if done == "added" else "already in"
        typer.echo(f"machine {name}: {m.ssh}:{m.port} {key['type']} {key['fingerprint']} "
                   f"{verb} {key['file']}")


def register(app: typer.Typer) -> None:
    """Add ``cluster up``, ``cluster down`` and ``cluster trust`` to ``app``."""
    app.add_typer(cluster_app, name="cluster")
