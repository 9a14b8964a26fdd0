"""Entry point of one shared capturer: ``python -m testbed.capture.shared_main CONFIG_JSON``.

CONFIG_JSON: {"points": [[node, netns, ifname, pcap_base], ...], "snaplen_bytes": int,
"ring_kib": int, "retire_ms": int, "rotate_size_bytes": int, "files": int, "stats": path}.

Opens one TPACKET_V3 ring per point inside its namespace (:mod:`testbed.capture.ring`: the
process enters each namespace, opens the socket and returns to its own), prints ``ready`` on
stdout, then waits in one epoll for blocks of any ring and writes them. SIGTERM or SIGINT:
waits two block time-outs (so the kernel hands over the last, partly filled blocks), writes
what they hold, reads the kernel's drop counters and writes ``stats`` (JSON: per point
``packets_captured``, ``packets_dropped_by_kernel``, ``freeze_count``; ``cpu_s`` of this
process; an ``error`` if one happened, exit status 1 then).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import time
import traceback
from pathlib import Path

from testbed.capture.ring import Ring, RingConfig, open_ring

__all__ = ["main"]

# setns(2) through libc, as testbed/ns/netns.py does, without importing it: the capturer
# starts in ~0.1 s instead of ~1 s (pyroute2's import), which counts on a loaded machine
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/var/run/netns"  # where `ip netns` (and testbed.ns.netns) mount namespaces
_libc = ctypes.CDLL(None, use_errno=True)


def enter(fd: int, what: str) -> None:
    """Move this (single-threaded) process into namespace ``fd``; OSError naming ``what``."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into {what}: {os.strerror(err)}")


def netns_path(name: str) -> str:
    """The bind mount of namespace ``name``."""
    return os.path.join(NETNS_DIR, name)


def write_json_atomic(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _open_all(points: list[list[str]], cfg: RingConfig) -> list[Ring]:
    home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    rings: list[Ring] = []
    try:
        for node, ns, ifname, base in points:
            fd = os.open(netns_path(ns), os.O_RDONLY | os.O_CLOEXEC)
            try:
                enter(fd, f"the namespace of node {node}")
            finally:
                os.close(fd)
            try:
                rings.append(open_ring(ifname, Path(base), cfg))
            except OSError as exc:
                raise OSError(exc.errno, f"node {node} interface {ifname}: {exc.strerror}"
                              ) from None
    finally:
        enter(home, "the capturer's own namespace")
        os.close(home)
    return rings


def main(argv: list[str]) -> int:
    """Run the capturer described by ``argv[0]`` (JSON, see the module docstring)."""
    conf = json.loads(argv[0])
    cfg = RingConfig(snaplen_bytes=conf["snaplen_bytes"], ring_kib=conf["ring_kib"],
                     retire_ms=conf["retire_ms"], rotate_size_bytes=conf["rotate_size_bytes"],
                     files=conf["files"])
    stop = False

    def on_signal(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rings: list[Ring] = []
    error = None
    try:
        rings = _open_all(conf["points"], cfg)
        print("ready", flush=True)
        by_fd = {r.fileno(): r for r in rings}
        ep = select.epoll()
        for fd in by_fd:
            ep.register(fd, select.EPOLLIN)
        while not stop:
            events = ep.poll(0.2)
            for fd, _ in events:
                by_fd[fd].drain()
            if not events:  # a quiet moment: nothing is left behind an unsignalled block
                for r in rings:
                    r.drain()
        time.sleep(2 * cfg.retire_ms / 1000)
        for r in rings:
            r.drain()
            r.read_stats()
    except Exception:  # noqa: BLE001 - reported in the stats file and the exit status
        error = traceback.format_exc(limit=3)
    usage = os.times()
    write_json_atomic(Path(conf["stats"]), {
        "points": [{"packets_captured": r.packets_captured,
                    "packets_dropped_by_kernel": r.packets_dropped,
                    "freeze_count": r.freeze_count} for r in rings],
        "opened": len(rings), "cpu_s": usage.user + usage.system, "error": error})
    for r in rings:
        r.close()
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
