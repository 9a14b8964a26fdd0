"""Does a lab fit one machine at fidelity, and how many machines does it need? Pure.

A machine's limits (:class:`Calibration`, measured by ``aitb calibrate``, orchestration/capacity/
measure.py, and stored as JSON under the state directory) against a lab's demand
(:class:`Demand`, from its :class:`LabPlan`):

- **traffic**: every host may send at its access rate at once (the worst case of collectives:
  in a ring or all-to-all every rank sends at line rate). Each bit crosses the shaped hops of
  its path; the mean count of rate-limited hops and of delayed hops over host pairs (models.paths'
  walk, sampled) turns host rates into bit-hops per second through HTB and through the delay
  line. Packets: full-MTU data segments plus one ACK per two segments (Linux delayed ACK,
  RFC 1122 section 4.2.3.2; RFC 5681 section 4.2), i.e. bits / (8 x MTU) x 1.5.
- **CPU**: cores = max(bits / bps_per_core, packets / pps_per_core) for HTB and for the delay
  line, plus the hosts' summed rate / agent_bps_per_core (the agents' own CPU per bit moved,
  measured on an unshaped path; agents per core at a lab's host rate = that / the host
  rate). The lab fits at fidelity when that is at most :data:`HEADROOM` of the machine's
  cores: the fidelity check (orchestration/fidelity/run.py) calls a run saturated at a
  95th-percentile CPU of 90%, and 20 points below that leave room for the sampler, captures
  and bursts above the mean.
- The traffic model is the worst case (every host sending at once); a workload that sends
  less (an incast into one port) needs less. Scaling rates down (an experiment's ``scale``)
  divides the traffic demand by the scale.
- **capture**: every captured interface may carry its link's rates in both directions at
  once (the same worst case), as packets (full segments plus delayed ACKs); cores =
  packets/s x the shared capturer's CPU seconds per captured packet (``capture_s_per_packet``,
  measured by ``aitb calibrate`` with testbed/capture/shared.py; bench/capture.py compares
  tcpdump's). A capture of a headers-only snap length costs per packet, not per byte.
- **bring-up**: nodes / namespaces_per_s + links / links_per_s seconds (time, not fidelity).

Machines needed = ceil(cores / (HEADROOM x cores per machine)); a cut link costs a VXLAN
tunnel (50 bytes of headers: the lab MTU on it must be the underlay MTU - 50) and its traffic
crosses the underlay.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from models.paths import PathError, PathWalker
from models.plan import LabPlan

__all__ = ["Calibration", "Demand", "Verdict", "HEADROOM", "VXLAN_OVERHEAD_BYTES",
           "CALIBRATION_FILE", "demand", "verdict", "load_calibration", "save_calibration"]

HEADROOM = 0.7  # share of a machine's cores a lab may plan to use (module docstring)
ACKS_PER_SEGMENT = 0.5  # delayed ACK: one ACK per two full segments (RFC 1122 4.2.3.2)
VXLAN_OVERHEAD_BYTES = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8 (RFC 7348 section 5)
CALIBRATION_FILE = "calibration.json"
PAIR_SAMPLE = 64  # host pairs walked for the mean hop counts (seeded; exact below this)


@dataclass(frozen=True)
class Calibration:
    """One machine's measured limits. ``cores``: logical CPUs; ``namespaces_per_s`` and
    ``links_per_s``: lab bring-up rates; ``htb_bps_per_core``/``htb_pps_per_core``: bits and
    packets per second an HTB-shaped hop moves per busy core; ``delay_bps_per_core``/
    ``delay_pps_per_core``: the same through the delay line (None: not measured here);
    ``agents_per_core``: workload agents one core carries; ``capture_s_per_packet``: CPU
    seconds the shared capturer spends per captured packet (None: not measured); ``host`` and
    ``measured_at`` (ISO UTC) say where and when."""

    host: str
    cores: int
    namespaces_per_s: float
    links_per_s: float
    htb_bps_per_core: float
    htb_pps_per_core: float
    agent_bps_per_core: float
    delay_bps_per_core: float | None = None
    delay_pps_per_core: float | None = None
    capture_s_per_packet: float | None = None
    measured_at: str = ""
    notes: str = ""


def save_calibration(cal: Calibration, path: Path) -> None:
    """Write ``cal`` as JSON to ``path`` (creating its folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(cal), indent=2) + "\n", encoding="utf-8")


