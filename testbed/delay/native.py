"""The ``native`` delay line: aitb's NFQUEUE helper (:mod:`testbed.delay.nfqueue`), for kernels
without sch_netem.

Per namespace that holds a line (:mod:`testbed.delay.nfqueue.labline` says which: the lab's
wire namespace for most, :func:`wired_links`), one helper process serves all its queues;
iptables/ip6tables rules in that namespace's mangle table hand the packets to it. Nothing is
made in the root namespace: the rules go with the lab's namespaces, the helpers are registered
(pid and start time) the moment they exist, ended by pid at teardown (``aitb clean`` finds them
in the registry) and killed by PR_SET_PDEATHSIG when their controller ends. The helper is
started from the thread that brings the lab up (PDEATHSIG fires when the parent *thread* ends)
and enters its namespace itself (``--netns /proc/self/fd/N``), so containers' and plain
namespaces work alike.

Without ``--queue-bypass`` the kernel drops what no helper takes: a dead helper is a dead
link, never an undelayed one; :func:`check_alive` names link and direction.

A live change (:func:`check_change`, :func:`update`) from a process that attached to the lab
(``Lab.attach``: a cluster machine's event player, orchestration/events/cluster_part.py)
first adopts the helpers the lab's registry lists (pid and start time, their parameter and
stderr files in the registry directory, the queue parameters of the lab's plan), so the
SIGHUP and its acknowledgement work as from the process that brought the lab up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from models.errors import LabError
from testbed.delay.nfqueue.labline import (
    WIRE_NODE,
    LinePlace,
    by_node,
    places,
    plan_problems,
    problems,
    queue_params,
    restore_text,
    wants_wire,
)
from testbed.delay.nfqueue.rules import QueueParams, helper_argv, params_file_text
from testbed.delay.nfqueue.stats import HelperStats, read_stats
from testbed.lab.registry import pid_alive, pid_start_time
from testbed.ns import netns, sysctl
from testbed.ns.procs import end_process

if TYPE_CHECKING:
    from models.plan import LabPlan, LinkPlan
    from models.shaping import Shaping
    from testbed.lab.handle import LabHandle
    from testbed.tc.objects import DirectionRecipe, TcObject

__all__ = ["NAME", "CAPABILITIES", "ingress", "apply", "verify", "teardown", "stats",
           "check_alive", "dead_lines", "DeadLine", "check_plan", "check_change", "update",
           "detach", "wired_links", "NICE", "RT_PRIO", "SPIN_US", "STATS_INTERVAL_MS"]

NAME = "native"
CAPABILITIES: tuple[str, ...] = ()  # iptables NFQUEUE + the helper: testbed.delay.nfqueue.choose
# SCHED_FIFO: on a loaded 2-core box (load average 16 while tests ran) a helper at nice -10
# still released packets 10-40 ms late; at a real-time priority it preempts the traffic
# generators the moment a release is due. It spins SPIN_US before a release (the helper's
# default is 150 us) and only while releases are at least 10 x that apart (the helper's
# SPIN_GAP), so spinning takes at most a tenth of a core: at 1 Gbit/s of MTU packets (a
# release every ~12 us) the earlier 20 us spin kept it on a core all the time. 50 us covers
# a SCHED_FIFO wake-up here (p99 ~30 us at load 8): release error p50 ~1 us for sparse
# packets (pings) where 20 us gave 12-17 us. The kernel's RT throttling
# (sched_rt_runtime_us, 95% by default) still bounds it.
RT_PRIO = 10
SPIN_US = 50.0
NICE = 0
STATS_INTERVAL_MS = 1000
STOP_GRACE_S = 5.0
_RTM_GETLINK = 18  # linux/rtnetlink.h (testbed.ns.links imports the layout, which imports us)
_BRIDGE_NF_ON = ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables")


@dataclass
class _Helper:
    node: str
    lines: list[LinePlace]
    queues: list[QueueParams]
    stats_path: Path
    params_path: Path
    stderr_path: Path
    proc: subprocess.Popen[Any] | None = None
    start: int | None = None
    final: HelperStats | None = None
    exit_code: int | None = None


@dataclass
class _State:
    helpers: dict[str, _Helper] = field(default_factory=dict)
    started: bool = False
    stopped: bool = False
    after_line: dict[str, int] = field(default_factory=dict)  # wire port -> tx_dropped, last read


_STATE: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()


def _state(lab: LabHandle) -> _State:
    return _STATE.setdefault(lab, _State())


def ingress(shaping: Shaping, mtu: int, rx: tuple[str, str], ifb: str
            ) -> tuple[str | None, tuple[TcObject, ...]]:
    """No tc objects and no IFB: the line is an iptables rule and a helper (:func:`apply`)."""
    return None, ()


def _native_keys(lab: LabHandle) -> list[tuple[str, str]]:
    return [k for k, r in lab.layout.recipes.items() if r.delay_line == NAME]


def _places(lab: LabHandle) -> list[LinePlace]:
    return places(lab.plan, _native_keys(lab), lab.layout.wires)


def wired_links(plan: LabPlan, layout: Any) -> list[str]:
    """The links of ``plan`` (a resolved LabPlan) to run through the lab's wire namespace
    (``layout``: its testbed.lab.layout.Layout): every link with a direction whose native
    line would otherwise hold packets in its receiver's PREROUTING
    (:func:`testbed.delay.nfqueue.labline.wants_wire`), after that kernel stamped their
    arrival for captures and SO_TIMESTAMP. Pure."""
    links = {lk.name: lk for lk in plan.links}
    out: list[str] = []
    for (name, d), r in layout.recipes.items():
        if r.delay_line == NAME and name not in out and wants_wire(plan, links[name], d):
            out.append(name)
    return out


def _shaping(lab: LabHandle, link: str, direction: str) -> tuple[Shaping, int]:
    lk = next(lk for lk in lab.plan.links if lk.name == link)
    return getattr(lk, direction), lk.mtu


def check_plan(lab: LabHandle) -> None:
    """Raise one LabError listing every native direction the line cannot do (refused keys,
    memory cap, both ends OVS), before anything exists
    (:func:`testbed.delay.nfqueue.labline.plan_problems`)."""
    out = plan_problems(lab.plan)
    if out:
        raise LabError("; ".join(out))


def _params(lab: LabHandle, p: LinePlace) -> QueueParams:
    shaping, mtu = _shaping(lab, p.link, p.direction)
    return queue_params(shaping, mtu, p.queue_num, seed=1 + p.queue_num,
                        before_queue=p.hook == "out")


def _run_in(lab: LabHandle, node: str, argv: list[str], text: str) -> None:
    fd = lab.node_io(node).fd

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, input=text, capture_output=True, text=True, timeout=30,
                              check=False)
    r = netns.run_in(fd, run)
    if r.returncode != 0:
        raise LabError(f"node {node}: {' '.join(argv)} refused the delay-line rules: "
                       f"{r.stderr.strip()}")


def _start_helper(lab: LabHandle, h: _Helper) -> None:
    from testbed.delay.nfqueue.build import helper_path
    fd = lab.node_io(h.node).fd
    h.params_path.write_text(params_file_text(h.queues))
    argv = helper_argv(str(helper_path()), os.getpid(), h.queues, str(h.stats_path),
                       f"/proc/self/fd/{fd}", STATS_INTERVAL_MS, str(h.params_path),
                       spin_us=SPIN_US, rt_prio=RT_PRIO, nice=NICE, cpu=lab.line_cpu,
                       spin_dense=lab.line_cpu is not None)
    with open(h.stderr_path, "wb") as err:  # from this (the lab's) thread: see module doc
        # registered before it execs (held by its wrapper: no unregistered instant)
        h.proc = lab.popen_host(argv, node=h.node, record={"role": "delay-line"},
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, pass_fds=(fd,))
    h.start = pid_start_time(h.proc.pid)


def _wait_bound(h: _Helper, timeout_s: float = 10.0) -> None:
    """The helper writes its first stats file once every queue is bound."""
    deadline = time.monotonic() + timeout_s
    while not h.stats_path.exists():
        if h.proc is not None and h.proc.poll() is not None:
            raise LabError(f"node {h.node}: the delay-line helper exited with status "
                           f"{h.proc.returncode} at start: {_stderr(h)}")
        if time.monotonic() > deadline:
            raise LabError(f"node {h.node}: the delay-line helper bound no queue within "
                           f"{timeout_s:g} s: {_stderr(h)}")
        time.sleep(0.01)


def _stderr(h: _Helper) -> str:
    try:
        return h.stderr_path.read_text(errors="replace").strip()[-2000:] or "(no output)"
    except FileNotFoundError:
        return "(no output)"


def _start_all(lab: LabHandle) -> None:
    st = _state(lab)
    st.started = True
    lines = _places(lab)
    kinds = {n.name: (n.kind, n.datapath) for n in lab.plan.nodes}
    for node, ls in by_node(lines).items():
        tag = f"delayline-{node}"
        h = _Helper(node, ls, [_params(lab, p) for p in ls],
                    lab.registry.dir / f"{tag}.json", lab.registry.dir / f"{tag}.params",
                    lab.registry.dir / f"{tag}.stderr")
        st.helpers[node] = h
        _start_helper(lab, h)  # registered before the next one starts
    for h in st.helpers.values():
        _wait_bound(h)
        if any(p.physdev for p in h.lines) and kinds.get(h.node) == ("switch", "bridge"):
            sysctl.apply_all([(lab.node_io(h.node).fd, h.node,
                               {k: "1" for k in _BRIDGE_NF_ON}, {})])
        text = restore_text(h.lines, lab.run_id)
        for tool in ("iptables-restore", "ip6tables-restore"):
            _run_in(lab, h.node, [tool, "-w", "--noflush"], text)


def apply(lab: LabHandle, recipe: DirectionRecipe) -> None:
    """Start every helper and add every rule of the lab (on the first call; later calls find
    them running). Raises LabError naming node and what failed."""
    if not _state(lab).started:
        _start_all(lab)


def _line_of(lab: LabHandle, recipe: DirectionRecipe) -> tuple[_Helper, LinePlace] | None:
    key = next((k for k, r in lab.layout.recipes.items() if r is recipe), None)
    for h in _state(lab).helpers.values():
        for p in h.lines:
            if (p.link, p.direction) == key:
                return h, p
    return None


def verify(lab: LabHandle, recipe: DirectionRecipe) -> list[str]:
    """The helper of this direction runs (pid and start time)."""
    found = _line_of(lab, recipe)
    if found is None:
        return []
    return [d.why for d in _dead([found])]


class DeadLine(NamedTuple):
    """A native line whose helper died: the helper's ``node``, the line's ``link`` and
    ``direction`` (a_to_b, b_to_a), and ``why`` (one sentence naming all of them, the pid
    and the exit status)."""

    node: str
    link: str
    direction: str
    why: str


def _dead(lines: list[tuple[_Helper, LinePlace]]) -> list[DeadLine]:
    out = []
    for h, p in lines:
        if h.proc is None or pid_alive(h.proc.pid, h.start) and h.proc.poll() is None:
            continue
        why = (f"link {p.link} {p.direction}: the delay-line helper (pid {h.proc.pid}, node "
               f"{h.node}) died (exit status {h.proc.poll()}); NFQUEUE drops every packet no "
               f"helper takes, so this direction carried nothing since (the helper's stderr: "
               f"{_stderr(h)})")
        out.append(DeadLine(h.node, p.link, p.direction, why))
    return out


def dead_lines(lab: LabHandle) -> list[DeadLine]:
    """Every native line of ``lab`` whose helper died while the lab ran; [] once the lab
    stopped its helpers. Reads /proc only (by pid and start time): cheap enough to poll
    about once a second."""
    st = _state(lab)
    if st.stopped:
        return []
    return _dead([(h, p) for h in st.helpers.values() for p in h.lines])


def check_alive(lab: LabHandle) -> None:
    """Raise LabError naming link and direction of every line whose helper died."""
    out = dead_lines(lab)
    if out:
        raise LabError("; ".join(d.why for d in out))


class _Adopted:
    """A helper another process started (the lab's bring-up), as its registry record names
    it (pid, start time): the part of a Popen that a live change uses (:func:`_sighup`,
    :func:`_reply`, :func:`_dead`), by pid and start time."""

    def __init__(self, pid: int, start: int | None) -> None:
        self.pid, self.start, self.returncode = pid, start, None

    def poll(self) -> int | None:
        # no start time (the helper had already exited when it was registered): the pid
        # alone may be another process's by now, so it counts as gone and is never signalled
        if self.returncode is None and (self.start is None
                                        or not pid_alive(self.pid, self.start)):
            self.returncode = -1  # not its child: its real status is its parent's
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            raise LabError(f"the delay-line helper (pid {self.pid}) is gone")
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:  # it exited since poll: an error of the change, as above
            self.returncode = -1
            raise LabError(f"the delay-line helper (pid {self.pid}) is gone") from None


def _adopt(lab: LabHandle) -> None:
    """A lab attached from another process than the one that brought it up (``lab.attached``:
    a cluster machine's event player, testbed/live/trace_process.py) knows no helper yet: take
    every one its registry lists (role ``delay-line``, by node) with the lines and queue
    parameters of its plan, so that a live change reaches it by SIGHUP as from the lab's own
    process. Once per lab; nothing for a lab this process brought up."""
    st = _state(lab)
    if st.started or st.stopped or not getattr(lab, "attached", False):
        return
    st.started = True
    recs = {r["node"]: r for r in lab.registry.records()
            if r.get("kind") == "process" and r.get("role") == "delay-line" and r.get("pid")}
    for node, ls in by_node(_places(lab)).items():
        rec = recs.get(node)
        if rec is None:
            continue
        tag = f"delayline-{node}"
        h = _Helper(node, ls, [_params(lab, p) for p in ls],
                    lab.registry.dir / f"{tag}.json", lab.registry.dir / f"{tag}.params",
                    lab.registry.dir / f"{tag}.stderr")
        h.proc = _Adopted(int(rec["pid"]), rec.get("start"))  # type: ignore[assignment]
        h.start = rec.get("start")
        st.helpers[node] = h


def _find(lab: LabHandle, link: str, direction: str) -> tuple[_Helper, int, LinePlace] | None:
    _adopt(lab)
    for h in _state(lab).helpers.values():
        for i, p in enumerate(h.lines):
            if (p.link, p.direction) == (link, direction):
                return h, i, p
    return None


def check_change(lab: LabHandle, link: LinkPlan, direction: str, shaping: Shaping) -> None:
    """Refuse (LabError naming link, direction and key) a live change the native line cannot
    make: a refused key or the memory cap (:func:`testbed.delay.nfqueue.labline.problems`),
    corrupt switched on or off (the helper's copy mode is fixed at its start), or a delay
    line for a direction that had none at bring-up (it would need a new rule and queue)."""
    out = problems(link, direction, shaping)
    if (shaping.corrupt_pct > 0) != (getattr(link, direction).corrupt_pct > 0):
        out.append(f"link {link.name} {direction}: the native delay line cannot switch corrupt "
                   "on or off live (its helper copies whole packets only when it corrupts "
                   "from bring-up); give the link a corrupt value from the start")
    if _find(lab, link.name, direction) is None:
        out.append(f"link {link.name} {direction}: no native delay line runs for it (it had "
                   "no delay or impairment at bring-up); adding one to a live lab is not "
                   "supported: give it a delay from the start (a change to 0 keeps the line)")
    if out:
        raise LabError("; ".join(out))


def update(lab: LabHandle, link: str, direction: str) -> None:
    """Send the new shaping of (``link``, ``direction``) (already in ``lab.plan``) to its
    helper (SIGHUP); nothing for a direction without a line (see :func:`check_change`).
    Raises LabError when the helper refuses the new parameters (it keeps the old ones and
    says why on stderr)."""
    found = _find(lab, link, direction)
    if found is not None:
        _sighup(lab, *found)


def _sighup(lab: LabHandle, h: _Helper, i: int, p: LinePlace) -> None:
    shaping, mtu = _shaping(lab, p.link, p.direction)
    new = queue_params(shaping, mtu, p.queue_num, h.queues[i].seed, before_queue=p.hook == "out")
    queues = h.queues[:i] + [new] + h.queues[i + 1:]
    mark = len(_stderr_bytes(h))
    tmp = h.params_path.with_suffix(".tmp")
    tmp.write_text(params_file_text(queues))
    os.replace(tmp, h.params_path)
    assert h.proc is not None
    h.proc.send_signal(signal.SIGHUP)
    err = _reply(h, mark)
    if err:
        raise LabError(f"link {p.link} {p.direction}: the delay-line helper refused the new "
                       f"parameters and keeps the old ones: {err}")
    h.queues = queues


def _stderr_bytes(h: _Helper) -> bytes:
    try:
        return h.stderr_path.read_bytes()
    except FileNotFoundError:
        return b""


def _reply(h: _Helper, mark: int, timeout_s: float = 5.0) -> str:
    """The helper acknowledges a SIGHUP on stderr with a line ``params: ok`` or
    ``params: refused: WHY``; '' when ok."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = _stderr_bytes(h)[mark:].decode(errors="replace")
        for line in new.splitlines():
            if "params: refused:" in line:
                return line.split("params: refused:", 1)[1].strip()
            if "params: ok" in line:
                return ""
        if h.proc is not None and h.proc.poll() is not None:
            return f"the helper exited with status {h.proc.returncode}: {_stderr(h)}"
        time.sleep(0.005)
    return f"no answer within {timeout_s:g} s"


def detach(lab: LabHandle) -> None:
    """Let every helper outlive this process (SIGUSR2: PDEATHSIG off, parent no longer
    watched), for a lab left up on purpose; they are still ended by pid from the registry.
    Raises LabError naming the node whose helper did not confirm."""
    for h in _state(lab).helpers.values():
        if h.proc is None or h.proc.poll() is not None:
            continue
        mark = len(_stderr_bytes(h))
        h.proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 5.0  # bound only: the helper answers within ms
        while b"detached" not in _stderr_bytes(h)[mark:]:
            if time.monotonic() > deadline or h.proc.poll() is not None:
                raise LabError(f"node {h.node}: the delay-line helper (pid {h.proc.pid}) did "
                               f"not detach: {_stderr(h)}")
            time.sleep(0.005)


def stats(lab: LabHandle, fresh: bool = True) -> dict[str, dict[str, Any]]:
    """Per line ``"<link>/<direction>"``: node, hook, interface, the helper's pid, CPU
    seconds and its queue's counters and added-delay percentiles (microseconds;
    :class:`testbed.delay.nfqueue.stats.QueueStats`), and ``after_line_dropped``: packets
    it released that the receiving veth's backlog refused (the wire port's tx_dropped, since
    the lab came up; 0 for a line outside the wire). ``fresh``: ask running helpers for a new
    snapshot first (SIGUSR1). After :func:`teardown`: the helpers' final stats."""
    out: dict[str, dict[str, Any]] = {}
    st = _state(lab)
    if not st.stopped:
        _read_after_line(lab)
    for h in st.helpers.values():
        snap = h.final or _snapshot(h, fresh)
        for p in h.lines:
            q = snap.queues.get(p.queue_num) if snap else None
            out[f"{p.link}/{p.direction}"] = {
                "link": p.link, "direction": p.direction, "node": h.node, "hook": p.hook,
                "dev": p.dev, "queue_num": p.queue_num,
                "pid": h.proc.pid if h.proc else None, "exit_code": h.exit_code,
                "helper_cpu_s": snap.cpu_s if snap else None,
                "helper_uptime_s": snap.uptime_s if snap else None,
                # microseconds inside each verdict sendto (the kernel re-injecting)
                "helper_verdict_send": dataclasses.asdict(snap.verdict_send)
                if snap and snap.verdict_send else None,
                "queue": q.raw if q else None,
                # released, then refused by the receiver's backlog (the wire's port towards it)
                "after_line_dropped": st.after_line.get(_exit_port(lab, p), 0)
                if p.hook == "wire" else 0}
    return out


def _exit_port(lab: LabHandle, p: LinePlace) -> str:
    return lab.layout.wires[p.link].port_to(p.direction)


def _read_after_line(lab: LabHandle) -> None:
    """Read the tx_dropped of every wire port (a released packet the receiving veth's backlog
    refused is counted there, on the wire's side) into the lab's state; nothing for a lab
    without a wire or whose wire is not open here. Reads netlink under the lab's lock."""
    if not lab.layout.wires or WIRE_NODE not in lab.io:
        return
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

    from testbed.ns.nl import dump
    lock = getattr(lab, "netlink_lock", None) or contextlib.nullcontext()
    with lock:
        msgs = dump(lab.io[WIRE_NODE].sock, ifinfmsg(), _RTM_GETLINK, f"node {WIRE_NODE}")
    for m in msgs:
        stats = m.get_attr("IFLA_STATS64")
        if stats is not None:
            _state(lab).after_line[m.get_attr("IFLA_IFNAME")] = int(stats["tx_dropped"])


def _snapshot(h: _Helper, fresh: bool) -> HelperStats | None:
    if fresh and h.proc is not None and h.proc.poll() is None:
        try:
            before = h.stats_path.stat().st_mtime_ns
        except FileNotFoundError:
            before = 0
        h.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                if h.stats_path.stat().st_mtime_ns != before:
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.005)
    try:
        return read_stats(h.stats_path)
    except (FileNotFoundError, ValueError, KeyError):
        return None


def teardown(lab: LabHandle, recipe: DirectionRecipe) -> list[str]:
    """Stop every helper (first call): SIGTERM by pid and start time (it writes its final
    stats), SIGKILL after a grace period; keep the final stats (:func:`stats`). Returns
    failures as sentences, never raises."""
    st = _state(lab)
    if st.stopped:
        return []
    try:
        _read_after_line(lab)  # the last count, for stats() after the wire is gone
    except Exception:  # noqa: BLE001 - a count lost, teardown goes on
        pass
    st.stopped = True
    out: list[str] = []
    for h in st.helpers.values():
        if h.proc is None:
            continue
        try:
            end_process(h.proc.pid, h.start, h.proc, grace_s=STOP_GRACE_S)
            h.exit_code = h.proc.returncode
            h.final = _snapshot(h, fresh=False)
        except Exception as exc:  # noqa: BLE001 - reported, teardown goes on
            out.append(f"node {h.node}: stopping delay-line helper {h.proc.pid}: {exc}")
    return out
