"""The docker engine for container hosts: use a running one, else start our own and own it.

The engine comes from Debian's ``docker.io`` (scripts/setup.sh). When none answers on
:data:`DOCKER_SOCKET`, :func:`ensure_engine` starts ``dockerd`` as a child of this process,
registers it in the run's registry (kind ``dockerd``: pid and start time) and waits until it
answers; teardown stops it by that pid after the run's containers are gone. Our dockerd makes
no default bridge and no iptables rules, so the host's network is left as it was (container
hosts use ``network_mode=none``; aitb wires them itself). Needs root.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from models.errors import LabError
from models.lifeline import spawn
from testbed.lab.registry import Registry, pid_start_time
from testbed.ns.procs import end_process

__all__ = ["DOCKER_SOCKET", "DOCKERD_ARGV", "DOCKERD_STOP_GRACE_S", "client", "missing_images",
           "ensure_engine", "temporary_engine"]

DOCKER_SOCKET = "unix:///var/run/docker.sock"
DOCKERD_ARGV = ("dockerd", "--host", DOCKER_SOCKET, "--bridge=none", "--iptables=false",
                "--ip6tables=false")
DOCKERD_START_TIMEOUT_S = 30.0
# dockerd stops its containerd on SIGTERM; a SIGKILL would orphan containerd and its shims
DOCKERD_STOP_GRACE_S = 20.0
API_TIMEOUT_S = 30


def client(quiet: bool = True) -> Any:
    """A docker SDK client of the engine at :data:`DOCKER_SOCKET` that answers a ping, or
    None (``quiet``) when none answers. Raises LabError if the ``docker`` package is missing."""
    try:
        import docker
    except ImportError as exc:
        raise LabError("container hosts need the python package 'docker' (pip install "
                       "docker)") from exc
    try:
        cli = docker.DockerClient(base_url=DOCKER_SOCKET, timeout=API_TIMEOUT_S)
        cli.ping()
        return cli
    except docker.errors.DockerException as exc:
        if quiet:
            return None
        raise LabError(f"the docker engine at {DOCKER_SOCKET} does not answer: {exc}") from exc


def missing_images(cli: Any, images: Sequence[str]) -> list[str]:
    """The names among ``images`` that the engine of ``cli`` does not hold (never pulls)."""
    import docker

    lacking = []
    for image in dict.fromkeys(images):
        try:
            cli.images.get(image)
        except docker.errors.ImageNotFound:
            lacking.append(image)
    return lacking


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait_ready(proc: subprocess.Popen[Any], log: Path) -> Any:
    deadline = time.monotonic() + DOCKERD_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"dockerd (pid {proc.pid}) exited with status {proc.returncode}: "
                           f"{_tail(log)} (log: {log})")
        cli = client()
        if cli is not None:
            return cli
        time.sleep(0.2)
    raise LabError(f"dockerd (pid {proc.pid}) did not answer within "
                   f"{DOCKERD_START_TIMEOUT_S:.0f} s: {_tail(log)} (log: {log})")


def _spawn(log: Path, pdeathsig: int | None = None) -> tuple[subprocess.Popen[bytes], int | None]:
    """Start :data:`DOCKERD_ARGV` in its own session, output appended to ``log``; returns the
    process and its start time (for ending it by pid). With ``pdeathsig``, the engine gets
    that signal when the calling thread ends (models.lifeline: also after a SIGKILL of this
    process). Raises LabError naming the argv."""
    try:
        with open(log, "ab") as out:
            kw: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": out,
                                  "stderr": subprocess.STDOUT, "start_new_session": True}
            proc = spawn(list(DOCKERD_ARGV), pdeathsig=pdeathsig, **kw) if pdeathsig \
                else subprocess.Popen(list(DOCKERD_ARGV), **kw)
    except OSError as exc:
        raise LabError(f"cannot start {' '.join(DOCKERD_ARGV)}: {exc} (install Debian's "
                       "docker.io: scripts/setup.sh)") from exc
    return proc, pid_start_time(proc.pid)


def ensure_engine(registry: Registry, children: dict[int, subprocess.Popen[Any]]) -> Any:
    """A client of a running docker engine; starts ``dockerd`` (see module doc) if none runs.

    A started dockerd is registered (``{"kind": "dockerd", "pid", "start", "argv"}``) and put
    in ``children`` before it is waited for, so teardown stops it even if it never answers.
    Its log is ``<registry dir>/dockerd.log``. Raises LabError naming the argv and the log's
    last lines if it cannot be started or does not answer in time.
    """
    cli = client()
    if cli is not None:
        return cli
    log = registry.dir / "dockerd.log"
    proc, start = _spawn(log)
    registry.append([{"kind": "dockerd", "node": "-", "pid": proc.pid,
                      "start": -1 if start is None else start, "argv": list(DOCKERD_ARGV)}])
    children[proc.pid] = proc
    return _wait_ready(proc, log)


@contextmanager
def temporary_engine(log: Path) -> Iterator[Any]:
    """A client of the running docker engine; if none answers, of a ``dockerd`` started here
    (output to ``log``) and stopped by its pid when the block ends, also after an error (for
    one-off jobs such as ``aitb image build``), and sent SIGTERM by the kernel should this
    thread end first (a SIGKILL of this process: it stops its containerd then, as on any
    SIGTERM). Raises LabError like :func:`ensure_engine`."""
    cli = client()
    if cli is not None:
        yield cli
        return
    proc, start = _spawn(log, pdeathsig=signal.SIGTERM)
    try:
        yield _wait_ready(proc, log)
    finally:
        end_process(proc.pid, start, proc, grace_s=DOCKERD_STOP_GRACE_S)
