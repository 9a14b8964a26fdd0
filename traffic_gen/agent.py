"""One agent per emulated host: ``python -m traffic_gen.agent --control CTL.sock --node NAME``.

Runs inside the host's network namespace. Talks to the controller over the Unix socket
``--control`` (see controller.py for the message sequence), or with ``--control -`` over its
standard input and output (the same JSON lines; an agent on another machine, started over
SSH, whose channel the driver joins to the controller's socket: orchestration/cluster/),
opens persistent data connections bound to the host's lab address (and only to peers whose
addresses the controller listed as lab addresses), runs the ranks placed on its host phase by
phase from an absolute start time, and returns half flow records and per-rank op records at
the end of every phase.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import socket
import sys
import threading
import time
from typing import Any

from models.fanout import fan_out
from traffic_gen.burst_starter import KickClient
from traffic_gen.endpoints import Endpoints
from traffic_gen.ranks import run_rank
from traffic_gen.tcpinfo import namespace_sysctls
from traffic_gen.transfers import Abort, Shared
from traffic_gen.wire import Channel

__all__ = ["Agent", "main"]

_SETTLE_S = 0.02  # no end-of-phase work until this long after the phase's start instant


class Agent:
    """The agent's state machine; ``channel`` is its control connection."""

    def __init__(self, channel: Channel, node: str) -> None:
        self.ch, self.node = channel, node
        self.records: list[dict[str, Any]] = []
        self.rlock = threading.Lock()
        self.setup: dict[str, Any] = {}
        self.shared: Shared | None = None
        self.eps: Endpoints | None = None

    def emit(self, rec: dict[str, Any]) -> None:
        """Keep a record until the end of the phase."""
        with self.rlock:
            self.records.append(rec)

    def fail(self, info: dict[str, Any]) -> None:
        """Report a failure once and abort every worker of this agent."""
        assert self.shared is not None
        if not self.shared.aborted.is_set():
            self.shared.aborted.set()
            self.ch.send({"type": "error", "node": self.node, **info})

    def serve(self) -> int:
        """Handle control messages until stop (0) or abort (3)."""
        self.ch.send({"type": "hello", "node": self.node})
        for msg in self.ch:
            kind = msg["type"]
            if kind == "setup":
                self._on_setup(msg)
            elif kind == "peers":
                self._on_peers(msg)
            elif kind == "start":
                threading.Thread(target=self._run_phase, args=(msg["phase"], msg["t0"]),
                                 daemon=True).start()
            elif kind == "slowdown":  # an events: straggler (controller.set_slowdown)
                assert self.shared is not None
                self.shared.slowdown[int(msg["rank"])] = float(msg["factor"])
                self.ch.send({"type": "slowdown_set", "node": self.node, "rank": msg["rank"],
                              "factor": msg["factor"], "t": time.time()})
            elif kind == "ping":  # the controller measures its start margin (controller.py)
                self.ch.send({"type": "pong", "node": self.node, "seq": msg["seq"]})
            elif kind in ("stop", "abort"):
                return self._shutdown(0 if kind == "stop" else 3)
        return self._shutdown(3)  # controller went away

    def _on_setup(self, msg: dict[str, Any]) -> None:
        self.setup = msg
        opts = msg["options"]
        self.shared = Shared(self.emit, self.fail, opts["transfer_timeout_s"], opts["spin_s"],
                             opts["rt_priority"])
        self.eps = Endpoints(self.node, msg["ip"], set(msg["allowed"]), self.shared, opts,
                             msg.get("ips"), msg.get("bind"))
        ports = self.eps.listen(msg["udp_in"])
        self.ch.send({"type": "listening", "node": self.node, **ports})

    def _on_peers(self, msg: dict[str, Any]) -> None:
        assert self.eps is not None
        try:
            knobs = self.eps.connect(self.setup["out"], msg["rank_ep"], msg["udp_ep"],
                                     self.setup["in_tcp"])
            self._kick_setup()
        except (OSError, ValueError) as exc:
            self.fail({"detail": f"connection setup failed: {exc}", "op": "connect"})
            return
        self.ch.send({"type": "connected", "node": self.node,
                      "knobs": {"sysctls": namespace_sysctls(), "connections": knobs}})

    def _kick_setup(self) -> None:
        """Hand the outgoing TCP connections to the controller's starter, if it has one
        (kick.py); timed transfers are then started by it. Raises OSError."""
        kick = self.setup.get("kick")
        assert self.shared is not None and self.eps is not None
        if kick:
            client = KickClient(kick["paths"], kick["bytes"])
            client.register(self.eps.tcp_senders())
            self.shared.kicker = client

    def _run_phase(self, phase: int, t0: float) -> None:
        assert self.shared is not None and self.eps is not None
        self.shared.phase_t0[phase] = t0  # a gather's deadline counts from its round start
        fan_out(lambda rp: self._rank_thread(int(rp[0]), rp[1][phase], t0),
                [(r, prog) for r, prog in self.setup["ranks"].items() if prog[phase]])
        if self.shared.aborted.is_set():
            return
        # stay quiet while other agents may still be starting their burst (few cores)
        time.sleep(max(0.0, t0 + _SETTLE_S - time.time()))
        self.eps.flush()
        with self.rlock:
            recs, self.records = self.records, []
        self.ch.send({"type": "phase_done", "node": self.node, "phase": phase, "records": recs})

    def _rank_thread(self, rank: int, ops: list[dict[str, Any]], t0: float) -> None:
        assert self.shared is not None and self.eps is not None
        try:
            run_rank(rank, self.node, ops, t0, self.eps, self.shared, self.emit)
        except Abort:
            pass
        except Exception as exc:  # noqa: BLE001 - any bug must reach the controller
            self.fail({"rank": rank, "detail": f"{type(exc).__name__}: {exc}"})

    def _shutdown(self, code: int) -> int:
        if self.shared is not None:
            self.shared.aborted.set()
        if self.eps is not None:
            self.eps.close()
        if self.shared is not None and self.shared.kicker is not None:
            self.shared.kicker.close()
        self.ch.close()
        return code


