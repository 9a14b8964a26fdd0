"""``Lab``: realise a :class:`~models.plan.LabPlan` as namespaces, veths, bridges,
routes and tc, hold it, and tear it down (also on errors and SIGINT/SIGTERM). Needs root.

    with Lab(plan) as lab:                       # up(): ~1 s for 256 hosts (see bench/)
        lab.run("h1", ["ping", "-c1", "198.18.0.2"])
        server = lab.popen("h2", ["iperf3", "-s", "-1"])
        lab.set_shaping("h1-s1", "a_to_b", Shaping(rate_bps=10**8))
    # down(): processes ended by pid, namespaces deleted, registry removed
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from models.errors import CommandError, LabError
from models.lifeline import spawn
from models.plan import LabPlan
from models.shaping import Shaping
from testbed import delay as delay_backends
from testbed.apps import launch as apps
from testbed.containers import hosts as containers
from testbed.delay import native
from testbed.delay.nfqueue import choose, linecpu
from testbed.host import kernel
from testbed.lab import realise, signals, verify
from testbed.lab.clean import TeardownReport, raise_failures, teardown
from testbed.lab.layout import WIRE_NODE, Layout, make_layout
from testbed.lab.realise import NodeIO
from testbed.lab.registry import DEFAULT_STATE_DIR, Registry, pid_start_time, unknown_name
from testbed.live import faults, reshape
from testbed.ns import netns, procs, sysctl, sysctl_probe
from testbed.ovs import datapath as ovs_datapath
from testbed.ovs import lab as ovs_lab
from testbed.ovs import settle as ovs_settle
from testbed.routing import frr, load_balance, source_routing
from testbed.tc import ecn_marker
from testbed.tc.objects import DirectionRecipe

__all__ = ["Lab", "new_run_id", "missing_kernel_features"]

STP_CONVERGE_S = 10.0


def new_run_id() -> str:
    """A fresh run id: 6 random hex characters."""
    return secrets.token_hex(3)


def missing_kernel_features(layout: Layout | LabPlan) -> list[str]:
    """The qdisc kinds (and ``ifb``; ``nfqueue`` for a native delay line this host cannot
    run) a lab of this plan needs that this kernel lacks, sorted. ``auto`` delay lines are
    resolved first (:func:`testbed.delay.nfqueue.choose.resolve_here`: native where netem is
    missing), so a kernel without netem lacks nothing for them. Probes the kernel once per
    process in a throwaway namespace (needs root)."""
    if isinstance(layout, LabPlan):
        layout = make_layout(choose.resolve_here(layout), "probe0")
    kinds = set().union(*(r.kinds() for r in layout.recipes.values()))
    if any(r.ifb for r in layout.recipes.values()):
        kinds.add("ifb")
    native = any(r.delay_line == "native" for r in layout.recipes.values())
    return sorted(kernel.missing_features(kinds)
                  + ([choose.NATIVE_FEATURE] if native and not choose.native_available() else []))


class Lab:
    """A lab of ``plan`` in run ``run_id`` (new random one if None), state under ``state_dir``.

    wire_packets: MSS-sized packets on every link (no GSO super-packets; exact packet counts
    in buffers and netem, more CPU); None decides from the plan
    (:func:`testbed.lab.layout.needs_wire_packets`). A later :meth:`set_shaping` does not change
    it: pass True when packet buffers may be added later.

    line_cpu: a CPU given to the native delay line alone (None: shared): its helpers run
    pinned there, spinning before every release, and every lab interface's receive
    processing (RPS, ``net.core.rps_default_mask``) goes to the other CPUs. Each verdict runs
    the rest of its packet's path inside the helper's call, so on a shared CPU a helper
    carrying 1 Gbit/s of MTU packets released them 40-260 us late (p50) and 0.3-8 ms (p99);
    dedicated, 11-24 us and 0.19-0.63 ms on a quiet 2-core VM (bench/delayline_accuracy.py
    --isolate; bench/README.md has the table). It costs the
    lab that CPU: while the lab is up this process's threads, and what it starts, run on the
    others (:mod:`testbed.delay.nfqueue.linecpu` lists what that covers). LabError (exit code
    2) if this process may not run on it, no other CPU remains or the kernel cannot steer
    receive processing (:func:`testbed.delay.nfqueue.linecpu.check_line_cpu`), or (at up) if
    no direction of the lab uses the native line.

    Side effects (up): namespaces ``aitb-<run_id>-<node>``, veths, bridges, IFBs, qdiscs,
    routes, sysctls inside them; ``state_dir/<run_id>/{registry.jsonl,plan.json}``; for hosts
    with an image, a container of that name labelled with the run id (and a dockerd if none
    ran), see :mod:`testbed.containers.hosts`.
    """

    # where a native delay line holds packets whose receiver's PREROUTING it would otherwise
    # use: "wire", in the lab's wire namespace between the link's two ends (every end's
    # capture and receive stamp then sees the link as a cable: departure at the sender,
    # arrival after the delay at the receiver); "receiver": in the receiver's PREROUTING,
    # after its kernel stamped the packet's arrival (bench/delayline_accuracy.py compares
    # them; the mininet backend, whose links Mininet makes, keeps it)
    line_hold = "wire"

    def __init__(self, plan: LabPlan, run_id: str | None = None,
                 state_dir: Path = DEFAULT_STATE_DIR, wire_packets: bool | None = None,
                 line_cpu: int | None = None) -> None:
        self.plan = plan
        self.line_cpu = None if line_cpu is None else linecpu.check_line_cpu(line_cpu)
        self._line_cpu_saved: dict[int, set[int]] | None = None  # threads' affinity before
        self.run_id = run_id or new_run_id()
        self.registry = Registry(state_dir, self.run_id)
        self.layout: Layout = self._make_layout(plan, wire_packets)
        self.io: dict[str, NodeIO] = {}
        self.children: dict[int, subprocess.Popen[Any]] = {}
        self.timings: dict[str, float] = {}
        self.started: list[tuple[int, int]] = []  # (pid, start time) of every process, kept
        self.attached = False
        # written with the owner record when the registry is created (before any object
        # exists), e.g. the run directory whose manifest `aitb clean` marks killed
        self.owner_records: list[dict[str, Any]] = []
        # the owner created the registry (owner records included) before up(), so that no
        # instant leaves what it made before the lab unregistered (`aitb run`: its run
        # directory); up() then only writes the plan
        self.registry_created = False
        # teardown keeps the owner records (Registry.spend) for the owner to remove once it
        # has written its final status (`aitb run`: so a SIGKILL between the two is seen)
        self.keep_owner = False
        self._signals: Any = None
        self.ovs: dict[str, Any] = {}  # OVS switch -> its daemons (testbed.ovs.switches)
        self.ovs_rules: dict[str, Any] = {}
        self.ovs_controller: str | None = None  # "host:port" of an OpenFlow controller
        self.ovs_datapaths: dict[str, str] = {}  # OVS switch -> "system"/"netdev" (chosen)
        self.ovs_restored: dict[str, list[str]] = {}  # ingress qdiscs vswitchd removed
        # one netlink request at a time per socket: the trace player (testbed/live/trace_player.py)
        # changes shaping from its thread while the runner reads counters (inspect.describe)
        self.netlink_lock = threading.RLock()
        self.down_links: set[str] = set()  # links set down by testbed/live/faults.py, not yet up
        self.ecn_markers: dict[tuple[str, str], Any] = {}  # testbed/tc/ecn_marker.py
        self.frr: dict[str, Any] = {}  # router -> its FRR daemons (testbed/routing/frr.py)

    # lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Lab:
        self._signals = signals.raising()
        self._signals.__enter__()
        try:
            self.up()
            return self  # inside the try: a signal before the with body starts is caught here
        except BaseException as exc:
            # up() removes what it made when it fails; a signal that lands after up() returned
            # finds a complete lab (its registry exists) that no __exit__ would remove
            if self.registry.dir.exists():
                report, _ = self._teardown_held()
                if report.failures:
                    exc.add_note("teardown after the interrupt also failed:\n  "
                                 + "\n  ".join(report.failures))
            self._close_signals()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.down()
        finally:
            self._close_signals()

    def _close_signals(self) -> None:
        if self._signals is not None:
            self._signals.__exit__(None, None, None)
            self._signals = None

    def up(self) -> None:
        """Create and configure everything, then read it back. On any failure (or signal)
        tears down what was made and re-raises. Raises LabError naming what failed, and
        :class:`testbed.lab.signals.LabInterrupted` for SIGINT/SIGTERM under
        :func:`testbed.lab.signals.raising` even where a library wrapped or dropped it."""
        self._check_frr()
        self._resolve_delay_lines()
        self._check_line_cpu()
        self._check_kernel()
        sysctl_probe.check_plan(self.plan)  # node sysctls a namespace here cannot take
        refused = load_balance.problems(self.plan)
        if refused:
            raise LabError("; ".join(refused))
        self.ovs_datapaths = ovs_datapath.choose_for_lab(self.plan)
        if self.registry_created:
            self.registry.write_plan(self.plan)
        else:
            self.registry.create(self.plan, self.owner_records)
        try:
            if self.line_cpu is not None:
                self.registry.append([{"kind": "line_cpu", "cpu": self.line_cpu}])
                self._line_cpu_saved = linecpu.keep_off(self.line_cpu)
            self._build()
            late = signals.swallowed()  # an interrupt some library caught and dropped
            if late is not None:
                raise late
        except BaseException as exc:
            report, _ = self._teardown_held()  # a second Ctrl-C must not cut the cleanup short
            # an interrupt raised inside a library that wrapped it (pyroute2's decoder) or
            # that left it half-decoded data (a ValueError further on) is reported as such
            real = signals.interruption(exc)
            if report.failures:
                real.add_note("teardown after the failure also failed:\n  "
                              + "\n  ".join(report.failures))
            if real is not exc:
                raise real from exc
            raise

    def _step(self, name: str, t0: float) -> float:
        now = time.perf_counter()
        self.timings[name] = now - t0
        return now

    def _build(self) -> None:
        t = time.perf_counter()
        names = [self.layout.nodes[n.name].netns for n in self.plan.nodes]
        wire = self.layout.nodes.get(WIRE_NODE)
        self.registry.append([{"kind": "netns", "node": n.name, "name": nm}
                              for n, nm in zip(self.plan.nodes, names, strict=True)]
                             + ([{"kind": "netns", "node": WIRE_NODE, "name": wire.netns}]
                                if wire else []))
        made: dict[str, tuple[int, Any]] = {}
        boxes = [n for n in self.plan.nodes if n.image]  # container hosts
        try:
            netns.create_many([self.layout.nodes[n.name].netns for n in self.plan.nodes
                               if not n.image] + ([wire.netns] if wire else []), out=made)
            if boxes:
                containers.start_containers(boxes, self.layout, self.registry, self.children,
                                            made)
        finally:
            by_ns = {lay.netns: name for name, lay in self.layout.nodes.items()}
            self.io.update({by_ns[nm]: NodeIO(fd, s) for nm, (fd, s) in made.items()})
        t = self._step("namespaces", t)
        ipv6 = sysctl.lab_uses_ipv6(self.plan)
        sysctl.apply_all([(self.io[n.name].fd, n.name,
                           *sysctl.node_sysctls(n, ipv6, self.line_cpu))
                          for n in self.plan.nodes]
                         + ([(self.io[WIRE_NODE].fd, WIRE_NODE,
                              *sysctl.wire_sysctls(self.line_cpu))] if wire else []))
        t = self._step("sysctls", t)
        self.registry.append({"kind": "ifb", "node": r.rx_node, "ifname": r.ifb}
                             for r in self.layout.recipes.values() if r.ifb)
        realise.create_links(self.plan, self.layout, self.io)
        if wire:
            realise.configure_wire(self.layout, self.io[WIRE_NODE])
        t = self._step("links", t)
        self._start_ovs()  # before tc: OVS resets the qdiscs of a port it adds
        t = time.perf_counter()
        links_of = realise.links_by_node(self.plan)
        for n in self.plan.nodes:
            realise.configure_node(self._static(n), self.layout, self.io[n.name], links_of)
        load_balance.apply(self)
        source_routing.apply(self)
        t = self._step("configure", t)
        self._wait_stp()
        self.ovs_restored = ovs_settle.settle(self)  # vswitchd may reset ingress qdiscs
        self._apply_delay_lines()
        ecn_marker.apply(self)
        self.verify()
        t = self._step("verify", t)
        if self.plan.routing is not None:
            frr.start(self)
            frr.wait_converged(self)
            self._step("frr", t)

    def _static(self, n: Any) -> Any:
        """``n`` with the routes the lab installs itself: none for a router FRR routes."""
        return dataclasses.replace(n, routes=()) if frr.routed_by_frr(self.plan, n) else n

    def _check_frr(self) -> None:
        """A ``routing: frr`` plan on a machine without the FRR daemons it needs: refused
        before anything exists, naming the plan's file and key."""
        if self.plan.routing is None:
            return
        missing = frr.missing_daemons(self.plan.routing)
        if missing:
            raise LabError(f"{self.plan.source}: routing: frr ({self.plan.routing.protocol}) "
                           f"needs FRRouting, but {', '.join(missing)} is missing: install "
                           "Debian's frr package (scripts/setup.sh does, with its system "
                           "service off)")

    def watch_convergence(self, began: float, on_done: Any) -> Any:
        """For a ``routing: frr`` lab, a :class:`testbed.routing.frr.ConvergenceWatch` of the event
        that began at ``began`` (``time.monotonic()``), calling ``on_done(result)`` when
        every router's table is stable again; None for a statically routed lab."""
        if self.plan.routing is None or not self.frr:
            return None
        return frr.ConvergenceWatch(self, began, on_done)

    def _start_ovs(self) -> None:
        """Daemons, bridge and rules of the OVS switches (none: nothing happens)."""
        t = time.perf_counter()
        self.ovs, self.ovs_rules = ovs_lab.bring_up(self)
        if self.ovs:
            self._step("ovs", t)

    def _resolve_delay_lines(self) -> None:
        """``auto`` delay lines become netem or native for this host (the plan, its layout
        and plan.json say which); a native line's impossible keys are refused here, before
        anything exists."""
        plan = choose.resolve_here(self.plan)
        if plan is not self.plan:
            self.plan = plan
            self.layout = self._make_layout(plan, self.layout.wire_packets)
        native.check_plan(self)

    def _make_layout(self, plan: LabPlan, wire_packets: bool | None) -> Layout:
        """The layout of ``plan``; with :attr:`line_hold` ``wire``, every link with a
        native line that would sit in a receiver's PREROUTING runs through the wire
        namespace (:func:`testbed.delay.native.wired_links`)."""
        layout = make_layout(plan, self.run_id, wire_packets)
        if self.line_hold == "wire":
            layout.add_wires(plan, native.wired_links(plan, layout))
        return layout

    def delay_lines(self) -> dict[str, dict[str, Any]]:
        """``"<link>/<direction>"`` -> ``{"backend": netem|native, ...}`` for every direction
        with a delay line; native ones add node, hook and interface of the line and, while
        the lab runs, the helper's counters (:func:`testbed.delay.native.stats`)."""
        out: dict[str, dict[str, Any]] = {k: {"backend": v}
                                          for k, v in choose.lines_of(self.plan).items()}
        for key, rec in native.stats(self, fresh=False).items():
            out.setdefault(key, {"backend": "native"}).update(
                {k: rec[k] for k in ("node", "hook", "dev")})
        return out

    def check_delay_lines(self) -> None:
        """Raise LabError naming link and direction of every native delay line whose helper
        died (by pid and exit status): that direction has dropped every packet since."""
        native.check_alive(self)

    def dead_delay_lines(self) -> list[tuple[str, str]]:
        """(node, message naming link and direction) of every native delay line whose helper
        died; [] while all run (reads /proc, no netlink: cheap enough to poll each second)."""
        return [(d.node, d.why) for d in native.dead_lines(self)]

    def _check_line_cpu(self) -> None:
        if self.line_cpu is not None and not any(
                r.delay_line == native.NAME for r in self.layout.recipes.values()):
            err = LabError(f"delay_line_cpu {self.line_cpu}: no link direction of lab "
                           f"{self.plan.name} uses the native delay line here (each delay "
                           "is netem's, or there is none): nothing would use that CPU")
            err.exit_code = 2
            raise err

    def _check_kernel(self) -> None:
        missing = missing_kernel_features(self.layout)
        if missing:
            links = sorted({ln for (ln, _), r in self.layout.recipes.items()
                            if r.kinds() & set(missing)})
            raise LabError(f"this kernel lacks {', '.join(missing)} (needed by link(s) "
                           f"{', '.join(links[:5])}{' ...' if len(links) > 5 else ''}); "
                           + kernel.VM_HINT)

    def _wait_stp(self) -> None:
        if any(n.stp for n in self.plan.nodes if n.kind == "switch"):
            reshape.wait_stp(self, STP_CONVERGE_S)

    def verify(self, nodes: Sequence[str] | None = None) -> None:
        """Read the kernel's state of ``nodes`` (default all) back and raise one LabError
        naming node, interface and what differs from the plan."""
        problems: list[str] = []
        links_of = realise.links_by_node(self.plan)
        for n in self.plan.nodes:
            if nodes is None or n.name in nodes:
                problems += verify.check_node(links_of.get(n.name, []), self.layout,
                                              self._static(n), self.node_io(n.name).sock)
        problems += load_balance.check(self, nodes)
        problems += source_routing.check(self, nodes)
        problems += frr.check_alive(self)
        problems += ovs_lab.check_all(self, {s: d for s, d in self.ovs.items()
                                             if nodes is None or s in nodes}, self.ovs_rules)
        problems += [p for r in self._delay_lines() if nodes is None or r.rx_node in nodes
                     for p in delay_backends.backend(r.delay_line or "").verify(self, r)]
        verify.raise_if(problems, f"lab {self.plan.name} (run {self.run_id})")

    def _apply_delay_lines(self) -> None:
        """What each delay-line backend needs beyond tc objects (native: helpers, rules)."""
        for r in self._delay_lines():
            delay_backends.backend(r.delay_line or "").apply(self, r)

    def _teardown_delay_lines(self) -> list[str]:
        """Undo :meth:`_apply_delay_lines`; failures as sentences."""
        return [f for r in self._delay_lines()
                for f in delay_backends.backend(r.delay_line or "").teardown(self, r)]

    def _delay_lines(self) -> list[DirectionRecipe]:
        """The recipes with a delay line (its backend in :mod:`testbed.delay`)."""
        return [r for r in self.layout.recipes.values() if r.delay_line is not None]

    def down(self) -> TeardownReport:
        """End processes, delete namespaces (with their veths and IFBs), remove the run
        directory; continue past failures, then raise one LabError listing them all.
        SIGINT/SIGTERM arriving meanwhile are held and re-raised afterwards."""
        report, got = self._teardown_held()
        raise_failures(report)
        if got:
            raise signals.LabInterrupted(got[0])
        return report

    def _teardown_held(self) -> tuple[TeardownReport, list[int]]:
        """:meth:`_teardown` with SIGINT/SIGTERM held; returns (report, signals that arrived).
        A signal that lands while the hold is being installed (the raising handler is still in
        place for a few bytecodes) raises LabInterrupted before the teardown began: it is
        recorded and the teardown still runs, exactly once."""
        arrived: list[int] = []
        report: TeardownReport | None = None
        while report is None:
            try:
                with signals.held() as got:
                    report = self._teardown()
                arrived += got
            except signals.LabInterrupted as exc:
                arrived.append(exc.signum)
        return report, arrived

    def _teardown(self) -> TeardownReport:
        t = time.perf_counter()
        failures = self._teardown_delay_lines()
        ecn_marker.close_all(self)
        self.release()
        report = teardown(self.registry, self.children, self.keep_owner)
        report.failures[:0] = failures
        self.children = {}
        if self._line_cpu_saved is not None:
            linecpu.restore(self._line_cpu_saved)
            self._line_cpu_saved = None
        self._step("down", t)
        return report

    @classmethod
    def attach(cls, run_id: str, state_dir: Path = DEFAULT_STATE_DIR) -> Lab:
        """The lab of an existing run (from its plan.json), for inspect/exec/destroy from
        another process. Namespaces are opened on first use. Raises LabError (exit code 2)
        for an unknown run id, listing the known ones."""
        known = Registry.runs(state_dir)
        if run_id not in known:
            raise unknown_name(f"unknown run id {run_id!r}; known runs: "
                               f"{', '.join(known) or 'none'}")
        reg = Registry(state_dir, run_id)
        lab = cls(reg.plan(), run_id, state_dir)
        # as deployed (not checked again: destroy must work from any process)
        lab.line_cpu = next((r["cpu"] for r in reg.records() if r.get("kind") == "line_cpu"),
                            None)
        lab.attached = True
        return lab

    def release(self) -> None:
        """Close this process's handles on the namespaces without tearing anything down."""
        for io in self.io.values():
            io.sock.close()
            os.close(io.fd)
        self.io = {}

    def detach(self) -> None:
        """Leave the lab up after this process exits (``aitb topo deploy``): ``aitb clean``
        without a run id then keeps it; ``aitb topo destroy RUN_ID`` removes it. Native
        delay-line helpers stop watching this process (they would die with it)."""
        native.detach(self)
        self.registry.append([{"kind": "detached"}])

    # use -------------------------------------------------------------------------------
    def netns_name(self, node: str) -> str:
        """The namespace name of ``node`` (for ``ip netns exec``)."""
        return self.layout.node(node).netns

    def node_io(self, node: str) -> NodeIO:
        """The namespace fd and rtnetlink socket of ``node``; raises LabError (exit code 2)
        naming the known nodes for an unknown one, or if its namespace does not exist."""
        self.layout.node(node)
        if node not in self.io and self.attached:
            fd = netns.open_fd(self.layout.nodes[node].netns)
            self.io[node] = NodeIO(fd, netns.socket_in(fd))
        if node not in self.io:
            raise unknown_name(f"node {node} has no namespace in run {self.run_id} (not up?)")
        return self.io[node]

    def _fd(self, node: str) -> int:
        return self.node_io(node).fd

    def read_sysctl(self, node: str, key: str) -> str:
        """The value of sysctl ``key`` (``net.ipv4.tcp_congestion_control``) inside ``node``'s
        namespace, as the kernel reports it now (stripped). Raises LabError for an unknown
        node or a key the kernel lacks."""
        try:
            return sysctl.read(self._fd(node), key)
        except OSError as exc:
            raise LabError(f"cannot read sysctl {key} in node {node}: {exc.strerror}") from None

    def popen(self, node: str, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``node``'s namespace (``kw`` go to subprocess.Popen); the
        process is in the registry (pid, start time) before it execs (models.lifeline.spawn:
        held by its exec wrapper until this process has registered it, so no instant at
        which a SIGKILL of this process leaves it unregistered, and no Python code between
        fork and exec) and is ended by :meth:`down` or ``aitb clean``. Raises CommandError
        naming argv if it cannot be started."""
        fd = self._fd(node)
        entry = {"kind": "process", "node": node, "argv": list(argv)}
        try:
            proc = spawn(argv, register=self._registrar(entry),
                         popen=lambda a, **k: procs.popen_in(fd, a, **k), **kw)
        except OSError as exc:
            raise CommandError(argv, None, exc.strerror or str(exc)) from None
        self._keep(proc)
        return proc

    def _registrar(self, entry: Mapping[str, Any]) -> Any:
        """``register(pid, start)`` for :func:`models.lifeline.spawn`: ``entry`` plus the
        child's pid and start time, appended durably to the registry."""
        def register(pid: int, start: int | None) -> None:
            self.registry.append([{**entry, "pid": pid, "start": start}])
        return register

    def _keep(self, proc: subprocess.Popen[Any]) -> None:
        start = pid_start_time(proc.pid)
        self.children[proc.pid] = proc
        self.started.append((proc.pid, -1 if start is None else start))

    def popen_host(self, argv: Sequence[str], node: str = "(root namespace)",
                   pdeathsig: int | None = None, record: Mapping[str, Any] | None = None,
                   **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` from the calling thread (in its namespace: the root one, unless
        ``pass_fds`` hands the child a namespace to enter), registered before it execs like
        :meth:`popen` under ``node``, with ``record``'s keys added (e.g. a shorter ``argv``, a
        ``role``); ``pdeathsig``: also PR_SET_PDEATHSIG (see models.lifeline). Ended by
        :meth:`down` or ``aitb clean`` by pid and start time. Raises CommandError naming
        argv if it cannot be started."""
        if isinstance(argv, str):
            raise TypeError("argv must be a list of strings, not a shell string")
        entry = {"kind": "process", "node": node, "argv": list(argv), **(record or {})}
        # SIGINT/SIGTERM held from the fork until the child is registered and kept (an
        # interrupt between the two would leave a registered child this process never reaps).
        # Raised right after.
        with signals.held() as got:
            try:
                proc = spawn(argv, register=self._registrar(entry), pdeathsig=pdeathsig, **kw)
            except OSError as exc:
                raise CommandError(argv, None, exc.strerror or str(exc)) from None
            self._keep(proc)
        if got:
            raise signals.LabInterrupted(got[0])
        return proc

    def run(self, node: str, argv: Sequence[str], timeout_s: float = 30.0
            ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in ``node`` to completion (text output captured); raise CommandError
        naming node and argv on a non-zero exit status or after ``timeout_s``."""
        proc = self.popen(node, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return procs.run_checked(proc, argv, f"node {node}", timeout_s)

    def exec_app(self, node: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
                 log: Path | None = None, workdir: str | None = None) -> apps.AppProcess:
        """Start an application on ``node``: ``docker exec`` in a container host (argv from
        the image), else argv from the host's file system in the node's namespace; output to
        ``log``; ended by :meth:`down` by pid. See :func:`testbed.apps.launch.start_app`
        (errors)."""
        return apps.start_app(self, node, argv, env, log, workdir)

    def exec_apps(self, requests: Sequence[apps.AppRequest]) -> list[apps.AppProcess]:
        """Start several applications (one :class:`testbed.apps.launch.AppRequest` each) as close
        together as possible, like :meth:`exec_app`; see :func:`testbed.apps.launch.start_apps`."""
        return apps.start_apps(self, requests)

    def set_links(self, names: Sequence[str], up: bool, node: str | None = None
                  ) -> dict[str, Any]:
        """Take links ``names`` down (one veth end each, its peer losing the carrier;
        ``node``: prefer that node's ends, a node_down's) or ``up`` (both ends); on up,
        restore the plan's routes through them and read them back. Returns what was done;
        raises LabError naming the link or node. See :func:`testbed.live.faults.set_links`."""
        return faults.set_links(self, names, up, node)

    def prepare_links(self, names: Sequence[str], up: bool, node: str | None = None
                      ) -> faults.LinkChange:
        """:meth:`set_links` made ready ahead of its instant (names checked, messages
        encoded); its ``apply()`` sends it (testbed/live/trace_player.py prepares each event's
        links before waiting for its time). Raises LabError naming an unknown link. See
        :func:`testbed.live.faults.prepare_links`."""
        return faults.prepare_links(self, names, up, node)

    def set_shaping(self, link_name: str, direction: str, shaping: Shaping,
                    read_back: bool = True) -> None:
        """Change the shaping of ``direction`` (``a_to_b``/``b_to_a``) of link ``link_name``
        on the live lab: in place where the qdisc structure stays, else replaced; then read
        back and record plan.json (``read_back=False`` trusts the kernel's acks and skips
        both: for many changes a second, read back once at the end, as
        testbed/live/trace_player.py does); a native delay line gets the new parameters by
        SIGHUP. Raises LabError naming the link (unknown link/direction, kernel refusal, a
        delay line into a user-space OVS switch: :func:`testbed.ovs.datapath.check_delay_line`,
        a change the native line cannot make: :func:`testbed.delay.native.check_change`,
        or its helper refusing the new parameters: it keeps the old ones)."""
        link = next((lk for lk in self.plan.links if lk.name == link_name), None)
        rx = (link.b.node if direction == "a_to_b" else link.a.node) if link else None
        line = self.layout.lines.get((link_name, direction))
        if line == native.NAME and link is not None and shaping.needs_netem:
            native.check_change(self, link, direction, shaping)  # refused: nothing changed
        elif shaping.needs_netem and self.ovs_datapaths.get(rx or "") == ovs_datapath.USERSPACE:
            ovs_datapath.check_delay_line(rx or "", [link_name])
        with self.netlink_lock:
            reshape.set_shaping(self, link_name, direction, shaping, read_back)
        if line == native.NAME:
            native.update(self, link_name, direction)