def load_calibration(path: Path) -> Calibration:
    """Read a calibration file. Raises ValueError naming ``path`` for a missing file, bad
    JSON, or missing or unknown keys."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no calibration; run `aitb calibrate` on this machine "
                         "first (or give --calibration FILE)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    names = {f.name for f in fields(Calibration)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{path}: unknown keys {', '.join(unknown)}")
    try:
        return Calibration(**data)
    except TypeError as exc:
        raise ValueError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class Demand:
    """What a lab asks of the machines: node, link and host counts, the hosts' summed
    access rate (bit/s), the mean rate-limited and delayed hops per host-to-host path, the
    mean MTU (bytes), the agents it runs, and the captured interfaces with the bit rate
    their links may carry (both directions, summed; unshaped directions count 0)."""

    nodes: int
    links: int
    hosts: int
    agents: int
    host_rate_bps: float
    htb_hops: float
    delay_hops: float
    mtu_bytes: float
    captured: int = 0
    captured_bps: float = 0.0

    @property
    def htb_bps(self) -> float:
        """Bit-hops per second through HTB rate limiters."""
        return self.host_rate_bps * self.htb_hops

    @property
    def delay_bps(self) -> float:
        """Bit-hops per second through delay lines."""
        return self.host_rate_bps * self.delay_hops

    def pps(self, bps: float) -> float:
        """Packets per second for ``bps`` of data: full segments plus delayed ACKs."""
        return bps / (8 * self.mtu_bytes) * (1 + ACKS_PER_SEGMENT)


def _host_rate(plan: LabPlan, host: str) -> float:
    """The host's egress rate (bit/s): its first shaped link direction, else 0."""
    for lk in plan.links:
        for end, shaping in ((lk.a, lk.a_to_b), (lk.b, lk.b_to_a)):
            if end.node == host and shaping.rate_bps:
                return float(shaping.rate_bps)
    return 0.0


def _pairs(hosts: list[str], seed: int) -> list[tuple[str, str]]:
    everything = [(a, b) for a in hosts for b in hosts if a != b] \
        if len(hosts) <= 9 else None
    if everything is not None:
        return everything
    rng = random.Random(seed)
    out = []
    while len(out) < PAIR_SAMPLE:
        a, b = rng.sample(hosts, 2)
        out.append((a, b))
    return out


def _mean_hops(plan: LabPlan, hosts: list[str]) -> tuple[float, float]:
    """(mean rate-limited hops, mean delayed hops) per host pair, over each pair's first
    path (models.paths; pairs sampled with seed 0 beyond 9 hosts)."""
    walker = PathWalker(plan)
    address = {}
    for lk in plan.links:
        for end in (lk.a, lk.b):
            if end.ipv4 is not None:
                address.setdefault(end.node, end.ipv4.ip)
    shaped, delayed, n = 0, 0, 0
    for a, b in _pairs([h for h in hosts if h in address], 0):
        try:
            hops = walker.paths(a, address[b])[0]
        except (PathError, IndexError):
            continue
        shaped += sum(1 for h in hops if h.shaping.rate_bps)
        delayed += sum(1 for h in hops if h.shaping.delay_s > 0 or h.shaping.loss_pct > 0)
        n += 1
    return (shaped / n, delayed / n) if n else (0.0, 0.0)