def main(argv: list[str] | None = None) -> int:
    """Entry point: connect to the controller and serve until told to stop."""
    ap = argparse.ArgumentParser(prog="traffic_gen.agent")
    ap.add_argument("--control", required=True,
                    help="controller's Unix socket path; - for stdin/stdout")
    ap.add_argument("--node", required=True, help="this emulated host's node name")
    args = ap.parse_args(argv)
    if args.control == "-":
        bridge = _StdioBridge()
        try:
            return Agent(Channel(bridge.sock), args.node).serve()
        finally:
            bridge.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.time() + 10
    while True:
        try:
            sock.connect(args.control)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    return Agent(Channel(sock), args.node).serve()


class _StdioBridge:
    """Joins the agent's standard input and output to one end of a socket pair (the control
    channel then works as over a Unix socket): :attr:`sock` is the agent's end.

    Two threads copy bytes: ``down`` from fd 0 into the pair (end of stdin shuts the pair's
    write side, so the agent sees its controller go away), ``up`` from the pair to stdout.
    ``down`` reads the raw fd with :func:`os.read` after :func:`select.poll` on fd 0 and a
    wake-up pipe, never through ``sys.stdin``'s buffered reader: a thread blocked inside that
    reader holds its lock, and the interpreter's shutdown, flushing ``sys.stdin``, then aborted
    the process ("Fatal Python error: _enter_buffered_busy: could not acquire lock for
    <stdin> at interpreter shutdown", exit by SIGABRT) whenever the controller had not yet
    closed the agent's stdin. :meth:`close` wakes ``down`` and joins both threads, so none is
    left running when ``main`` returns.
    """

    _CHUNK_BYTES = 65536

    def __init__(self, in_fd: int = 0) -> None:
        self.sock, self._theirs = socket.socketpair()
        self._in_fd = in_fd
        self._wake_r, self._wake_w = os.pipe()
        self._down = threading.Thread(target=self._copy_down, name="stdin-bridge", daemon=True)
        self._up = threading.Thread(target=self._copy_up, name="stdout-bridge", daemon=True)
        self._down.start()
        self._up.start()

    def _copy_down(self) -> None:
        poller = select.poll()
        poller.register(self._in_fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._wake_r in ready:
                    return
                chunk = os.read(self._in_fd, self._CHUNK_BYTES)
                if not chunk:
                    return
                self._theirs.sendall(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                self._theirs.shutdown(socket.SHUT_WR)

    def _copy_up(self) -> None:
        stdout = sys.stdout.buffer
        try:
            while chunk := self._theirs.recv(self._CHUNK_BYTES):
                stdout.write(chunk)
                stdout.flush()
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        """End both threads and wait for them: ``up`` ends once the agent's end is shut
        (everything the agent sent is then written out), ``down`` is woken through the pipe.
        Call after the agent's channel is closed."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._up.join()
        os.write(self._wake_w, b"x")
        self._down.join()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._theirs.close()
        self.sock.close()


if __name__ == "__main__":
    sys.exit(main())
