"""Application processes inside a node: ``Lab.exec_app``.

One call for both kinds of host, so an experiment can mix them:

- a container host (``image``): ``docker exec`` through the docker SDK, so ``argv`` comes
  from the image's file system and runs in the container's namespaces (network: the node's);
  the output is streamed into ``log`` by a thread; the exec's host pid (``exec_inspect``)
  is registered like any lab process;
- a namespace host: ``argv`` from the host's file system inside the node's namespace
  (:meth:`testbed.lab.Lab.popen`), output into ``log``, environment the caller's plus ``env``.

Either way the process is registered (kind ``process``: pid and start time, plus the exec id
for containers) before it can do anything, and the lab's teardown ends it by that pid (never
by name); removing the container afterwards ends whatever an exec left behind. Needs root.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from aitb.models.errors import LabError
from testbed.dockerd import client
from testbed.procs import end_process
from testbed.registry import pid_start_time

__all__ = ["AppProcess", "start_app"]

EXEC_PID_WAIT_S = 5.0  # docker reports the exec's pid within milliseconds here


class AppProcess:
    """A running application: ``node``, ``argv``, ``log`` (its stdout and stderr), ``pid``
    (host pid), ``returncode`` (None while it runs; -N after signal N for a namespace host,
    128+N from docker for a container)."""

    def __init__(self, node: str, argv: Sequence[str], log: Path, pid: int,
                 start: int | None) -> None:
        self.node, self.argv, self.log, self.pid, self.start = node, list(argv), log, pid, start
        self.returncode: int | None = None
        self.proc: subprocess.Popen[Any] | None = None  # our own child (namespace hosts)

    def poll(self) -> int | None:
        """The exit status if it has ended, else None."""
        raise NotImplementedError

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` seconds; the exit status, or None if it still runs."""
        deadline = time.monotonic() + timeout_s
        while self.poll() is None:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)
        return self.returncode

    def kill(self) -> None:
        """End it by pid and start time (SIGTERM, then SIGKILL after 2 s); wait for its end."""
        end_process(self.pid, self.start, self.proc)
        self.wait(10.0)


class _NetnsApp(AppProcess):
    def __init__(self, node: str, argv: Sequence[str], log: Path,
                 proc: subprocess.Popen[Any]) -> None:
        super().__init__(node, argv, log, proc.pid, pid_start_time(proc.pid))
        self.proc = proc

    def poll(self) -> int | None:
        assert self.proc is not None  # set in __init__
        self.returncode = self.proc.poll()
        return self.returncode


class _ExecApp(AppProcess):
    def __init__(self, node: str, argv: Sequence[str], log: Path, api: Any, exec_id: str,
                 pid: int, drain: threading.Thread) -> None:
        super().__init__(node, argv, log, pid, pid_start_time(pid))
        self.api, self.exec_id, self.drain = api, exec_id, drain

    def poll(self) -> int | None:
        if self.returncode is None and not self.drain.is_alive():
            info = self.api.exec_inspect(self.exec_id)
            if not info["Running"]:
                self.returncode = int(info["ExitCode"])
        return self.returncode


def _drain(stream: Any, out: IO[bytes]) -> None:
    """Copy the exec's output stream into the log until it ends (the process exited)."""
    with out:
        for chunk in stream:
            out.write(chunk)
            out.flush()


def _exec_pid(api: Any, exec_id: str, where: str) -> int:
    deadline = time.monotonic() + EXEC_PID_WAIT_S
    while time.monotonic() < deadline:
        info = api.exec_inspect(exec_id)
        if info.get("Pid"):
            return int(info["Pid"])
        if not info["Running"] and info.get("ExitCode") is not None:
            return 0  # it has already ended: nothing to register
        time.sleep(0.01)
    raise LabError(f"{where}: docker reported no pid for exec {exec_id[:12]} within "
                   f"{EXEC_PID_WAIT_S:g} s")


def _start_exec(lab: Any, node: str, argv: Sequence[str], env: Mapping[str, str],
                log: Path, workdir: str | None) -> AppProcess:
    import docker

    where = f"node {node}: {' '.join(argv)}"
    api = client(quiet=False).api
    try:
        exec_id = api.exec_create(lab.netns_name(node), list(argv), environment=dict(env),
                                  workdir=workdir)["Id"]
        stream = api.exec_start(exec_id, stream=True)
    except docker.errors.DockerException as exc:
        raise LabError(f"{where}: docker exec failed: {exc}") from exc
    drain = threading.Thread(target=_drain, args=(stream, log.open("ab")), daemon=True,
                             name=f"app-log-{node}")
    drain.start()
    pid = _exec_pid(api, exec_id, where)
    app = _ExecApp(node, argv, log, api, exec_id, pid, drain)
    if pid:
        lab.registry.append([{"kind": "process", "node": node, "pid": pid,
                              "start": -1 if app.start is None else app.start,
                              "argv": list(argv), "exec": exec_id}])
    return app


def start_app(lab: Any, node: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              log: Path | None = None, workdir: str | None = None) -> AppProcess:
    """Start ``argv`` on ``node`` of the running ``lab`` (see the module doc); stdout and
    stderr go to ``log`` (appended; default ``<registry dir>/app-<node>.log``). ``env``:
    extra environment variables. ``workdir``: containers only, the exec's working directory.
    Raises LabError naming node and argv (docker refused, no pid) or CommandError (a
    namespace host's program cannot be started); TypeError for a shell string."""
    if isinstance(argv, str):
        raise TypeError("argv must be a list of strings, not a shell string")
    node_plan = lab.plan.node(node)
    log = log or lab.registry.dir / f"app-{node}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if node_plan.image:
        return _start_exec(lab, node, argv, env or {}, log, workdir)
    with log.open("ab") as out:
        proc = lab.popen(node, argv, stdin=subprocess.DEVNULL, stdout=out,
                         stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    return _NetnsApp(node, argv, log, proc)
