"""The underlay's own delay between machines, measured before a cluster run and taken out of
the cut links' emulated delay.

Measurement (:func:`measure_rtts`): for every pair of machines that a cut link joins, the
machine of the pair that comes first in the cluster sends ``count`` ICMP echo requests (a raw
socket, :data:`RTT_SCRIPT`, run by the machine's python over SSH) to the other's underlay
address, one at a time; the minimum round trip is kept (queueing only adds to it).

Accounting (:func:`account`): a cut link's frames cross the underlay once per direction, after
the sender's machine shaped and delayed them (orchestration.cluster.partition). With the
underlay's one-way delay taken as half its minimum round trip (a symmetric path),

    emulated_delay_s = max(0, configured_delay_s - underlay_rtt_s / 2)      per direction

so configured = emulated + underlay one way, as the experiment asked. Where the underlay alone
is longer than the configured delay (``excess_s = underlay_rtt_s / 2 - configured_delay_s >
0``), the direction gets no emulated delay and is still ``excess_s`` too slow; it is recorded,
and the run's fidelity check marks the run untrustworthy when the excess exceeds the RTT
check's tolerance for that delay (analysis.fidelity.checks.precise_tolerance_s).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from models.plan import LabPlan
from orchestration.cluster.control import Control
from orchestration.cluster.spec import ClusterSpec
from orchestration.cluster.tunnels import Tunnel

__all__ = ["RTT_SCRIPT", "measure_rtts", "pair_key", "account"]

# argv: destination address, count; prints {"min_rtt_s", "sent", "answered"}
RTT_SCRIPT = r"""
import json, os, socket, struct, sys, time
dst, n = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
ident, best, got = os.getpid() & 0xFFFF, None, 0
def csum(b):
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    t = (t >> 16) + (t & 0xFFFF)
    return ~(t + (t >> 16)) & 0xFFFF
for seq in range(n):
    body = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + b"aitb-underlay-rtt"[:16]
    pkt = body[:2] + struct.pack("!H", csum(body)) + body[4:]
    t0 = time.perf_counter_ns()
    s.sendto(pkt, (dst, 0))
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        s.settimeout(max(1e-3, deadline - time.monotonic()))
        try:
            data, addr = s.recvfrom(4096)
        except socket.timeout:
            break
        t1 = time.perf_counter_ns()
        ihl = (data[0] & 15) * 4
        kind, _, _, i, q = struct.unpack("!BBHHH", data[ihl:ihl + 8])
        if kind == 0 and i == ident and q == seq and addr[0] == dst:
            got += 1
            best = t1 - t0 if best is None else min(best, t1 - t0)
            break
    time.sleep(0.02)
print(json.dumps({"min_rtt_s": None if best is None else best / 1e9, "sent": n,
                  "answered": got}))
"""


def pair_key(a: str, b: str) -> str:
    """The name of the machine pair ``a``, ``b`` (in either order): ``a~b`` sorted."""
    return "~".join(sorted((a, b)))


def measure_rtts(tunnels: list[Tunnel], cluster: ClusterSpec, controls: Mapping[str, Control],
                 count: int = 10) -> dict[str, dict[str, Any]]:
    """Pair key -> ``{"from", "to", "to_address", "min_rtt_s", "sent", "answered"}`` for
    every pair of machines a tunnel joins (module docstring); ``min_rtt_s`` None when no echo
    came back (ICMP filtered on the underlay: the delay then stays unaccounted, and the
    fidelity check says so). Raises LabError naming the machine when the script fails
    there."""
    order = {m.name: i for i, m in enumerate(cluster.machines)}
    by_name = {m.name: m for m in cluster.machines}
    out: dict[str, dict[str, Any]] = {}
    for t in tunnels:
        key = pair_key(t.a_machine, t.b_machine)
        if key in out:
            continue
        src, dst = sorted((t.a_machine, t.b_machine), key=order.__getitem__)
        address = by_name[dst].underlay_ip
        got = json.loads(controls[src].check([cluster.python, "-c", RTT_SCRIPT, address,
                                              str(count)], timeout_s=30 + 2 * count))
        out[key] = {"from": src, "to": dst, "to_address": address, **got}
    return out


def account(plan: LabPlan, tunnels: list[Tunnel], rtts: Mapping[str, Mapping[str, Any]]
            ) -> tuple[LabPlan, list[dict[str, Any]]]:
    """``plan`` with every cut link's per-direction delay reduced by the underlay's one-way
    delay (module docstring), and one record per cut link: ``link``, ``machines``,
    ``underlay_rtt_s`` (None: not measured, nothing taken off), ``underlay_one_way_s`` and
    per direction ``configured_delay_s``, ``emulated_delay_s``, ``excess_s`` (0 when the
    underlay fits in the configured delay). Pure."""
    cut = {t.link: t for t in tunnels}
    links, records = [], []
    for lk in plan.links:
        t = cut.get(lk.name)
        if t is None:
            links.append(lk)
            continue
        measured = rtts[pair_key(t.a_machine, t.b_machine)]["min_rtt_s"]
        rtt = None if measured is None else float(measured)
        one_way = 0.0 if rtt is None else rtt / 2  # not measured: nothing taken off
        rec: dict[str, Any] = {"link": lk.name, "machines": [t.a_machine, t.b_machine],
                               "underlay_rtt_s": rtt, "underlay_one_way_s": one_way}
        shaped = {}
        for d in ("a_to_b", "b_to_a"):
            s = getattr(lk, d)
            emulated = max(0.0, s.delay_s - one_way)
            rec[d] = {"configured_delay_s": s.delay_s, "emulated_delay_s": emulated,
                      "excess_s": max(0.0, one_way - s.delay_s)}
            shaped[d] = dataclasses.replace(s, delay_s=emulated)
        links.append(dataclasses.replace(lk, **shaped))
        records.append(rec)
    return dataclasses.replace(plan, links=tuple(links)), records
