"""The lab's ALTO server around a run's workloads (experiment key ``alto: {serve: true}``).

    with serving_alto(spec.alto, lab, plan, run_dir, manifest, progress):
        replay every workload

Starts testbed/apps/alto_server.py in the namespace of ``alto.node`` (default: the plan's first
host), bound to that node's lab address, serving ``run_dir/alto/``; waits until it says it is
listening; ends it by pid afterwards (the lab registers it like every lab process, so a lab
torn down after a crash ends it too). Its request log is ``alto/server.log``; the manifest's
``alto_server`` says where it ran.
"""

from __future__ import annotations

import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from models.errors import LabError
from models.plan import LabPlan
from testbed.apps import alto_server
from testbed.lab.registry import pid_start_time
from testbed.ns.procs import end_process

__all__ = ["serving_alto", "server_node", "READY_TIMEOUT_S"]

READY_TIMEOUT_S = 20.0  # a Python start under load on 2 cores took seconds (agents: 20 s)


def server_node(cfg: Any, plan: LabPlan) -> tuple[str, str]:
    """(node, IPv4 address) the server of ``cfg`` (an AltoSpecModel) runs on. Raises
    LabError naming the node when it does not exist or has no IPv4 address."""
    node = cfg.node or plan.hosts()[0].name
    if node not in {n.name for n in plan.nodes}:
        raise LabError(f"alto.node {node!r} is not a node of lab {plan.name}")
    addr = plan.address_of(node)
    if addr is None:
        raise LabError(f"alto.node {node!r} has no IPv4 address to serve on")
    return node, str(addr)


def _wait_ready(proc: subprocess.Popen[str], argv: list[str], log: Path,
                timeout_s: float) -> str:
    assert proc.stdout is not None  # started with stdout=PIPE
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("listening"):
        err = log.read_text(encoding="utf-8", errors="replace").strip()[-500:]
        raise LabError(f"ALTO server {' '.join(argv)} did not start within {timeout_s:g} s"
                       + (f": {err}" if err else ""))
    return line.split()[1]


@contextmanager
def serving_alto(cfg: Any, lab: Any, plan: LabPlan, run_dir: Path, manifest: dict[str, Any],
                 progress: Callable[[str], None]) -> Iterator[None]:
    """Serve ``run_dir/alto`` over HTTP while the body runs when ``cfg.serve`` (module
    docstring); otherwise do nothing. Raises LabError when the server does not come up."""
    if not cfg.serve:
        yield
        return
    node, addr = server_node(cfg, plan)
    argv = [sys.executable, alto_server.__file__, "--dir", str(run_dir / "alto"),
            "--address", addr, "--port", str(cfg.port)]
    t0 = time.monotonic()
    log = run_dir / "alto" / "server.log"  # one line per request: a pipe would fill up
    log.parent.mkdir(exist_ok=True)
    with log.open("w", encoding="utf-8") as err:
        proc = lab.popen(node, argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=err, text=True)
    start = pid_start_time(proc.pid)
    try:
        where = _wait_ready(proc, argv, log, READY_TIMEOUT_S)
        manifest["alto_server"] = {"node": node, "url": f"http://{where}/", "pid": proc.pid}
        progress(f"ALTO server on {node} at http://{where}/ "
                 f"({time.monotonic() - t0:.1f} s to start)")
        yield
    finally:
        end_process(proc.pid, start, proc)
        if proc.stdout is not None:
            proc.stdout.close()
