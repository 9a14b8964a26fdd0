"""``replay``: the traffic generator's entry point (wired to ``aitb run`` by the orchestration).

Checks the schedule against the placement and the lab addresses, compiles per-rank programs
(nothing starts if that fails), runs one agent per host through a :class:`Launcher`, and
writes records into ``run_dir``: flows.jsonl, collectives.jsonl, bursts.jsonl,
timeline.jsonl (per-rank ops), failures.jsonl, transport.json (socket settings read back),
phases.json (the start margin used and, per phase, its start instant ``t0``, its end and the
idle time before it: what the controller added between phases, not part of any op).
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from models.errors import SpecError, SpecIssue
from models.records import BurstRecord, FailureRecord, skew_summary
from models.schedule import Schedule
from models.stragglers import StragglerSpec
from traffic_gen.controller import Controller, RunFailed
from traffic_gen.jsonl import FILES, RecordWriter, read_records
from traffic_gen.launch import Launcher
from traffic_gen.program import compile_program
from traffic_gen.tcpinfo import TcpKnobs

__all__ = ["ReplayOptions", "ReplayResult", "replay"]


@dataclass(frozen=True)
class ReplayOptions:
    """Knobs of one replay (units in names). ``start_margin_s``: how far ahead of "now" the
    controller sets the absolute start of each timed phase (a burst, a gather round, timed
    messages; phases that synchronise through data start at once); None: measured from
    control round trips to the agents (controller.py), recorded in ``phases.json``;
    ``transfer_timeout_s``: longest a single transfer may take once its first byte moved;
    ``phase_timeout_s``: longest a phase may take;
    ``conns_per_peer``: TCP connections per ordered rank pair (steps are striped over them);
    ``sites``: host -> sub-group label for hierarchical algorithms (default: the host);
    ``spin_s``: busy-wait before each absolute start (see datapath.sleep_until);
    ``rt_priority``: SCHED_FIFO priority (1-99) for the instant of a timed start, None for
    none (see datapath._Worker.boost; needs root); ``start_mode``: "kick" (the controller's
    starter writes the first ``kick_bytes`` of every timed TCP transfer at its instant, see
    kick.py; default 14480 = the initial window of 10 segments, RFC 6928) or "sleep" (every
    sender wakes itself at the instant); ``on_phase``: called as ``on_phase(phase index,
    iteration (a gather phase's: its FL round), start instant)`` (seconds since the epoch) as
    each phase is started, before the agents hear of it (an experiment's events anchored to
    iterations, models.events);
    ``on_controller``: called with the Controller once its agents are set up (its
    ``set_slowdown`` and ``signal_agent`` then reach them) and with None when it ends;
    ``health``: polled about once a second while the controller waits for its agents,
    returns (node, why) for every part of the lab that broke (a dead delay-line helper:
    testbed.delay.native.dead_lines); any fails the replay at once, as an agent's
    error does, instead of after a transfer timeout."""

    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    knobs: TcpKnobs = field(default_factory=TcpKnobs)
    stragglers: StragglerSpec = field(default_factory=StragglerSpec)
    sites: Mapping[str, str] = field(default_factory=dict)
    conns_per_peer: int = 1
    start_margin_s: float | None = None
    transfer_timeout_s: float = 30.0
    phase_timeout_s: float = 600.0
    agent_start_timeout_s: float = 20.0
    stop_timeout_s: float = 5.0
    udp_payload_bytes: int = 1400
    spin_s: float = 0.0
    rt_priority: int | None = None
    start_mode: str = "kick"
    kick_bytes: int = 14480
    python: str = sys.executable
    # {"cert", "key"} files: TLS 1.3 (traffic_gen/tls.py); optional "pairs": the address
    # pairs whose connections run it (endpoints.py; absent: every connection)
    tls: Mapping[str, Any] | None = None
    on_phase: Callable[[int, int, float], None] | None = None
    on_controller: Callable[[Any], None] | None = None
    health: Callable[[], list[tuple[str, str]]] | None = None
    # "per_host": one agent process per host (agent.py); "shared": engines holding many
    # hosts' sockets each (engine.py), ``engines`` of them (None: one per CPU)
    traffic_engine: str = "per_host"
    engines: int | None = None

    def agent_options(self) -> dict[str, Any]:
        """What agents need to know (JSON-ready)."""
        return {"transfer_timeout_s": self.transfer_timeout_s, "knobs": asdict(self.knobs),
                "udp_payload_bytes": self.udp_payload_bytes, "spin_s": self.spin_s,
                "rt_priority": self.rt_priority,
                "tls": dict(self.tls) if self.tls else None}


@dataclass(frozen=True)
class ReplayResult:
    """Where the records are, whether the run completed, and why not."""

    run_dir: Path
    ok: bool
    paths: Mapping[str, Path]
    failures: tuple[FailureRecord, ...]
    skew: Mapping[str, float]


def _check_inputs(schedule: Schedule, placement: Mapping[int, str],
                  addresses: Mapping[str, str], options: ReplayOptions) -> None:
    issues = []
    for rank, host in sorted(placement.items()):
        if host not in addresses:
            issues.append(SpecIssue(f"rank {rank} is placed on host {host!r}, which has no lab "
                                    "address", key_path=["placement", rank]))
    for host, ip in addresses.items():
        try:
            ipaddress.IPv4Address(ip)
        except ValueError:
            issues.append(SpecIssue(f"host {host}: {ip!r} is not an IPv4 address",
                                    key_path=["addresses", host]))
    if options.rt_priority is not None and not 1 <= options.rt_priority <= 99:
        issues.append(SpecIssue("rt_priority must be 1 to 99 (SCHED_FIFO)",
                                key_path=["options", "rt_priority"]))
    if options.start_mode not in ("kick", "sleep"):
        issues.append(SpecIssue(f"start_mode must be 'kick' or 'sleep', not "
                                f"{options.start_mode!r}", key_path=["options", "start_mode"]))
    if options.traffic_engine not in ("per_host", "shared"):
        issues.append(SpecIssue(f"traffic_engine must be 'per_host' or 'shared', not "
                                f"{options.traffic_engine!r}",
                                key_path=["options", "traffic_engine"]))
    if options.engines is not None and options.engines < 1:
        issues.append(SpecIssue("engines must be at least 1", key_path=["options", "engines"]))
    if options.kick_bytes < 1:
        issues.append(SpecIssue("kick_bytes must be at least 1", key_path=["options",
                                                                           "kick_bytes"]))
    if options.start_margin_s is not None and not options.start_margin_s >= 0:
        issues.append(SpecIssue("start_margin_s cannot be negative",
                                key_path=["options", "start_margin_s"]))
    if options.conns_per_peer < 1:
        issues.append(SpecIssue("conns_per_peer must be at least 1", key_path=["options"]))
    if issues:
        raise SpecError(issues)


def _check_pairs(pairs: Mapping[tuple[str, str], tuple[str, str]],
                 addresses: Mapping[str, str]) -> None:
    issues = []
    for (src, dst), ips in sorted(pairs.items()):
        where = ["pair_addresses", f"{src}->{dst}"]
        if src not in addresses or dst not in addresses:
            issues.append(SpecIssue(f"pair {src} -> {dst} names a host without a lab address",
                                    key_path=where))
            continue
        for ip in ips:
            try:
                ipaddress.IPv4Address(ip)
            except ValueError:
                issues.append(SpecIssue(f"pair {src} -> {dst}: {ip!r} is not an IPv4 address",
                                        key_path=where))
    if issues:
        raise SpecError(issues)


def _check_bound(bound: Mapping[int, str], placement: Mapping[int, str]) -> None:
    issues = []
    for rank, ip in sorted(bound.items()):
        where = ["rank_addresses", rank]
        if rank not in placement:
            issues.append(SpecIssue(f"rank {rank} is bound to {ip} but not placed on a host",
                                    key_path=where))
        try:
            ipaddress.IPv4Address(ip)
        except ValueError:
            issues.append(SpecIssue(f"rank {rank}: {ip!r} is not an IPv4 address",
                                    key_path=where))
    if issues:
        raise SpecError(issues)


def replay(schedule: Schedule, placement: Mapping[int, str], launcher: Launcher,
           run_dir: Path, addresses: Mapping[str, str],
           options: ReplayOptions | None = None,
           pair_addresses: Mapping[tuple[str, str], tuple[str, str]] | None = None,
           rank_addresses: Mapping[int, str] | None = None) -> ReplayResult:
    """Replay ``schedule`` with ranks placed by ``placement`` (rank -> host) on hosts reachable
    at ``addresses`` (host -> lab IPv4; agents bind it and connect only to these).
    ``pair_addresses``: (src host, dst host) -> (source, destination IPv4) for the pairs that
    use other addresses (multi-NIC hosts, :func:`models.paths.peer_addresses`): src's agent
    binds the source and connects to the destination, on which dst's agent listens.
    ``rank_addresses``: rank -> IPv4 the rank is bound to (a server's rank on its NIC,
    :func:`models.paths.rank_addresses`): its connections leave from it and its peers connect
    to it, over ``pair_addresses``.

    Raises SpecError before any process starts for an unplaced rank, a host without address,
    an unknown algorithm (listing the known ones) or a bad option. A failure while running
    (agent crash, transfer timeout, error on a connection) is returned as ``ok=False`` with
    the failure record; records of the phases that completed are kept, and every agent
    process is ended by pid. Side effects: writes into ``run_dir`` (created if needed);
    starts processes through ``launcher``.
    """
    options = options or ReplayOptions()
    if options.tls and options.start_mode == "kick":  # the starter's plain bytes would break
        options = replace(options, start_mode="sleep")  # the TLS stream: senders wake alone
    pairs = dict(pair_addresses or {})
    _check_inputs(schedule, placement, addresses, options)
    _check_pairs(pairs, addresses)
    bound = dict(rank_addresses or {})
    _check_bound(bound, placement)
    program = compile_program(schedule, placement, options.sites, options.stragglers)
    run_dir.mkdir(parents=True, exist_ok=True)
    nodes = {h: addresses[h] for h in sorted({placement[r] for r in program.ranks})}
    ctl = Controller(run_dir, options.run_id, launcher, nodes, options,
                     {k: v for k, v in pairs.items() if k[0] in nodes and k[1] in nodes},
                     {r: ip for r, ip in bound.items() if r in program.ranks})
    writer = RecordWriter(run_dir)
    failures: tuple[FailureRecord, ...] = ()
    try:
        ctl.run(program, placement, writer)
    except RunFailed as exc:
        failures = (exc.failure,)
    finally:
        writer.close()
        (run_dir / "transport.json").write_text(json.dumps(ctl.knobs, indent=1))
        (run_dir / "phases.json").write_text(json.dumps(
            {"start_margin_s": ctl.margin_s, "phases": ctl.phases}, indent=1))
    paths = {name.removesuffix(".jsonl"): run_dir / name for name in FILES.values()}
    bursts = list(read_records(paths["bursts"], BurstRecord))
    return ReplayResult(run_dir, not failures, paths, failures, skew_summary(bursts))
