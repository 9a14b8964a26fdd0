"""Application processes inside a node: ``Lab.exec_app``.

One call for both kinds of host, so an experiment can mix them:

- a container host (``image``): ``docker exec`` through the docker SDK, so ``argv`` comes
  from the image's file system and runs in the container's namespaces (network: the node's);
  the output is streamed into ``log`` by a thread; the exec's host pid (``exec_inspect``)
  is registered like any lab process;
- a namespace host: ``argv`` from the host's file system inside the node's namespace
  (:meth:`testbed.lab.lab.Lab.popen`), output into ``log``, environment the caller's plus ``env``.

Either way the process is registered (kind ``process``: pid and start time, plus the exec id
for containers) and the lab's teardown ends it by that pid (never by name). A namespace
host's process is registered the moment it exists; an exec once docker reports its pid
(about 0.1 s after the start, see :func:`start_apps`): in that window only the container
(registered before it was created) holds it, and removing the container at teardown ends
whatever an exec left behind. Needs root.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from models.errors import LabError
from testbed.containers.dockerd import client
from testbed.lab.registry import pid_start_time
from testbed.ns.procs import end_process

__all__ = ["AppRequest", "AppProcess", "start_app", "start_apps"]

EXEC_PID_WAIT_S = 5.0  # docker reported an exec's pid 0.1-0.3 s after its start here


@dataclass(frozen=True)
class AppRequest:
    """One application to start: ``node``, ``argv``, extra ``env``, ``log`` file (None:
    ``<registry dir>/app-<node>.log``), ``workdir`` (containers only)."""

    node: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    log: Path | None = None
    workdir: str | None = None


class AppProcess:
    """A running application: ``node``, ``argv``, ``log`` (its stdout and stderr), ``pid``
    (host pid; 0 until known), ``t_start`` (epoch seconds just before it was started),
    ``returncode`` (None while it runs; -N after signal N for a namespace host, 128+N from
    docker for a container)."""

    def __init__(self, node: str, argv: Sequence[str], log: Path, t_start: float) -> None:
        self.node, self.argv, self.log, self.t_start = node, list(argv), log, t_start
        self.pid, self.start = 0, None
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
        if self.pid:
            end_process(self.pid, self.start, self.proc)
        self.wait(10.0)


class _NetnsApp(AppProcess):
    def __init__(self, node: str, argv: Sequence[str], log: Path, t_start: float,
                 proc: subprocess.Popen[Any]) -> None:
        super().__init__(node, argv, log, t_start)
        self.proc, self.pid, self.start = proc, proc.pid, pid_start_time(proc.pid)

    def poll(self) -> int | None:
        assert self.proc is not None  # set in __init__
        self.returncode = self.proc.poll()
        return self.returncode


class _ExecApp(AppProcess):
    def __init__(self, node: str, argv: Sequence[str], log: Path, t_start: float, api: Any,
                 exec_id: str, drain: threading.Thread) -> None:
        super().__init__(node, argv, log, t_start)
        self.api, self.exec_id, self.drain = api, exec_id, drain

    def register(self, registry: Any) -> None:
        """Learn the exec's host pid from docker and register it (kind ``process`` with the
        exec id) so that teardown ends it; nothing if it has already ended."""
        self.pid = _exec_pid(self.api, self.exec_id, f"node {self.node}: {shlex.join(self.argv)}")
        self.start = pid_start_time(self.pid) if self.pid else None
        if self.pid:
            registry.append([{"kind": "process", "node": self.node, "pid": self.pid,
                              "start": -1 if self.start is None else self.start,
                              "argv": self.argv, "exec": self.exec_id}])

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


def _begin_exec(lab: Any, api: Any, req: AppRequest, log: Path) -> _ExecApp:
    """docker exec create + start (milliseconds) and the log drain; the pid comes later."""
    import docker

    t_start = time.time()
    try:
        exec_id = api.exec_create(lab.netns_name(req.node), list(req.argv),
                                  environment=dict(req.env), workdir=req.workdir)["Id"]
        stream = api.exec_start(exec_id, stream=True)
    except docker.errors.DockerException as exc:
        raise LabError(f"node {req.node}: {shlex.join(req.argv)}: docker exec failed: "
                       f"{exc}") from exc
    drain = threading.Thread(target=_drain, args=(stream, log.open("ab")), daemon=True,
                             name=f"app-log-{req.node}")
    drain.start()
    return _ExecApp(req.node, req.argv, log, t_start, api, exec_id, drain)


def _begin(lab: Any, api: Any, req: AppRequest) -> AppProcess:
    if isinstance(req.argv, str):
        raise TypeError("argv must be a list of strings, not a shell string")
    node_plan = lab.plan.node(req.node)
    log = req.log or lab.registry.dir / f"app-{req.node}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if node_plan.image:
        return _begin_exec(lab, api, req, log)
    t_start = time.time()
    with log.open("ab") as out:
        proc = lab.popen(req.node, req.argv, stdin=subprocess.DEVNULL, stdout=out,
                         stderr=subprocess.STDOUT, env={**os.environ, **req.env})
    return _NetnsApp(req.node, req.argv, log, t_start, proc)


def start_apps(lab: Any, requests: Sequence[AppRequest]) -> list[AppProcess]:
    """Start every request on the running ``lab`` (see the module doc) as close together as
    docker allows: all execs are started first (a few ms each), then their pids are learned
    and registered (docker reports one about 0.1 s after the start). stdout and stderr go to
    each request's log (appended). Raises LabError naming node and argv (docker refused, no
    pid) or CommandError (a namespace host's program cannot be started); TypeError for a
    shell string. Whatever was started before an error is ended at teardown (by pid, or with
    its container)."""
    boxes = any(lab.plan.node(r.node).image for r in requests)
    api = client(quiet=False).api if boxes else None  # one client: a ping costs ~50 ms
    started = [_begin(lab, api, req) for req in requests]
    for app in started:
        if isinstance(app, _ExecApp):
            app.register(lab.registry)
    return started


def start_app(lab: Any, node: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              log: Path | None = None, workdir: str | None = None) -> AppProcess:
    """One application: :func:`start_apps` of a single :class:`AppRequest`."""
    return start_apps(lab, [AppRequest(node, argv, dict(env or {}), log, workdir)])[0]
