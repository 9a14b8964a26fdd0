"""Point-to-point patterns (workloads.patterns): ``incast`` (every other placed host sends
``size`` to ``receiver``), ``one_to_many`` (``sender`` to every other), ``permutation``,
``all_pairs``; ``repeats`` bursts separated by ``gap``; TCP, or UDP paced at ``rate``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from models.plan import LabPlan
from models.schedule import Schedule
from models.specfile import MAX_FLOWS, MAX_REPEATS
from models.unit_fields import Duration, Rate, Size
from models.units import plain
from orchestration.run.kinds.common import (
    BuiltWorkload,
    Common,
    Ctx,
    finish,
    guarded,
    placement_of,
    world_hosts,
)
from workloads import patterns

__all__ = ["KINDS", "Entry", "PatternEntry", "build", "flows_of"]

KINDS = ("incast", "one_to_many", "permutation", "all_pairs")


class PatternEntry(Common):
    """Point-to-point patterns: ``incast`` (every other placed host sends ``size`` to
    ``receiver``), ``one_to_many`` (``sender`` to every other), ``permutation``, ``all_pairs``;
    ``repeats`` bursts separated by ``gap`` (at most MAX_REPEATS; the flows of all bursts at
    most MAX_FLOWS, models.specfile: refused before any is built)."""

    kind: Literal["incast", "one_to_many", "permutation", "all_pairs"]
    size: Size
    receiver: str | None = None
    sender: str | None = None
    repeats: Annotated[int, Field(gt=0, le=MAX_REPEATS)] = 1
    gap: Duration | None = None
    protocol: Literal["tcp", "udp"] = "tcp"
    rate: Rate | None = None


Entry = PatternEntry


def _rank_of(ctx: Ctx, hosts: list[str], key: str, host: str | None) -> int:
    if host is None:
        raise ctx.error(key, f"this pattern needs {key}: a host name")
    if host not in hosts:
        raise ctx.error(key, f"{host!r} is not among the workload's hosts "
                             f"({', '.join(hosts)})")
    return hosts.index(host)


def _schedule(ctx: Ctx, plan: LabPlan, e: PatternEntry) -> tuple[Schedule, list[str]]:
    hosts = world_hosts(ctx, plan, e.hosts)
    size, rate = int(e.size), plain(e.rate)  # read with the spec: SizeBytes, RateBps
    if e.protocol == "udp" and rate is None:
        raise ctx.error("rate", "UDP flows need a pacing rate, like '100mbit'")
    ranks = list(range(len(hosts)))
    _check_flows(ctx, e, len(hosts))
    common: dict[str, Any] = {"protocol": e.protocol, "rate_bps": rate}
    if e.kind == "incast":
        recv = _rank_of(ctx, hosts, "receiver", e.receiver)
        gap = float(e.gap or 0.0)
        ops = patterns.incast([r for r in ranks if r != recv], recv, size, e.repeats, gap,
                              **common)
    elif e.kind == "one_to_many":
        src = _rank_of(ctx, hosts, "sender", e.sender)
        ops = patterns.one_to_many(src, [r for r in ranks if r != src], size, **common) \
            * e.repeats
    elif e.kind == "permutation":
        ops = patterns.permutation(ranks, size, ctx.seed, **common) * e.repeats
    else:
        ops = patterns.all_pairs(ranks, size, **common) * e.repeats
    return patterns.pattern_schedule(e.name or e.kind, len(hosts), ops), hosts


def flows_of(kind: str, hosts: int, repeats: int) -> int:
    """The flows a pattern over ``hosts`` ranks makes in all ``repeats`` bursts (arithmetic,
    nothing is built): incast and one_to_many hosts - 1 per burst, permutation hosts,
    all_pairs hosts x (hosts - 1)."""
    per = {"incast": hosts - 1, "one_to_many": hosts - 1, "permutation": hosts,
           "all_pairs": hosts * (hosts - 1)}[kind]
    return per * repeats


def _check_flows(ctx: Ctx, e: PatternEntry, hosts: int) -> None:
    total = flows_of(e.kind, hosts, e.repeats)
    if total > MAX_FLOWS:
        raise ctx.error("repeats", f"{e.kind} over {hosts} hosts x repeats {e.repeats} makes "
                                   f"{total} flows; at most {MAX_FLOWS} (MAX_FLOWS): fewer "
                                   "repeats or hosts")


def build(e: PatternEntry, ctx: Ctx, plan: LabPlan) -> BuiltWorkload:
    """The pattern's schedule, ranks on ``hosts`` in order (or all the lab's hosts)."""
    if e.placement is not None:  # was silently ignored: ranks here are named by their hosts
        raise ctx.error("placement", f"a {e.kind} pattern names its hosts (receiver, sender); "
                                     "list them in hosts:, placement is not supported here")
    def run() -> tuple[Schedule, dict[int, str]]:
        schedule, hosts = _schedule(ctx, plan, e)
        return schedule, placement_of(ctx, plan, schedule.world_size, hosts, None)
    schedule, placement = guarded(ctx, run)
    return finish(ctx, schedule, placement, e.stragglers, e.ring_order, e.hierarchy)
