"""The controller: starts one agent per host, hands out programs, starts phases, collects.

Message sequence on each agent's Unix socket (JSON lines, wire.py):
agent ``hello`` -> controller ``setup`` (ranks, programs, connections to open, options) ->
agent ``listening`` (ports) -> controller ``peers`` (every rank's endpoint) -> agent
``connected`` (TCP settings read back) -> per phase: controller ``start`` (phase, absolute t0)
-> agent ``phase_done`` (half records) -> controller ``stop``. With ``start_mode`` "kick",
agents also hand their outgoing TCP sockets to the controller's starters (kick.py) before
``connected``, and timed transfers are started by it. An agent's ``error``, a closed
control socket, an exited process or a timeout ends the run: ``abort`` to every agent, then
every agent process still alive is killed by its pid.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from models.lifeline import spawn
from models.owned import make_owned_dir, tag_or
from models.records import FailureRecord
from traffic_gen.jsonl import RecordWriter
from traffic_gen.launch import Launcher
from traffic_gen.merge import merge_phase
from traffic_gen.program import Phase, Program
from traffic_gen.requests import request_records
from traffic_gen.wire import Channel

__all__ = ["Controller", "RunFailed"]

_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes with the NUL, unix(7)
_PINGS = 5  # control round trips measured before the first phase
HEALTH_INTERVAL_S = 1.0  # options.health polls while waiting (reads /proc: ~0.1 ms a poll)
# margin = 4 round trips: the start message out, the agent's phase thread and rank threads
# starting, a starter (kick.py) arming; at least 5 ms (a scheduler tick of 4 ms at HZ=250
# plus one), at most the 250 ms the margin was fixed at before it was measured
_MARGIN_RTTS, _MARGIN_MIN_S, _MARGIN_MAX_S = 4.0, 0.005, 0.25


def _latest_end(halves: list[Any], t0: float) -> float:
    """The latest ``t_end`` among a phase's half records (host clock, s); ``t0`` if none."""
    ends = [h["t_end"] for h in halves if isinstance(h.get("t_end"), (int, float))]
    return max(ends, default=t0)


class RunFailed(Exception):
    """The run stopped early; ``failure`` says where and why."""

    def __init__(self, failure: FailureRecord) -> None:
        super().__init__(failure.detail)
        self.failure = failure


