"""Pure builders of the delay line's command lines: iptables rules and the helper's argv.

Nothing here runs anything; every function returns argv lists (unit-testable without root).

One link direction = one NFQUEUE queue number in the namespace that *receives* the packets:
``mangle PREROUTING -i IF -j NFQUEUE --queue-num N`` (no ``--queue-bypass``: with no helper
bound the kernel drops, it never passes packets undelayed).  Every rule carries
``-m comment --comment aitb:<run_id>`` so a cleaner can find the rules of a run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DISTRIBUTIONS = ("uniform", "normal", "pareto", "paretonormal")
HOOKS = {"in": ("PREROUTING", "-i"), "out": ("POSTROUTING", "-o")}


@dataclass(frozen=True)
class QueueParams:
    """Impairments of one link direction (one NFQUEUE queue); units are in the names.

    jitter_s is the half-width for ``uniform``, the standard deviation otherwise.
    Gilbert-Elliott: ge_p_pct good->bad, ge_r_pct bad->good, ge_1h_pct loss in bad,
    ge_1k_pct loss in good (netem's gemodel p r 1-h 1-k).  reorder_pct/reorder_gap as netem's
    ``reorder PCT gap GAP`` (the packet after GAP-1 delayed ones is sent at once with PCT).
    duplicate_pct must be 0: NFQUEUE cannot emit a second copy of a packet.
    """

    queue_num: int
    delay_s: float = 0.0
    jitter_s: float = 0.0
    distribution: str = "uniform"
    reorder_allowed: bool = False  # False: release = max(previous release, arrival+delay+jitter)
    loss_pct: float = 0.0
    ge_p_pct: float = 0.0
    ge_r_pct: float = 0.0
    ge_1h_pct: float = 0.0
    ge_1k_pct: float = 0.0
    reorder_pct: float = 0.0
    reorder_gap: int = 0
    corrupt_pct: float = 0.0
    duplicate_pct: float = 0.0
    seed: int = 1
    maxlen_packets: int = 10000
    pktlog_path: str | None = None
    trace_path: str | None = None  # lines "t_offset_us delay_us loss_pct [jitter_us]"
    trace_start_realtime_ns: int = 0  # CLOCK_REALTIME of offset 0 (0: trace not started)
    trace_loop: bool = False
    trace_period_s: float = 0.0  # loop period (needed with trace_loop)

    def __post_init__(self) -> None:
        if not 0 <= self.queue_num <= 65535:
            raise ValueError(f"queue_num {self.queue_num} not in 0..65535")
        if self.delay_s < 0 or self.jitter_s < 0:
            raise ValueError("delay_s and jitter_s must be >= 0")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution {self.distribution!r} not one of {DISTRIBUTIONS}")
        for name in ("loss_pct", "ge_p_pct", "ge_r_pct", "ge_1h_pct", "ge_1k_pct",
                     "reorder_pct", "corrupt_pct", "duplicate_pct"):
            v = getattr(self, name)
            if not 0 <= v <= 100:
                raise ValueError(f"{name}={v} not in [0, 100]")
        if self.duplicate_pct:
            raise ValueError("duplicate_pct is not supported by the NFQUEUE delay line: a verdict "
                             "accepts or drops a packet but cannot emit a second copy")
        if self.trace_loop and self.trace_period_s <= 0:
            raise ValueError("trace_loop needs trace_period_s > 0")
        if self.maxlen_packets < 1:
            raise ValueError("maxlen_packets must be >= 1")

    def spec(self, live: bool = False) -> str:
        """The helper's ``--queue`` value (``live``: only what SIGHUP may change)."""
        kv = [("num", self.queue_num), ("delay_us", _us(self.delay_s)),
              ("jitter_us", _us(self.jitter_s)), ("dist", self.distribution),
              ("reorder_ok", int(self.reorder_allowed)), ("loss_pct", _g(self.loss_pct)),
              ("ge_p", _g(self.ge_p_pct)), ("ge_r", _g(self.ge_r_pct)),
              ("ge_1h", _g(self.ge_1h_pct)), ("ge_1k", _g(self.ge_1k_pct)),
              ("reorder_pct", _g(self.reorder_pct)), ("reorder_gap", self.reorder_gap),
              ("corrupt_pct", _g(self.corrupt_pct)), ("maxlen", self.maxlen_packets)]
        if not live:
            kv.append(("seed", self.seed))
            if self.pktlog_path:
                kv.append(("pktlog", self.pktlog_path))
        if self.trace_path:
            kv += [("trace", self.trace_path), ("trace_start_ns", self.trace_start_realtime_ns),
                   ("trace_loop", int(self.trace_loop))]
            if self.trace_period_s:
                kv.append(("trace_period_us", _us(self.trace_period_s)))
        for _, v in kv:
            if "," in str(v) or "=" in str(v):
                raise ValueError(f"value {v!r} may not contain ',' or '='")
        return ",".join(f"{k}={v}" for k, v in kv)


def _us(seconds: float) -> str:
    return _g(round(seconds * 1e6, 3))


def _g(x: float) -> str:
    return f"{x:.12g}"


def gemodel(p_pct: float, r_pct: float | None = None, one_minus_h_pct: float = 100.0,
            one_minus_k_pct: float = 0.0) -> dict[str, float]:
    """QueueParams fields for netem's ``loss gemodel p [r [1-h [1-k]]]`` (netem's defaults)."""
    return {"ge_p_pct": p_pct, "ge_r_pct": 100.0 - p_pct if r_pct is None else r_pct,
            "ge_1h_pct": one_minus_h_pct, "ge_1k_pct": one_minus_k_pct}


def maxlen_for_bdp(rate_bps: float, delay_s: float, mtu: int = 1500, factor: float = 2.0,
                   minimum: int = 1000) -> int:
    """Queue length (packets) holding ``factor`` x the bytes in flight on the line, counted in
    MTU-sized packets (GSO packets are larger, so this bounds the count from above)."""
    return max(minimum, math.ceil(rate_bps / 8 * delay_s / mtu * factor))


def _ns_prefix(netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns] if netns else []


def nfqueue_rule_argv(ifname: str, queue_num: int, run_id: str, netns: str | None = None,
                      ipv6: bool = False, delete: bool = False, direction: str = "in") -> list[str]:
    """iptables (or ip6tables) argv adding (``delete``: removing) the rule of one direction.

    direction "in": packets arriving on ``ifname`` (mangle PREROUTING -i); "out": leaving it
    (mangle POSTROUTING -o), for a namespace that must delay what it sends.
    """
    if direction not in HOOKS:
        raise ValueError(f"direction {direction!r} not in {tuple(HOOKS)}")
    if not ifname or len(ifname) > 15:
        raise ValueError(f"bad interface name {ifname!r}")
    chain, flag = HOOKS[direction]
    return [*_ns_prefix(netns), "ip6tables" if ipv6 else "iptables", "-w", "-t", "mangle",
            "-D" if delete else "-A", chain, flag, ifname,
            "-m", "comment", "--comment", f"aitb:{run_id}",
            "-j", "NFQUEUE", "--queue-num", str(queue_num)]


def nfqueue_rules_argvs(ifname: str, queue_num: int, run_id: str, netns: str | None = None,
                        delete: bool = False, direction: str = "in") -> list[list[str]]:
    """Both families' rules (IPv4 and IPv6) of one direction."""
    return [nfqueue_rule_argv(ifname, queue_num, run_id, netns, v6, delete, direction)
            for v6 in (False, True)]


def helper_argv(binary: str, parent_pid: int, queues: Sequence[QueueParams], stats_path: str,
                netns_path: str | None = None, stats_interval_ms: int = 1000,
                params_path: str | None = None, spin_us: float | None = None,
                rt_prio: int = 0, nice: int = 0, cpu: int | None = None,
                spin_dense: bool = False) -> list[str]:
    """The helper's argv: one process serving ``queues`` (all in one namespace).

    rt_prio > 0 runs it SCHED_FIFO at that priority, nice != 0 renices it: both keep releases
    on time when traffic generators fill the cores. cpu pins it to that CPU; spin_dense spins
    the last ``spin_us`` before every release, also when releases are dense (on a CPU of its
    own: see the helper's header comment).
    """
    if not queues:
        raise ValueError("at least one queue")
    nums = [q.queue_num for q in queues]
    if len(set(nums)) != len(nums):
        raise ValueError(f"queue numbers repeat: {nums}")
    argv = [binary, "--parent-pid", str(parent_pid), "--stats", stats_path,
            "--stats-interval-ms", str(stats_interval_ms)]
    if netns_path:
        argv += ["--netns", netns_path]
    if params_path:
        argv += ["--params", params_path]
    if spin_us is not None:
        argv += ["--spin-us", _g(spin_us)]
    if rt_prio:
        argv += ["--rt-prio", str(rt_prio)]
    if nice:
        argv += ["--nice", str(nice)]
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    if spin_dense:
        argv += ["--spin-dense"]
    for q in queues:
        argv += ["--queue", q.spec()]
    return argv


def params_file_text(queues: Sequence[QueueParams]) -> str:
    """Contents of the --params file re-read at SIGHUP (seed and pktlog cannot change live)."""
    return "".join(q.spec(live=True) + "\n" for q in queues)


def trace_file_text(steps: Sequence[tuple[float, float, float]]) -> str:
    """A trace file from (t_offset_s, delay_s, loss_pct) steps."""
    return "".join(f"{_us(t)} {_us(d)} {_g(loss)}\n" for t, d, loss in steps)
