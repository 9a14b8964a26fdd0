"""A lab over the machines of a cluster as ``aitb run`` drives it: the runner's stand-in for a
local ``testbed.lab.lab.Lab`` when the experiment has a ``cluster:`` section.

- :func:`connect`: an SSH control channel to every machine, before anything exists anywhere
  (an unreachable machine is one LabError naming the file, key and machine).
- :meth:`ClusterLab.up`: each machine's part deployed by its own aitb
  (orchestration.cluster.deploy), the clock offsets measured (before the run).
- :meth:`ClusterLab.popen`: an agent for a node of a remote machine, started there over SSH as
  ``aitb exec RUN NODE -- PYTHON -m traffic_gen.agent --control - --node NODE``: ``aitb
  exec`` registers it by pid in that machine's registry before it execs (so ``aitb topo
  destroy`` or ``aitb clean`` there ends it) and its control channel is the SSH channel's
  stdin/stdout, which :class:`RemoteAgent` joins to the controller's Unix socket here. The
  controller (traffic_gen.controller) is the local one, unchanged: it sees a connection on its
  socket like any agent's.
- Clocks: through that join the start instant the controller hands out (``start``'s ``t0``)
  is moved onto the machine's clock (+ offset) and every time the agent reports (records of
  ``phase_done``, an ``error``'s ``t``: the keys of :data:`TIME_KEYS`) back onto the driver's
  (- offset), with the offset measured before the run; the offset is measured again after it
  (:meth:`ClusterLab.measure_after`) and both, with the uncertainty (:func:`uncertainty_s`)
  and the drift between them (``drift_ppm``), are in :meth:`ClusterLab.record`. The
  captures and counters, copied back after that second measurement, are corrected with the
  offset interpolated between the two (orchestration.cluster.control.to_driver_s); the
  agents' records, moved while the run goes on, only with the first.
- A watchdog probes every machine (a command over a new SSH channel) every
  ``probe_interval_s``; a machine that does not answer within ``probe_timeout_s`` is lost:
  its SSH connection is closed, and with it its agents' channels (the controller then fails
  the replay; an agent still starting there fails to start) and
  :meth:`ClusterLab.down` tears down the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from models.errors import LabError
from models.fanout import fan_out
from models.lifeline import spawn
from models.plan import LabPlan
from orchestration.cluster.control import Control, Offset, drift_rate, host_trust, paramiko_errors
from orchestration.cluster.deploy import Deployed, deploy, destroy
from orchestration.cluster.spec import ClusterSpec

__all__ = ["connect", "ClusterLab", "RemoteAgent", "TIME_KEYS", "shift_times",
           "uncertainty_s"]

# the keys of the agents' messages and half records that hold wall-clock instants (s)
TIME_KEYS = ("t", "t0", "t_start", "t_end", "t_first_byte", "t_sent", "t_acked")


def connect(cluster: ClusterSpec, source: str) -> dict[str, Control]:
    """A Control per machine (in order), host keys checked against the cluster's
    HostTrust (orchestration.cluster.control). Raises LabError naming ``source``, the key
    ``cluster.machines[i]`` and the machine for the first that cannot be reached
    (HostKeyRefused, exit 2, for one whose host key is not trusted; the connections made so
    far are closed); creates nothing on any machine."""
    trust = host_trust(cluster, source)
    out: dict[str, Control] = {}
    for i, m in enumerate(cluster.machines):
        try:
            out[m.name] = Control(m, trust)
        except LabError as exc:  # HostKeyRefused stays one (exit 2)
            for c in out.values():
                c.close()
            raise type(exc)(f"{source}: cluster.machines[{i}]: {exc}") from None
    return out


def shift_times(msg: dict[str, Any], by_s: float) -> dict[str, Any]:
    """``msg`` with every :data:`TIME_KEYS` number (at its top level and in each of its
    ``records``) moved by ``by_s`` seconds. Pure (a new mapping)."""

    def one(d: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v + by_s if k in TIME_KEYS and isinstance(v, int | float)
                and not isinstance(v, bool) else v for k, v in d.items()}

    out = one(msg)
    if isinstance(msg.get("records"), list):
        out["records"] = [one(r) if isinstance(r, dict) else r for r in msg["records"]]
    return out


def uncertainty_s(before: Offset, after: Offset | None) -> float:
    """The error bound of a time corrected with ``before``'s offset (s): half its sample's
    round trip (RFC 5905's bound), plus the drift to ``after`` (|after - before|) and half
    ``after``'s round trip; without ``after`` (a lost machine) only the first term."""
    if after is None:
        return before.delay_s / 2
    return max(before.delay_s / 2, abs(after.offset_s - before.offset_s) + after.delay_s / 2)


def _encode(msg: Mapping[str, Any]) -> bytes:
    return (json.dumps(msg, separators=(",", ":")) + "\n").encode()


class RemoteAgent:
    """An agent running on a machine over one SSH channel, with the Popen methods the
    controller uses (``poll``, ``wait``, ``kill``, ``returncode``; ``pid`` is None: the
    process is the machine's, registered there). The channel's stdout goes to the
    controller's socket ``sock_path`` and back (times moved by ``offset_s``, module
    docstring); its stderr, and any line of stdout that is not JSON, to ``log``."""

    def __init__(self, control: Control, command: Sequence[str], sock_path: str,
                 log: Any, offset_s: float) -> None:
        self.args, self.pid, self.returncode = list(command), None, None
        self.offset_s = offset_s
        self.log = os.fdopen(os.dup(log.fileno()), "wb") if log is not None else None
        self._log_lock = threading.Lock()
        transport = control.client.get_transport()
        if transport is None or not transport.is_active():
            raise LabError(f"machine {control.machine.name}: SSH connection lost")
        try:
            self.chan = transport.open_session(timeout=15)
            self.chan.exec_command(shlex.join(self.args))
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(sock_path)
        except (OSError, EOFError, paramiko_errors()) as exc:
            raise LabError(f"machine {control.machine.name}: starting {shlex.join(self.args)}"
                           f": {type(exc).__name__}: {exc}") from None
        self._threads = [threading.Thread(target=f, daemon=True)
                         for f in (self._to_agent, self._from_agent, self._stderr)]
        for t in self._threads:
            t.start()

    def _write_log(self, data: bytes) -> None:
        if self.log is not None:
            with self._log_lock:
                self.log.write(data)
                self.log.flush()

    def _to_agent(self) -> None:
        try:
            for line in self.sock.makefile("rb"):
                msg = json.loads(line)
                if msg.get("type") == "start":
                    msg["t0"] = msg["t0"] + self.offset_s  # onto the machine's clock
                self.chan.sendall(_encode(msg))
        except (OSError, ValueError, EOFError):
            pass
        finally:
            with contextlib.suppress(OSError, EOFError):
                self.chan.shutdown_write()

    def _from_agent(self) -> None:
        try:
            for line in self.chan.makefile("rb"):
                try:
                    msg = json.loads(line)
                except ValueError:
                    self._write_log(line)
                    continue
                self.sock.sendall(_encode(shift_times(msg, -self.offset_s)))
        except (OSError, EOFError):
            pass
        finally:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)

    def _stderr(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            for line in self.chan.makefile_stderr("rb"):
                self._write_log(line)

    def poll(self) -> int | None:
        """The exit status of ``aitb exec`` there (the agent's), -1 for a channel closed
        without one; None while it runs."""
        if self.returncode is None and self.chan.exit_status_ready():
            self.returncode = self.chan.recv_exit_status()
            self._finish()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit status; raises subprocess.TimeoutExpired after ``timeout``."""
        if not self.chan.status_event.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        code = self.poll()
        assert code is not None
        return code

    def kill(self) -> None:
        """Close the channel: the agent reads end of file on its control channel and ends
        (the machine's teardown ends it by pid if it did not)."""
        self.chan.close()
        self.poll()

    def _finish(self) -> None:
        """The agent has ended: forward what it still said, then end the join. The thread
        towards the agent waits on the controller's socket, which the controller closes only
        after every agent was reaped; the socket is shut down here, so that thread ends now
        (joining it first cost its whole join timeout per agent)."""
        to_agent, *from_agent = self._threads
        for t in from_agent:  # the channel's end of file came before its exit status
            if t is not threading.current_thread():
                t.join(timeout=5)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        if to_agent is not threading.current_thread():
            to_agent.join(timeout=5)
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.log is not None:
            with self._log_lock:
                self.log.close()
                self.log = None


@dataclasses.dataclass
class ClusterLab:
    """The parts of ``plan`` on the machines of ``cluster`` placed by ``where`` (node ->
    machine), run id ``run_id`` (machine k's part: ``run_id`` + k), over ``controls``."""

    plan: LabPlan
    cluster: ClusterSpec
    where: dict[str, str]
    run_id: str
    controls: dict[str, Control]
    probe_interval_s: float = 5.0
    probe_timeout_s: float = 30.0
    deployed: Deployed | None = None
    after: dict[str, Offset] = dataclasses.field(default_factory=dict)
    lost: dict[str, str] = dataclasses.field(default_factory=dict)
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    teardown_errors: dict[str, str] = dataclasses.field(default_factory=dict)
    agents: list[tuple[str, RemoteAgent]] = dataclasses.field(default_factory=list)
    _stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    _watch: threading.Thread | None = None

    def up(self) -> None:
        """Deploy every part and measure the clock offsets; starts the watchdog. Raises
        LabError naming the machine; a failed deploy destroys the parts it made."""
        t = time.monotonic()
        try:
            self.deployed = deploy(self.plan, self.where, self.cluster, self.run_id,
                                   self.controls, list(self.cluster.aitb),
                                   parallel=self.cluster.deploy == "parallel")
        except LabError:
            made = Deployed({m.name: f"{self.run_id}{k}"
                             for k, m in enumerate(self.cluster.machines)}, {}, {})
            destroy(made, self.controls, list(self.cluster.aitb))  # unknown run ids: refused
            raise
        self.timings["up_s"] = time.monotonic() - t
        self.timings.update(self.deployed.timings_s)
        self._watch = threading.Thread(target=self._watchdog, daemon=True)
        self._watch.start()

    # -- what the runner's replay uses of a lab --------------------------------------------
    def popen(self, node: str, argv: Sequence[str], stdout: Any = None, stderr: Any = None,
              **_kw: Any) -> RemoteAgent:
        """Start the agent ``argv`` (the controller's: ``... --control PATH --node NODE``)
        for ``node`` on its machine (module docstring). Raises LabError for a lost machine."""
        assert self.deployed is not None
        machine = self.where[node]
        if machine in self.lost:
            raise LabError(f"machine {machine} lost: {self.lost[machine]}")
        argv = list(argv)
        i = argv.index("--control")
        sock_path, argv[i + 1] = argv[i + 1], "-"
        command = [*self.cluster.aitb, "exec", self.deployed.run_ids[machine], node, "--",
                   *argv]
        agent = RemoteAgent(self.controls[machine], command, sock_path, stderr or stdout,
                            self.deployed.offsets[machine].offset_s)
        self.agents.append((machine, agent))
        return agent

    def popen_host(self, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """A helper of the controller here (none in cluster runs: they start by sleep, not
        by the starters, whose sockets cannot cross machines); dies with its thread."""
        for key in ("pdeathsig", "record", "node"):
            kw.pop(key, None)
        return spawn(list(argv), pdeathsig=signal.SIGKILL, **kw)

    def check_delay_lines(self) -> None:
        """Raises LabError naming every machine lost so far (the runner calls this after
        each workload group)."""
        if self.lost:
            raise LabError(self.lost_message())

    def describe(self) -> dict[str, Any]:
        """Every machine's ``aitb topo inspect --json`` (interfaces, qdisc counters), the
        nodes of the lab only (not the proxies of cut links), with ``machine`` per node.
        Raises LabError naming a machine that fails."""
        assert self.deployed is not None
        nodes: dict[str, Any] = {}
        live = [(name, rid) for name, rid in self.deployed.run_ids.items()
                if name not in self.lost]

        def inspect(item: tuple[str, str]) -> dict[str, Any]:
            name, rid = item
            return json.loads(self.controls[name].check(
                [*self.cluster.aitb, "topo", "inspect", rid, "--json"], timeout_s=120))

        for (name, _), out in zip(live, fan_out(inspect, live, inline_single=True),
                                  strict=True):  # every machine at once
            for node, info in out["nodes"].items():
                if self.where.get(node) == name:
                    nodes[node] = {**info, "machine": name}
        return {"run_id": self.run_id, "lab": self.plan.name, "nodes": nodes}

    # -- teardown ------------------------------------------------------------------------
    def down(self) -> dict[str, str]:
        """Stop the watchdog, close the agents' channels, measure the offsets again and
        destroy the part of every machine not lost; machine -> error text (empty: ok)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.join(timeout=self.probe_timeout_s + 5)
        for _, agent in self.agents:
            agent.kill()
        if self.deployed is None:
            return {}
        for name, c in self.controls.items():  # a machine may have gone since the last probe
            if name not in self.lost and (why := _probe(c, self.probe_timeout_s)) is not None:
                self._lose(name, why)
        live = {k: c for k, c in self.controls.items() if k not in self.lost}
        self.measure_after()
        part = Deployed({k: v for k, v in self.deployed.run_ids.items() if k in live},
                        self.deployed.nodes, self.deployed.offsets)
        for name, err in destroy(part, live, list(self.cluster.aitb)).items():
            if err:
                self.teardown_errors[name] = err
        return dict(self.teardown_errors)

    def measure_after(self) -> None:
        """Measure the clock offset of every live machine not yet measured after the run
        (the observers' data, merged before teardown, are then corrected for the drift); a
        failure is a teardown error of that machine."""
        for name, c in self.controls.items():
            if name in self.lost or name in self.after:
                continue
            try:
                self.after[name] = c.clock_offset()
            except Exception as exc:  # noqa: BLE001 - reported at teardown, which goes on
                self.teardown_errors[name] = f"clock offset after the run: {exc}"

    def drift(self, name: str) -> tuple[float, float]:
        """Machine ``name``'s drift rate (s per s, 0.0 until measured after) and the driver's
        time (s) of its offset before the run (orchestration.cluster.control.drift_rate)."""
        assert self.deployed is not None
        before = self.deployed.offsets[name]
        return drift_rate(before, self.after.get(name)), before.t_s or 0.0

    def lost_message(self) -> str:
        """One sentence naming the lost machines and why."""
        return "; ".join(f"machine {m} lost mid-run: {why}" for m, why in self.lost.items()) \
            + "; the other machines' parts were torn down"

    def record(self) -> dict[str, Any]:
        """The manifest's ``cluster``: per machine its run id, nodes, the SSH host key used
        (type, SHA256 fingerprint, trusted by known_hosts or trust_on_first_use, the file;
        Control.host_key), clock offset before and
        after (offset_s, delay_s, samples) and the uncertainty (s); lost machines; the bring-up
        time; teardown errors."""
        d = self.deployed
        machines = {}
        for k, m in enumerate(self.cluster.machines):
            before = d.offsets.get(m.name) if d else None
            after = self.after.get(m.name)
            machines[m.name] = {
                "run_id": f"{self.run_id}{k}", "ssh": m.ssh, "underlay": m.underlay_ip,
                "nodes": sorted(n for n, w in self.where.items() if w == m.name),
                "host_key": getattr(self.controls.get(m.name), "host_key", None),
                "clock": None if before is None else {
                    "before": dataclasses.asdict(before),
                    "after": dataclasses.asdict(after) if after else None,
                    "uncertainty_s": uncertainty_s(before, after),
                    "drift_ppm": drift_rate(before, after) * 1e6,
                    "corrected_with": "before",
                    "observed_corrected_with": "before+drift"}}
        for name, secs in (d.part_s.items() if d else ()):
            machines[name]["deploy_s"] = secs
        return {"machines": machines, "lost": dict(self.lost), "timings_s": dict(self.timings),
                "deploy": self.cluster.deploy,
                "underlay": dict(d.underlay) if d else {},
                "cut_links": list(d.cut_links) if d else [],
                "teardown_errors": dict(self.teardown_errors)}

    def _watchdog(self) -> None:
        while not self._stop.wait(self.probe_interval_s):
            for name, c in self.controls.items():
                if name in self.lost:
                    continue
                why = _probe(c, self.probe_timeout_s)
                if why is not None:
                    self._lose(name, why)

    def _lose(self, name: str, why: str) -> None:
        """Machine ``name`` is lost: its SSH connection is closed, so every wait on one of
        its channels (an agent starting, its control channel) ends at once."""
        self.lost[name] = why
        transport = self.controls[name].client.get_transport()
        if transport is not None:
            transport.close()
        for machine, agent in self.agents:
            if machine == name:
                agent.kill()


def _probe(c: Control, timeout_s: float) -> str | None:
    """None if the machine runs ``true`` within ``timeout_s`` over a new channel, else why
    not."""
    try:
        transport = c.client.get_transport()
        if transport is None or not transport.is_active():
            return "SSH connection closed"
        chan = transport.open_session(timeout=timeout_s)
        try:
            chan.exec_command("true")
            if not chan.status_event.wait(timeout_s):
                return f"no answer over SSH within {timeout_s:g} s"
            return None
        finally:
            chan.close()
    except Exception as exc:  # noqa: BLE001 - any failure to reach it means it is lost
        return f"SSH: {type(exc).__name__}: {exc}"