class Controller:
    """Drives one replay. ``nodes``: host -> lab address; ``options``: a ReplayOptions;
    ``pairs``: (src host, dst host) -> (source, destination address) where these differ from
    ``nodes`` (multi-NIC hosts, traffic_gen.replay); ``rank_ips``: rank -> the address the
    rank is bound to (source and listen address, over ``pairs``)."""

    def __init__(self, run_dir: Path, run_id: str, launcher: Launcher,
                 nodes: Mapping[str, str], options: Any,
                 pairs: Mapping[tuple[str, str], tuple[str, str]] | None = None,
                 rank_ips: Mapping[int, str] | None = None) -> None:
        self.run_dir, self.run_id, self.launcher = run_dir, run_id, launcher
        self.nodes, self.opt = dict(nodes), options
        self.pairs = dict(pairs or {})
        self.rank_ips = dict(rank_ips or {})
        self.procs: dict[str, Any] = {}
        self.chans: dict[str, Channel] = {}
        self.q: queue.Queue[tuple[str, dict[str, Any] | None]] = queue.Queue()
        self.knobs: dict[str, Any] = {}
        self.phase_t0: list[float] = []
        self.phases: list[dict[str, Any]] = []  # per phase: t0, end, idle before it
        self.last_end: float | None = None  # the latest record end of the previous phase
        self.margin_s = 0.0
        self.sock_path = run_dir / "ctl.sock"
        self.placement: dict[int, str] = {}
        self.frozen: set[str] = set()  # nodes whose agent signal_agent stopped (SIGSTOP)
        self._sig_lock = threading.Lock()
        self.sock_dir: Path | None = None
        self.kick_procs: list[subprocess.Popen[bytes]] = []
        self.kick_paths: list[Path] = []
        self.next_health = 0.0  # monotonic instant of the next options.health poll

    # -- lifecycle -------------------------------------------------------------------
    def run(self, program: Program, placement: Mapping[int, str], writer: RecordWriter) -> None:
        """Run every phase; raises RunFailed (after cleanup) on any failure."""
        self.placement = dict(placement)
        hook = getattr(self.opt, "on_controller", None)
        try:
            self._start_agents()
            self._setup(program, placement)
            if hook is not None:  # events: from now on stragglers and agent signals reach us
                hook(self)
            self._measure_margin()
            for phase in program.phases:
                writer.write(self._phase(phase.index, program))
            for ch in self.chans.values():
                ch.send({"type": "stop"})
            self._reap(self.opt.stop_timeout_s)
        except RunFailed as exc:
            writer.write([exc.failure])
            self._abort()
            raise
        finally:
            if hook is not None:
                hook(None)
            self._abort()

    # -- live control (an experiment's events:, testbed/live/trace_player.py) ---------------
    def set_slowdown(self, rank: int, factor: float) -> str:
        """Tell the agent of ``rank`` to multiply its compute durations by ``factor`` from
        its next compute op on (message ``slowdown``). Returns the rank's node. Raises
        KeyError for a rank not placed here, OSError when its control connection is gone."""
        node = self.placement[rank]
        self.chans[node].send({"type": "slowdown", "rank": rank, "factor": factor})
        return node

    def signal_agent(self, node: str, sig: int) -> int | None:
        """Send ``sig`` (SIGSTOP, SIGCONT, SIGKILL) to the agent process of ``node`` by its
        pid; returns the pid, None when ``node`` has no live agent. A stopped agent is
        continued before this controller's agents are ended (:meth:`_abort`)."""
        if getattr(self.opt, "traffic_engine", "per_host") == "shared":
            raise ValueError(f"node {node}'s traffic runs in a shared engine with other "
                             "hosts': it cannot be stopped or killed alone (traffic_engine: "
                             "per_host)")
        with self._sig_lock:
            p = self.procs.get(node)
            if p is None or p.poll() is not None:
                return None
            os.kill(p.pid, sig)
            if sig == signal.SIGSTOP:
                self.frozen.add(node)
            elif sig in (signal.SIGCONT, signal.SIGKILL):
                self.frozen.discard(node)
            return p.pid

    def _thaw_all(self) -> None:
        with self._sig_lock:
            for node in sorted(self.frozen):
                p = self.procs.get(node)
                if p is not None and p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
            self.frozen.clear()

    def _private_sock_dir(self) -> None:
        """A short private directory for the sockets, ``aitb-<run id>-<pid>.<start>-XXXXXXXX``
        in the temporary directory, removed at the end of the run; its name marks this
        process as the owner, so that ``aitb clean`` removes it after a SIGKILL (models.owned)."""
        self.sock_dir = make_owned_dir(tag_or(self.run_id, "ctl"))
        self.sock_path = self.sock_dir / "ctl.sock"

    def _listen(self) -> socket.socket:
        if len(str(self.sock_path.parent / "kick0.sock").encode()) > _SUN_PATH_MAX:
            self._private_sock_dir()  # too deep a run directory for sun_path
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            srv.bind(str(self.sock_path))
        except OSError:
            # a run directory on a file system without sockets (9p, as the stock-kernel VM
            # shares it; some network file systems): the private directory instead
            self._private_sock_dir()
            srv.bind(str(self.sock_path))
        srv.listen(len(self.nodes) + 8)
        return srv

    def _start_agents(self) -> None:
        srv = self._listen()
        shared = getattr(self.opt, "traffic_engine", "per_host") == "shared"
        if self.opt.start_mode == "kick" and not shared:  # an engine starts its own flows
            self._start_kickers()
        threading.Thread(target=self._accept, args=(srv,), daemon=True).start()
        logs = self.run_dir / "agents"
        logs.mkdir(exist_ok=True)
        if shared:
            self._start_engines(logs)
            self._gather("hello", self.opt.agent_start_timeout_s)
            return
        for node in self.nodes:
            argv = [self.opt.python, "-m", "traffic_gen.agent", "--control",
                    str(self.sock_path), "--node", node]
            with (logs / f"{node}.log").open("w") as log:
                self.procs[node] = self.launcher.popen(node, argv, stdout=log,
                                                       stderr=log, stdin=None)
        self._gather("hello", self.opt.agent_start_timeout_s)

    def _start_engines(self, logs: Path) -> None:
        """The shared traffic engines (engine.py): ``engines`` of them (None: one per CPU,
        never more than hosts), each holding a contiguous share of the hosts, started in
        the root namespace (each enters its hosts' namespaces itself). Every node's entry in
        :attr:`procs` is its engine's process."""
        nodes = list(self.nodes)
        n = self.opt.engines or (os.cpu_count() or 1)
        n = max(1, min(n, len(nodes)))
        for k in range(n):
            mine = nodes[k * len(nodes) // n:(k + 1) * len(nodes) // n]
            argv = [self.opt.python, "-m", "traffic_gen.engine", "--control",
                    str(self.sock_path), "--spin-s", str(self.opt.spin_s), "--kick-bytes",
                    str(self.opt.kick_bytes),
                    *(["--rt-priority", str(self.opt.rt_priority)] if self.opt.rt_priority
                      else [])]
            for node in mine:
                argv += ["--node", f"{node}={self.launcher.netns_file(node)}"]
            with (logs / f"engine{k}.log").open("w") as log:
                proc = self._popen_host(argv, stdout=log, stderr=log,
                                        stdin=subprocess.DEVNULL, role="engine")
            for node in mine:
                self.procs[node] = proc

    def _start_kickers(self) -> None:
        """One starter process per core (kick.py), each on its own socket beside ctl.sock;
        returns when every socket exists. Raises RunFailed if one exits or is late."""
        logs = self.run_dir / "starters"
        logs.mkdir(exist_ok=True)
        for k in range(max(1, min(os.cpu_count() or 1, 4))):
            path = self.sock_path.parent / f"kick{k}.sock"
            argv = [self.opt.python, "-m", "traffic_gen.burst_starter", "--path", str(path),
                    "--spin-s", str(self.opt.spin_s),
                    *(["--rt-priority", str(self.opt.rt_priority)] if self.opt.rt_priority
                      else [])]
            with (logs / f"starter{k}.log").open("w") as log:
                # killed with this thread's process from its first instruction and (a lab's
                # launcher) in the lab's registry before it execs: a SIGKILLed run left
                # starters at SCHED_FIFO behind, in no registry
                self.kick_procs.append(self._popen_host(argv, stdout=log, stderr=log,
                                                        stdin=subprocess.DEVNULL))
            self.kick_paths.append(path)
        deadline = time.time() + self.opt.agent_start_timeout_s
        while not all(p.exists() for p in self.kick_paths):
            self._check_kickers()
            if time.time() > deadline:
                raise RunFailed(self._failure("controller", "timeout waiting for the starter "
                                                            "processes (kick.py)"))
            time.sleep(0.01)

    def _popen_host(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        """A starter through the launcher's ``popen_host``; a launcher without one (a test's
        stand-in) gets a plain child that dies with this thread's process."""
        start = getattr(self.launcher, "popen_host", None)
        if start is None:
            return spawn(argv, pdeathsig=signal.SIGKILL, **kw)
        return start(argv, **kw)

    def _check_kickers(self) -> None:
        for k, p in enumerate(self.kick_procs):
            if p.poll() is not None:
                raise RunFailed(self._failure("controller", f"starter process {k} exited with "
                                              f"code {p.returncode} (starters/starter{k}.log)"))

    def _accept(self, srv: socket.socket) -> None:
        with srv:
            srv.settimeout(self.opt.agent_start_timeout_s)
            for _ in self.nodes:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                conn.settimeout(None)
                threading.Thread(target=self._read, args=(Channel(conn),), daemon=True).start()

    def _read(self, ch: Channel) -> None:
        node = "?"
        try:
            for msg in ch:
                if msg["type"] == "hello":
                    node = msg["node"]
                    self.chans[node] = ch
                self.q.put((node, msg))
        except (OSError, ValueError):
            pass
        self.q.put((node, None))

    # -- waiting for agents ----------------------------------------------------------
    def _failure(self, node: str, detail: str, **kw: Any) -> FailureRecord:
        return FailureRecord(run_id=self.run_id, node=node, detail=detail, t=time.time(), **kw)

    def _gather(self, kind: str, timeout_s: float) -> dict[str, dict[str, Any]]:
        """Wait until every node sent a ``kind`` message; RunFailed on error, exit or timeout."""
        got: dict[str, dict[str, Any]] = {}
        deadline = time.time() + timeout_s
        while len(got) < len(self.nodes):
            try:
                node, msg = self.q.get(timeout=0.05)
            except queue.Empty:
                self._check_alive(kind, deadline, got)
                continue
            if msg is None:
                raise RunFailed(self._failure(node, f"agent on {node} closed its control "
                                                    f"connection while the run waited for "
                                                    f"{kind!r} {self._exit_note(node)}"))
            if msg["type"] == "error":
                raise RunFailed(self._failure(
                    msg.get("node", node), _describe(msg), rank=msg.get("src_rank", msg.get(
                        "rank")), peer=msg.get("dst_rank"), op=msg.get("id", msg.get("op")),
                    extra=msg))
            if msg["type"] == kind:
                got[node] = msg
        return got

    def _exit_note(self, node: str) -> str:
        p = self.procs.get(node)
        code = p.poll() if p else None
        return f"(agent exited with code {code})" if code is not None else ""

    def _check_alive(self, kind: str, deadline: float, got: Mapping[str, Any]) -> None:
        health = getattr(self.opt, "health", None)
        if health is not None and time.monotonic() >= self.next_health:
            self.next_health = time.monotonic() + HEALTH_INTERVAL_S
            for node, why in health():
                raise RunFailed(self._failure(node, why))
        for node, p in self.procs.items():
            if p.poll() is not None and node not in got and node not in self.chans:
                raise RunFailed(self._failure(node, f"agent on {node} exited with code "
                                                    f"{p.returncode} before {kind!r}"))
        if time.time() > deadline:
            late = sorted(set(self.nodes) - set(got))
            raise RunFailed(self._failure(late[0], f"timeout waiting for {kind!r} from "
                                                   f"node(s) {', '.join(late)}"))

    # -- phases ------------------------------------------------------------------------
    def ends(self, src: str, dst: str) -> tuple[str, str]:
        """(source, destination) address of traffic from host ``src`` to host ``dst``."""
        return self.pairs.get((src, dst), (self.nodes[src], self.nodes[dst]))

    def _setup(self, program: Program, placement: Mapping[int, str]) -> None:
        c = self.opt.conns_per_peer
        allowed = sorted(set(self.nodes.values()) | {ip for v in self.pairs.values() for ip in v}
                         | set(self.rank_ips.values()))
        rip = self.rank_ips.get
        for node, ch in self.chans.items():
            out = [[s, d, k, p] for s, d, p in sorted(program.channels) if placement[s] == node
                   for k in range(c if p == "tcp" else 1)]
            in_tcp = c * sum(1 for s, d, p in program.channels
                             if placement[d] == node and p == "tcp")
            udp_in = [[s, d, rip(d) or self.ends(placement[s], node)[1]]
                      for s, d, p in sorted(program.channels)
                      if placement[d] == node and p == "udp"]
            ranks = {str(r): prog for r, prog in program.ranks.items() if placement[r] == node}
            # every address a peer connects to on this node (its NIC towards that peer)
            # and the NICs its ranks are bound to
            bind = {str(r): ip for r, ip in self.rank_ips.items() if placement.get(r) == node}
            ips = sorted({self.nodes[node]} | {self.ends(n, node)[1] for n in self.nodes}
                         | set(bind.values()))
            ch.send({"type": "setup", "run_id": self.run_id, "node": node, "bind": bind,
                     "ip": self.nodes[node], "ips": ips, "allowed": allowed, "ranks": ranks,
                     "out": out, "in_tcp": in_tcp, "udp_in": udp_in,
                     "options": self.opt.agent_options(), "kick": self._kick_info()})
        ports = self._gather("listening", self.opt.agent_start_timeout_s)
        for me, ch in self.chans.items():  # per sender: [dst ip, port, dst node, src ip]
            rank_ep = {}
            for r, n in placement.items():
                if n in ports:
                    src_ip, dst_ip = self.ends(me, n)
                    dst_ip = rip(r) or dst_ip  # a rank bound to a NIC listens there
                    rank_ep[str(r)] = [dst_ip, ports[n]["tcp_ports"][dst_ip], n, src_ip]
            udp_ep = {k: [rip(int(k.split(",")[1])) or self.ends(me, n)[1], port, n,
                          self.ends(me, n)[0]]
                      for n, m in ports.items() for k, port in m["udp_ports"].items()}
            ch.send({"type": "peers", "rank_ep": rank_ep, "udp_ep": udp_ep})
        done = self._gather("connected", self.opt.agent_start_timeout_s)
        self.knobs = {n: m["knobs"] for n, m in done.items()}

    def _kick_info(self) -> dict[str, Any] | None:
        if not self.kick_paths:
            return None
        return {"paths": [str(p) for p in self.kick_paths], "bytes": self.opt.kick_bytes}

    def _measure_margin(self) -> None:
        """The start margin: ``start_margin_s`` if set, else measured as ``_MARGIN_RTTS``
        times the slowest of ``_PINGS`` control round trips to every agent (a start message
        and the agent's reply, both through its thread and its socket), within
        [``_MARGIN_MIN_S``, ``_MARGIN_MAX_S``]."""
        if self.opt.start_margin_s is not None:
            self.margin_s = float(self.opt.start_margin_s)
            return
        worst = 0.0
        for k in range(_PINGS):
            t = time.time()
            for ch in self.chans.values():
                ch.send({"type": "ping", "seq": k})
            self._gather("pong", self.opt.agent_start_timeout_s)
            worst = max(worst, time.time() - t)
        self.margin_s = min(_MARGIN_MAX_S, max(_MARGIN_MIN_S, _MARGIN_RTTS * worst))

    def _start_instant(self, phase: Phase) -> float:
        """When ``phase`` starts: now for a phase that synchronises through data, now plus
        the start margin for a timed one (for every phase with shared engines), and no
        earlier than ``after_s`` after the previous
        phase's end (its latest record end)."""
        # shared engines start every phase at its instant: each engine then starts all its
        # hosts' ranks in one pass, not as each host's start message comes in (engine.py)
        ahead = phase.timed or getattr(self.opt, "traffic_engine", "per_host") == "shared"
        t0 = time.time() + (self.margin_s if ahead else 0.0)
        if phase.after_s and self.last_end is not None:
            t0 = max(t0, self.last_end + phase.after_s)
        return t0

    def _phase(self, index: int, program: Program) -> list[object]:
        phase = program.phases[index]
        t0 = self._start_instant(phase)
        self.phase_t0.append(t0)
        if self.opt.on_phase is not None:
            self.opt.on_phase(index, phase.anchor_iteration, t0)
        for ch in self.chans.values():
            ch.send({"type": "start", "phase": index, "t0": t0})
        done = self._gather("phase_done", self.opt.phase_timeout_s)
        self._check_kickers()
        halves = [h for m in done.values() for h in m["records"]]
        prev, self.last_end = self.last_end, _latest_end(halves, t0)
        self.phases.append({"phase": index, "iteration": phase.iteration,
                            "burst_id": phase.burst_id, "timed": phase.timed, "t0": t0,
                            "t_end": self.last_end, "after_s": phase.after_s,
                            "idle_before_s": None if prev is None else t0 - prev,
                            # > 0: the controller learnt the previous end too late to honour
                            # after_s (its control path took longer than the gap)
                            "after_late_s": None if prev is None or not phase.after_s
                            else max(0.0, t0 - prev - phase.after_s)})
        return merge_phase(self.run_id, halves, t0, program.collectives, program.bursts) + \
            request_records(self.run_id, halves, program.timed)  # type: ignore[operator]

    # -- teardown ------------------------------------------------------------------------
    def _reap(self, timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        for p in self.procs.values():
            try:
                p.wait(timeout=max(deadline - time.time(), 0.01))
            except Exception:  # noqa: BLE001,S110 - killed below
                pass

    def _abort(self) -> None:
        """End the agents: each connected one hears ``abort`` and ends by itself within
        ``stop_timeout_s`` (else it is killed); one whose hello was not read yet cannot hear
        it and is killed at once (a run interrupted while its agents started waited the
        whole stop timeout for them); then the starters and the control socket."""
        self._thaw_all()  # a frozen agent hears the abort and ends by itself
        for ch in list(self.chans.values()):
            try:
                ch.send({"type": "abort"})
            except OSError:
                pass
        for p in self.procs.values():
            # an engine serves other nodes too: killed only if none of them is connected
            if p.poll() is None and not any(n in self.chans for n, q in self.procs.items()
                                            if q is p):  # (its own node included)
                p.kill()
        self._reap(self.opt.stop_timeout_s if any(p.poll() is None for p in
                                                  self.procs.values()) else 0)
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for ch in list(self.chans.values()):
            ch.close()
        self.chans.clear()
        for p in self.kick_procs:  # ended by pid; each removes its socket on SIGTERM
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for path in self.kick_paths:
            path.unlink(missing_ok=True)
        self.kick_procs, self.kick_paths = [], []
        self.sock_path.unlink(missing_ok=True)
        if self.sock_dir is not None:
            self.sock_dir.rmdir()
            self.sock_dir = None


def _describe(msg: Mapping[str, Any]) -> str:
    parts = [f"node {msg.get('node') or msg.get('src_node')}"]
    if msg.get("src_rank") is not None:
        parts.append(f"rank {msg['src_rank']} -> peer rank {msg.get('dst_rank')}")
    elif msg.get("rank") is not None:
        parts.append(f"rank {msg['rank']}")
    if msg.get("id") or msg.get("op"):
        parts.append(f"op {msg.get('id') or msg.get('op')} ({msg.get('op_kind', '')} "
                     f"{msg.get('step', '')})".replace(" )", ")"))
    return ", ".join(parts) + f": {msg.get('detail', 'failed')}"