def demand(plan: LabPlan, agents: int | None = None,
           captured: Sequence[tuple[str, str]] = ()) -> Demand:
    """The demand of ``plan`` (module docstring); ``agents``: the workload's agents (default:
    one per host); ``captured``: the (node, ifname) a capture records."""
    hosts = [n.name for n in plan.nodes if n.kind == "host"]
    htb_hops, delay_hops = _mean_hops(plan, hosts) if len(hosts) > 1 else (0.0, 0.0)
    mtu = sum(lk.mtu for lk in plan.links) / len(plan.links) if plan.links else 1500.0
    ends = {(e.node, e.ifname): lk for lk in plan.links for e in (lk.a, lk.b)}
    links = [ends[c] for c in captured if c in ends]
    captured_bps = float(sum((lk.a_to_b.rate_bps or 0) + (lk.b_to_a.rate_bps or 0)
                             for lk in links))
    return Demand(len(plan.nodes), len(plan.links), len(hosts),
                  len(hosts) if agents is None else agents,
                  sum(_host_rate(plan, h) for h in hosts), htb_hops, delay_hops, mtu,
                  len(links), captured_bps)


@dataclass(frozen=True)
class Verdict:
    """The planner's answer: cores the lab needs (per mechanism and in all), whether it fits
    one machine at fidelity, the machines it needs, bring-up seconds on one machine, and
    reasons (what is not measured, what dominates)."""

    cores_htb: float
    cores_delay: float
    cores_agents: float
    agents_per_core: float
    cores_needed: float
    cores_per_machine: int
    fits_one: bool
    machines: int
    bringup_s: float
    reasons: tuple[str, ...] = ()
    cores_capture: float = 0.0


def _cores(bps: float, pps: float, per_core_bps: float, per_core_pps: float) -> float:
    return max(bps / per_core_bps, pps / per_core_pps)


def verdict(d: Demand, cal: Calibration) -> Verdict:
    """Fit ``d`` to machines like the calibrated one (module docstring for the model)."""
    reasons = []
    htb = _cores(d.htb_bps, d.pps(d.htb_bps), cal.htb_bps_per_core, cal.htb_pps_per_core)
    delay = 0.0
    if d.delay_bps > 0:
        if cal.delay_bps_per_core and cal.delay_pps_per_core:
            delay = _cores(d.delay_bps, d.pps(d.delay_bps), cal.delay_bps_per_core,
                           cal.delay_pps_per_core)
        else:
            reasons.append("the lab delays traffic but the calibration has no delay-line "
                           "figures: its cost is not counted")
    agents = d.host_rate_bps / cal.agent_bps_per_core
    capture = 0.0
    if d.captured:
        if cal.capture_s_per_packet:
            capture = d.pps(d.captured_bps) * cal.capture_s_per_packet
        else:
            reasons.append("the lab is captured but the calibration has no capture figure: "
                           "its cost is not counted")
    total = htb + delay + agents + capture
    budget = HEADROOM * cal.cores
    machines = max(1, math.ceil(total / budget))
    if d.host_rate_bps == 0 and d.hosts:
        reasons.append("no host link is rate-limited: traffic runs as fast as the CPU "
                       "allows and cannot be emulated at a planned rate")
    top = max((("HTB shaping", htb), ("the delay line", delay), ("agents", agents),
               ("capture", capture)), key=lambda kv: kv[1])
    reasons.append(f"{top[0]} dominates ({top[1]:.1f} of {total:.1f} cores; budget "
                   f"{budget:.1f} per machine = {HEADROOM:.0%} of {cal.cores})")
    bringup = d.nodes / cal.namespaces_per_s + d.links / cal.links_per_s
    per_core = cal.agent_bps_per_core / (d.host_rate_bps / d.hosts) \
        if d.hosts and d.host_rate_bps else math.inf
    return Verdict(htb, delay, agents, per_core, total, cal.cores, machines == 1, machines, bringup,
                   tuple(reasons), capture)
