"""``aitb calibrate``: measure this machine's limits for the capacity planner (needs root;
creates two small labs owner-marked with their run ids and tears them down).

1. **bring-up** of a single switch with ``hosts`` hosts: namespaces per second (its
   ``namespaces`` + ``sysctls`` steps, testbed.lab.lab.Lab.timings) and links per second (its
   ``links`` + ``configure`` + ``verify`` steps).
2. **HTB**: one iperf3 TCP flow between two hosts through a 10 Gbit/s HTB on each of the 2
   hops (faster than one flow goes here: the CPU is the limit); bit-hops and packets
   (every HTB qdisc's sent packets) per second, divided by the busy cores (/proc/stat over the
   flow, all CPUs, less the share busy in the second before: proc(5)).
3. **agents**: aitb's own agents move one 256 MiB transfer over an unshaped path;
   bits per second per busy core.

4. **delay line**: the HTB flow again with 1 ms of delay on every direction through the native
   delay line (testbed/delay/nfqueue): its own cost is what the busy cores exceed the HTB cost by
   (:func:`delay_per_core`). Left None (with a note) when the native line cannot run here.
5. **capture**: the HTB flow again with the shared capturer (testbed/capture/shared.py) on
   every interface of the lab, headers only: its own CPU seconds (user + system, from the
   capturers themselves) per packet it wrote.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from models.owned import owned_tempdir
from orchestration.capacity.model import Calibration

__all__ = ["calibrate", "busy_cores"]

Progress = Callable[[str], None]


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies over all CPUs from /proc/stat's first line (proc(5))."""
    parts = [float(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = parts[3] + parts[4]  # idle + iowait
    return sum(parts) - idle, sum(parts)


def _share(before: tuple[float, float], after: tuple[float, float]) -> float:
    busy, total = after[0] - before[0], after[1] - before[1]
    return busy / total if total > 0 else 0.0


def baseline(seconds: float = 1.0) -> float:
    """The CPU busy share (0..1, all CPUs) of whatever else runs, over ``seconds`` now."""
    before = _cpu_times()
    time.sleep(seconds)
    return _share(before, _cpu_times())


def busy_cores(before: tuple[float, float], after: tuple[float, float], cores: int,
               base: float = 0.0) -> float:
    """Cores kept busy between two :func:`_cpu_times` readings beyond the ``base`` share
    measured before (others' load on a shared machine), at least 0.05 so that a ratio never
    divides by zero. The subtraction assumes the others' load stays as it was: calibrate
    on an idle machine for figures to plan with."""
    return max(0.05, (_share(before, after) - base) * cores)


def delay_per_core(bps: float, pps: float, busy: float, htb_bps_core: float,
                   htb_pps_core: float, hops: int = 2) -> tuple[float, float] | None:
    """(bit/s, packet/s) the delay line moves per core of its own: a flow of ``bps`` and
    ``pps`` over ``hops`` shaped and delayed hops kept ``busy`` cores busy, of which the HTB
    figures account for max(bps x hops / htb_bps_core, pps / htb_pps_core). None when the
    rest is not positive (the delay line cost nothing measurable)."""
    rest = busy - max(bps * hops / htb_bps_core, pps / htb_pps_core)
    if rest <= 0:
        return None
    return bps * hops / rest, pps / rest


def _plan(hosts: int, rate: str | None, delay: str | None = None):
    import topologies

    params = {"hosts": hosts, **({"link": "cal"} if rate else {})}
    profile = {"rate": rate, "buffer": "1000p", **({"delay": delay} if delay else {})}
    doc = {"name": "calibrate", "generator": {"name": "single_switch", "params": params},
           **({"delay_line": "native"} if delay else {}),
           **({"profiles": {"cal": profile}} if rate else {})}
    return topologies.resolve(topologies.parse_topology(doc, "<calibrate>"), "<calibrate>")


def _address(plan, node: str) -> str:
    return next(str(e.ipv4.ip) for lk in plan.links for e in (lk.a, lk.b)
                if e.node == node and e.ipv4 is not None)


def _bringup(hosts: int, state_dir: Path) -> tuple[float, float]:
    from testbed.lab.lab import Lab

    plan = _plan(hosts, None)
    with Lab(plan, state_dir=state_dir) as lab:
        t = lab.timings
    ns = t.get("namespaces", 0) + t.get("sysctls", 0)
    links = t.get("links", 0) + t.get("configure", 0) + t.get("verify", 0)
    return len(plan.nodes) / max(ns, 1e-6), len(plan.links) / max(links, 1e-6)


def _htb_packets(lab, plan) -> int:
    total = 0
    for n in plan.nodes:
        out = lab.run(n.name, ["tc", "-s", "-j", "qdisc", "show"]).stdout
        total += sum(q.get("packets", 0) for q in json.loads(out or "[]")
                     if q.get("kind") == "htb")
    return total


def _htb(seconds: float, cores: int, state_dir: Path, delay: str | None = None
         ) -> tuple[float, float, float]:
    """(bit/s, packet/s, busy cores) of one iperf3 flow through 2 shaped hops."""
    from testbed.lab.lab import Lab

    plan = _plan(2, "10Gbit", delay)
    # wire-sized packets on every hop, as when this was first calibrated: a 1000-packet
    # buffer alone now keeps GSO (testbed/lab/layout.py needs_wire_packets), and the figures are
    # per-packet costs of wire-sized packets
    with Lab(plan, state_dir=state_dir, wire_packets=True) as lab:
        dst = _address(plan, "h2")
        srv = lab.popen("h2", ["iperf3", "-s", "-1", "-B", dst], stdout=subprocess.DEVNULL)
        base = baseline()
        p0, c0 = _htb_packets(lab, plan), _cpu_times()
        t0 = time.monotonic()
        out = lab.run("h1", ["iperf3", "-J", "-c", dst, "-t", str(seconds)],
                      timeout_s=seconds + 30).stdout
        dt_s, c1 = time.monotonic() - t0, _cpu_times()
        p1 = _htb_packets(lab, plan)
        srv.wait(timeout=10)
    bps = json.loads(out)["end"]["sum_received"]["bits_per_second"]
    return bps, (p1 - p0) / dt_s, busy_cores(c0, c1, cores, base)


def _agents(cores: int, state_dir: Path) -> float:
    from models.schedule import Group, Schedule, SendRecv
    from testbed.lab.lab import Lab
    from traffic_gen import ReplayOptions, replay
    from traffic_gen.launch import NetnsExecLauncher

    plan = _plan(2, None)
    size = 256 << 20
    sched = Schedule("calibrate", 2, {"p": Group("p", "pp", (0, 1))}, (SendRecv(0, 1, size),),
                     iterations=2)
    with Lab(plan, state_dir=state_dir) as lab, \
            owned_tempdir("cal") as tmp:
        hosts = {h: lab.netns_name(h) for h in ("h1", "h2")}
        addrs = {h: _address(plan, h) for h in hosts}
        base = baseline()
        c0, t0 = _cpu_times(), time.monotonic()
        res = replay(sched, {0: "h1", 1: "h2"}, NetnsExecLauncher(hosts), Path(tmp), addrs,
                     ReplayOptions(transfer_timeout_s=120))
        dt_s, c1 = time.monotonic() - t0, _cpu_times()
    if not res.ok:
        raise RuntimeError(f"calibration agents failed: {res.failures}")
    return size * 2 * 8 / dt_s / busy_cores(c0, c1, cores, base)


def _capture(seconds: float, state_dir: Path) -> float:
    """CPU seconds per captured packet of the shared capturer on every interface of the
    2-hop HTB lab while one iperf3 flow runs (headers only, 128-byte snap length)."""
    from testbed.capture.points import select_interfaces
    from testbed.capture.shared import SharedCapture
    from testbed.capture.tcpdump import CaptureConfig
    from testbed.lab.lab import Lab

    plan = _plan(2, "10Gbit")
    with Lab(plan, state_dir=state_dir, wire_packets=True) as lab, \
            owned_tempdir("cal") as tmp:
        dst = _address(plan, "h2")
        cap = SharedCapture(lab, Path(tmp) / "captures", select_interfaces(plan, "all"),
                            CaptureConfig(snaplen_bytes=128, engine="shared"))
        srv = lab.popen("h2", ["iperf3", "-s", "-1", "-B", dst], stdout=subprocess.DEVNULL)
        cap.start()
        try:
            lab.run("h1", ["iperf3", "-c", dst, "-t", str(seconds)], timeout_s=seconds + 30)
        finally:
            index = cap.stop()
        srv.wait(timeout=10)
    packets = sum(i["packets_captured"] or 0 for i in index["interfaces"])
    if not packets or not index.get("capture_cpu_s"):
        raise RuntimeError("the capture recorded no packets")
    return index["capture_cpu_s"] / packets


def calibrate(state_dir: Path, hosts: int = 16, seconds: float = 3.0,
              progress: Progress = lambda _m: None) -> Calibration:
    """Measure this machine (module docstring); needs root."""
    cores = os.cpu_count() or 1
    progress(f"bring-up of a {hosts}-host switch")
    ns_s, links_s = _bringup(hosts, state_dir)
    progress(f"HTB: one iperf3 flow for {seconds:g} s through 2 shaped hops")
    bps, pps, busy = _htb(seconds, cores, state_dir)
    htb_bps, htb_pps = bps * 2 / busy, pps / busy  # 2 shaped hops
    progress("delay line: the same flow with 1 ms each way on the native line")
    delay, note = None, ""
    try:
        delay = delay_per_core(*_htb(seconds, cores, state_dir, "1ms"), htb_bps, htb_pps)
    except Exception as exc:  # any failure of the optional measurement: say it, go on
        note = f"delay line not measured: {type(exc).__name__}: {str(exc)[:200]}"
    if delay is None and not note:
        note = "delay line cost below what this measurement resolves"
    progress("agents: 2 x 256 MiB over an unshaped path")
    agent_bps = _agents(cores, state_dir)
    progress(f"capture: the HTB flow for {seconds:g} s with the shared capturer on every "
             "interface")
    capture = None
    try:
        capture = _capture(seconds, state_dir)
    except Exception as exc:  # any failure of the optional measurement: say it, go on
        note = "; ".join(x for x in (note, f"capture not measured: {type(exc).__name__}: "
                                     f"{str(exc)[:200]}") if x)
    return Calibration(socket.gethostname(), cores, ns_s, links_s, htb_bps, htb_pps,
                       agent_bps, delay_bps_per_core=delay[0] if delay else None,
                       delay_pps_per_core=delay[1] if delay else None,
                       capture_s_per_packet=capture,
                       measured_at=dt.datetime.now(dt.UTC).isoformat(), notes=note)
