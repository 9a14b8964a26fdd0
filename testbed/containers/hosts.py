"""Container hosts: a host node whose network namespace belongs to a docker container.

For each host with an ``image`` the lab starts a container (docker SDK) named like the
node's namespace (``aitb-<run>-<node>``), labelled with the run id (:data:`RUN_LABEL`),
with ``network_mode=none`` (only ``lo``) and the image's own command. The container's network
namespace, found by its pid (``/proc/<pid>/ns/net``), is bind-mounted at the node's namespace
name (pyroute2 ``netns.attach``, as ``ip netns attach``): from then on the lab moves veth ends,
addresses, routes, sysctls, tc and capture into it exactly as for a plain namespace.

Teardown (:func:`remove_containers`) removes each registered container by name after
checking its run label; unmounting the namespace then lets the kernel free it, and with it
the veth ends and IFBs inside. Needs root and a docker engine (:mod:`testbed.containers.dockerd`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyroute2 import netns as pr_netns

from models.errors import LabError
from models.plan import NodePlan
from testbed.containers.dockerd import client, ensure_engine
from testbed.lab.layout import Layout
from testbed.lab.registry import Registry
from testbed.ns import netns

__all__ = ["RUN_LABEL", "NODE_LABEL", "start_containers", "remove_containers", "run_containers"]

RUN_LABEL = "aitb.run"
NODE_LABEL = "aitb.node"


def _volumes(node: NodePlan) -> dict[str, dict[str, str]]:
    """docker's ``volumes`` of ``node.binds``; raises LabError naming node and key when a
    host path does not exist (a plan from plan.json was not checked on this machine)."""
    out = {}
    for host, target in node.binds.items():
        if not Path(host).exists():
            raise LabError(f"node {node.name}: binds: host path {host!r} does not exist")
        path, _, mode = target.rpartition(":")
        out[host] = {"bind": path, "mode": mode}
    return out


def _start_one(cli: Any, node: NodePlan, name: str, run_id: str) -> int:
    """Start the container of ``node`` (its ``command``, ``environment`` and ``binds``);
    return its pid. Raises LabError naming node and image."""
    import docker

    try:
        cli.images.get(node.image)  # never pull: no registry is reachable, and a lab is local
        box = cli.containers.create(node.image, name=name, network_mode="none",
                                    hostname=node.name, labels={RUN_LABEL: run_id,
                                                                NODE_LABEL: node.name},
                                    command=list(node.command) if node.command else None,
                                    environment=dict(node.environment),
                                    volumes=_volumes(node))
        box.start()
        box.reload()
    except docker.errors.ImageNotFound:
        raise LabError(f"node {node.name}: image {node.image!r} is not in the local docker "
                       "engine (no registry is reachable here: build it locally)") from None
    except docker.errors.DockerException as exc:
        raise LabError(f"node {node.name}: cannot start a container of {node.image!r}: "
                       f"{exc}") from exc
    pid = int(box.attrs["State"].get("Pid") or 0)
    if not box.attrs["State"].get("Running") or pid <= 0:
        raise LabError(f"node {node.name}: the container of {node.image!r} is not running "
                       f"(status {box.attrs['State'].get('Status')}); its command must keep "
                       "running for the lab's lifetime")
    return pid


def _attach(name: str, pid: int, node: str) -> tuple[int, Any]:
    try:
        pr_netns.attach(name, pid)
    except OSError as exc:
        raise LabError(f"node {node}: cannot mount the network namespace of container pid "
                       f"{pid} as {name}: {exc}") from exc
    fd = netns.open_fd(name)
    return fd, netns.socket_in(fd)


def start_containers(nodes: Sequence[NodePlan], layout: Layout, registry: Registry,
                     children: dict[int, subprocess.Popen[Any]],
                     out: dict[str, tuple[int, Any]]) -> None:
    """Start the containers of ``nodes`` (hosts with an image) and mount their namespaces at
    the layout's namespace names; fill ``out`` (namespace name -> (fd, rtnetlink socket)) as
    each one exists. Each container is registered before it is created (kind ``container``,
    by name) so that teardown finds it after any failure. Starts dockerd if none runs (see
    :func:`testbed.containers.dockerd.ensure_engine`). Raises LabError naming the node."""
    cli = ensure_engine(registry, children)
    for node in nodes:
        name = layout.nodes[node.name].netns
        registry.append([{"kind": "container", "node": node.name, "name": name}])
        pid = _start_one(cli, node, name, layout.run_id)
        out[name] = _attach(name, pid, node.name)


def _remove_one(cli: Any, name: str, run_id: str) -> bool:
    import docker

    try:
        box = cli.containers.get(name)
    except docker.errors.NotFound:
        return False
    if box.labels.get(RUN_LABEL) != run_id:
        raise LabError(f"container {name} is not labelled {RUN_LABEL}={run_id}; left alone")
    box.remove(force=True)
    return True


def remove_containers(records: Sequence[dict[str, Any]], run_id: str) -> tuple[list[str],
                                                                               list[str]]:
    """Remove the containers that ``records`` (registry records of kind ``container``) name,
    newest first, each only if it carries this run's label. Returns (removed names,
    failures as sentences naming container and node). Never raises for one container."""
    if not records:
        return [], []
    cli = client()
    if cli is None:
        return [], [f"container {r['name']} (node {r['node']}): no docker engine answers"
                    for r in records]
    removed, failures = [], []
    for r in reversed(records):
        try:
            if _remove_one(cli, r["name"], run_id):
                removed.append(r["name"])
        except Exception as exc:  # noqa: BLE001 - collected and reported
            failures.append(f"container {r['name']} (node {r['node']}): {exc}")
    return removed, failures


def run_containers(run_id: str) -> list[str]:
    """Names of all containers (running or not) labelled with ``run_id``; [] when no engine
    answers. For checks that nothing of a run remains."""
    cli = client()
    if cli is None:
        return []
    return [c.name for c in cli.containers.list(all=True,
                                                 filters={"label": f"{RUN_LABEL}={run_id}"})]
