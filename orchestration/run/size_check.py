"""Transfer sizes the lab cannot carry, refused before it exists (they used to start the lab
and end in a timeout or an agent's error).

Two bounds, each what the code that moves the bytes can do, not a limit of taste:

* **UDP** (traffic_gen/udp.py): every datagram's header counts the message's datagrams and
  numbers them in 32 bits (``struct "!III"``), so one UDP message is at most
  :data:`UDP_MAX_DATAGRAMS` datagrams of ``udp_payload_bytes`` (1400): about 5.5 TiB. A
  larger message fails in the sender's ``struct.pack``, after the lab is up.
* **TCP within ``timeouts.transfer``** (traffic_gen/transfers.py): a transfer must end
  within ``timeouts.transfer`` of its start, and no transfer goes faster than the narrowest
  rate limiter on its path (the plan's HTB rate of each crossed link direction, after
  ``scale``; :func:`models.paths.paths`, over the best of its ECMP paths). A transfer of more
  than ``rate_bps / 8 x transfer_timeout_s`` bytes therefore always times out (a necessary
  condition only: headers take their share of the rate too). A host pair with a route that
  is unshaped throughout has no such bound, and neither do labs whose rates change during
  the run (link traces, ``events:``), where a later rate may be higher: those are not
  checked. Neither is an experiment that is invalid already (orchestration.run.salvage
  checks a copy with defaults in place of its bad keys: its timeouts or transport may not be
  the user's).

Sizes are the compiled programs' (traffic_gen.program), cut as the agents cut them: a step of
an untimed TCP op is striped over ``conns_per_peer`` connections, each part its own transfer
with its own timeout (traffic_gen/ranks.py), so the bound is checked on the largest part.

Not refused, because the code carries them (each ran to the end in a lab): zero-byte steps
(``size: 0B``, or a ring's share of a message smaller than the ranks), a ``chunk`` larger
than the message (one piece, traffic_gen.algorithms.steps.pieces) and an all-to-all size
not divisible by the ranks (split_bytes gives the first ranks one byte more). Nor are the
downloads and uploads of FL gathers: they have no transfer timeout (traffic_gen/gather.py
``move`` only waits, in TICK_S slices, until the bytes moved or the root cut them off at its
deadline), so any size can end, if late, and a late client is an outcome. A negative
size, a fraction of a byte and a bare ``0`` are refused by models.units already.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from models.errors import SpecIssue
from models.paths import PathError, PathWalker, host_addresses
from models.plan import LabPlan
from models.units import format_rate, format_size

__all__ = ["UDP_MAX_DATAGRAMS", "size_issues", "largest_steps"]

UDP_MAX_DATAGRAMS = 2**32 - 1  # traffic_gen/udp.py: _HDR = struct.Struct("!III")


def largest_steps(program: Any, placement: Mapping[int, str], conns_per_peer: int = 1
                  ) -> dict[tuple[str, str, str, int | None], int]:
    """(source host, destination host, protocol, UDP rate) -> the largest single transfer
    sent that way in a compiled program (traffic_gen.program.Program): a TCP step of an
    untimed op is striped over ``conns_per_peer`` connections (traffic_gen/ranks.py: its
    largest part is ceil(size / conns)); a timed op's step and a UDP step go whole on one
    connection or socket (traffic_gen/timed.py)."""
    out: dict[tuple[str, str, str, int | None], int] = {}
    for rank, phases in program.ranks.items():
        for phase in phases:
            for op in phase:
                if op.get("t") != "xfer":
                    continue
                ways = 1 if op.get("kind") == "timed" else conns_per_peer
                for st in op.get("steps", ()):
                    kind, peer, size, proto, rate = st[0], st[1], st[2], st[5], st[6]
                    if kind != "send":
                        continue
                    part = size if proto == "udp" else -(-size // ways)
                    key = (placement[rank], placement[peer], proto, rate)
                    out[key] = max(out.get(key, 0), part)
    return out


def _bottleneck_bps(plan: LabPlan, walker: PathWalker, src: str, dst: str) -> int | None:
    """The fastest of the narrowest rate limiters on the paths from ``src`` to any address of
    ``dst`` (a multi-NIC destination: each NIC; a source with per-source tables: from each
    NIC's address too; ECMP: each route); None when one of those paths is
    unshaped throughout or none is known, so no bound holds. ``walker``: one
    :class:`models.paths.PathWalker` of ``plan`` for all pairs (building one per pair cost
    ~1.8 ms against ~0.14 ms per pair on 256 hosts)."""
    best = 0
    node = plan.node(src)
    own = {lk.endpoint(src).ifname: lk.endpoint(src).ipv4 for lk in plan.links_of(src)}
    # a multi-NIC host with per-source tables (models.plan.SourceRoutes) may send from any of
    # its NICs' addresses, each with its own table: every one is a candidate path
    src_ips = [None, *(str(own[sr.ifname].ip) for sr in node.source_routes
                       if own.get(sr.ifname) is not None)]
    for addr, src_ip in ((a, si) for a in host_addresses(plan, dst) for si in src_ips):
        try:
            routes = walker.paths(src, addr, src_ip)
        except PathError:
            if src_ip is not None:
                continue  # that NIC's table has no way there: not a candidate
            return None  # reported by the runner's own checks
        for hops in routes:
            rates = [h.shaping.rate_bps for h in hops if h.shaping.rate_bps is not None]
            if not rates:
                return None
            best = max(best, min(rates))
    return best or None


def size_issues(name: str, program: Any, placement: Mapping[int, str], plan: LabPlan, *,
                source: str, key_path: tuple[str | int, ...], transfer_timeout_s: float,
                udp_payload_bytes: int, rates_change: bool, conns_per_peer: int = 1,
                size_key: bool = True) -> list[SpecIssue]:
    """The issues of workload ``name``'s transfers that cannot complete (module docstring):
    at most one per bound, about its largest refused transfer, at
    ``key_path`` (the entry's ``size`` key, else the entry) of ``source``, saying the bound
    and where it comes from. ``rates_change``: the run changes link rates (traces, events),
    so the TCP bound is not checked; ``conns_per_peer``: the experiment's
    ``transport.conns_per_peer``; ``size_key``: the entry has a ``size`` key to shrink (else
    the advice names its transfers: a background, inference or imported workload). Pure."""
    udp_max = UDP_MAX_DATAGRAMS * udp_payload_bytes
    udp: list[tuple[int, str, str]] = []
    tcp: list[tuple[int, str, str]] = []
    for (src, dst, proto, _rate), size in largest_steps(program, placement,
                                                        conns_per_peer).items():
        if proto == "udp":
            if math.ceil(size / udp_payload_bytes) > UDP_MAX_DATAGRAMS:
                udp.append((size, src, dst))
        else:
            tcp.append((size, src, dst))
    out = []
    if udp:
        size, src, dst = max(udp)
        more = f" (and {len(udp) - 1} more host pairs)" if len(udp) > 1 else ""
        out.append(SpecIssue(
            f"{name}: a UDP message of {_bytes(size)} from {src} to {dst}{more} is "
            f"more than {UDP_MAX_DATAGRAMS} datagrams of {udp_payload_bytes} bytes, which "
            "the datagram header counts in 32 bits (traffic_gen/udp.py): at most "
            f"{_bytes(udp_max)} per message", file=source, key_path=key_path))
    slowest = min((d.rate_bps for lk in plan.links for d in (lk.a_to_b, lk.b_to_a)
                   if d.rate_bps), default=None)
    if rates_change or slowest is None:
        return out
    # a shaped path's narrowest rate is at least the lab's slowest rate limiter: a transfer
    # that this carries in time needs no walk; the others are walked, the largest first, and
    # the first refused is reported (worst case, none refused: all_pairs of a k=8 fat-tree's
    # 128 hosts walks 16256 pairs in 2.5 s)
    floor = int(slowest / 8 * transfer_timeout_s)
    walker: PathWalker | None = None
    for size, src, dst in sorted((t for t in tcp if t[0] > floor), reverse=True):
        walker = walker or PathWalker(plan)
        rate = _bottleneck_bps(plan, walker, src, dst)
        if rate is not None and size > (most := int(rate / 8 * transfer_timeout_s)):
            out.append(SpecIssue(
                f"{name}: a transfer of {_bytes(size)} from {src} to {dst} cannot end "
                f"within timeouts.transfer ({transfer_timeout_s:g} s): the narrowest rate "
                f"on its path is {format_rate(rate)}, which carries at most {_bytes(most)} "
                f"in that time; {'shrink the size' if size_key else 'make its transfers smaller'}"
                " or raise timeouts.transfer", file=source,
                key_path=key_path))
            break
    return out


def _bytes(n: int) -> str:
    return f"{n} bytes ({format_size(n)})"
