"""Network namespaces without forking: create, enter (per thread), remove.

Linux keeps the network namespace per *thread*: ``unshare(CLONE_NEWNET)`` or ``setns()`` in a
helper thread moves only that thread, and sockets it opens, files it opens under /proc/sys/net
and children it forks all belong to that namespace. So one helper thread creates many
namespaces in a row (unshare, bind-mount /proc/thread-self/ns/net under /run/netns like
``ip netns add``, open a netlink socket there) at ~0.5 ms each, where pyroute2's
``netns.create`` forks a child per namespace (~6 ms each here). Needs root.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

from pyroute2 import netns as pr_netns

from models.errors import LabError
from testbed.lab import signals

__all__ = ["NETNS_DIR", "netns_path", "exists", "create_many", "remove", "run_in", "open_fd",
           "NETLINK_ROUTE", "enter", "socket_in", "attach_pid"]

NETNS_DIR = pr_netns.NETNS_RUN_DIR  # /var/run/netns, where `ip netns` looks
CLONE_NEWNET = 0x40000000
NETLINK_ROUTE = 0
T = TypeVar("T")
_libc = ctypes.CDLL(None, use_errno=True)


def netns_path(name: str) -> str:
    """Path of the bind mount that keeps namespace ``name`` alive (``ip netns`` compatible)."""
    return os.path.join(NETNS_DIR, name)


def exists(name: str) -> bool:
    """True if a namespace called ``name`` is mounted under :data:`NETNS_DIR`."""
    return os.path.exists(netns_path(name))


def open_fd(name: str) -> int:
    """An O_RDONLY fd of namespace ``name``; raises LabError naming it if it does not exist."""
    try:
        return os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise LabError(f"network namespace {name} does not exist") from exc


def enter(fd: int, what: str) -> None:
    """Move the calling *thread* into namespace ``fd``; raises LabError naming ``what``."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise LabError(f"setns into {what} failed: {os.strerror(err)}")


def _route_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
    sock.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: acks of big batches
    sock.setsockopt(socket.SOL_SOCKET, 32, 8 << 20)  # SO_SNDBUFFORCE
    return sock


def _create_one(name: str) -> tuple[int, socket.socket]:
    if exists(name):
        raise LabError(f"network namespace {name} already exists (run id in use?)")
    if _libc.unshare(CLONE_NEWNET) != 0:
        raise LabError(f"unshare(CLONE_NEWNET) for {name}: {os.strerror(ctypes.get_errno())}")
    try:
        pr_netns.attach(name, "thread-self")  # mkdir, share the dir, bind-mount, as `ip netns`
    except OSError as exc:
        raise LabError(f"cannot mount network namespace {name}: {exc}") from exc
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC), _route_socket()


def create_many(names: Iterable[str], out: dict[str, tuple[int, socket.socket]]) -> None:
    """Create namespaces ``names``; fill ``out`` with name -> (namespace fd, rtnetlink socket
    inside it) as each one exists, so a caller still holds what was made if one fails.

    Raises LabError naming the namespace at the first failure. Needs root.
    """
    stop = threading.Event()
    run_in(None, _create_loop, list(names), out, stop, stop=stop)


def _create_loop(names: list[str], out: dict[str, tuple[int, socket.socket]],
                 stop: threading.Event) -> None:
    for name in names:
        if stop.is_set():
            return
        out[name] = _create_one(name)


def attach_pid(name: str, pid: int) -> None:
    """Bind-mount the network namespace of process ``pid`` as ``name`` (like ``ip netns
    attach``), so that it outlives the process and is found by name. Raises LabError naming
    it if the name is taken or the mount fails. Needs root."""
    if exists(name):
        raise LabError(f"network namespace {name} already exists (run id in use?)")
    try:
        pr_netns.attach(name, pid)
    except OSError as exc:
        raise LabError(f"cannot mount the namespace of pid {pid} as {name}: {exc}") from exc


def remove(name: str) -> bool:
    """Unmount and unlink namespace ``name``; False if it was not there. The kernel frees it
    (and its veths, bridges, IFBs) once no process, socket or fd holds it. Raises OSError."""
    if not exists(name):
        return False
    pr_netns.remove(name)
    return True


def run_in(fd: int | None, fn: Callable[..., T], *args: object,
           stop: threading.Event | None = None) -> T:
    """Run ``fn(*args)`` in a fresh helper thread that first enters namespace ``fd`` (``None``:
    stay in the caller's); return its result or re-raise its exception. The thread returns to
    its original namespace before it ends, so nothing else is moved. If the caller is
    interrupted (a signal handler raises), ``stop`` is set and the thread is still waited for,
    so nothing is created behind the caller's back while it tears down."""
    box: dict[str, object] = {}
    finished = threading.Event()

    def target() -> None:
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if fd is not None:
                enter(fd, f"namespace fd {fd}")
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc
        finally:
            enter(home, "the original namespace")
            os.close(home)
            finished.set()

    thread = threading.Thread(target=target, name="aitb-netns", daemon=True)
    started = False
    try:
        # Thread.start() waits for the new thread to begin: a handler raising there left the
        # thread running unwaited (it made a lab's namespaces after its teardown). Signals are
        # held while it starts and delivered again once it has (into this try)
        with signals.held() as got:
            thread.start()
            started = True
        if got:  # its handler now (raising: LabInterrupted), inside this try
            signal.raise_signal(got[0])
        finished.wait()
    except BaseException:
        if stop is not None:
            stop.set()
        # not Thread.is_alive(): unreliable after an interrupt
        while started and not finished.is_set():
            try:
                finished.wait()
            except BaseException:  # noqa: BLE001, S112 - a second signal: keep waiting
                continue
        raise
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def socket_in(fd: int) -> socket.socket:
    """A new rtnetlink socket inside namespace ``fd``."""
    return run_in(fd, _route_socket)
