"""The end-to-end RTT of the links cut between two machines, probed across the tunnel.

A machine's own fidelity monitor cannot probe a cut link: its far end there is a port of the
link's proxy switch, with no address (orchestration.cluster.partition), so it checks only the
native delay line of the direction its machine sends. Here the driver probes the link from
end to end before the workloads (:func:`probe_cut_links`): on the machine of the link's
``a`` end, inside that node's namespace (``aitb exec RUN NODE --``), the underlay's echo
script (orchestration.cluster.underlay.RTT_SCRIPT) sends ``count`` ICMP echo requests, one at
a time, to the ``b`` end's address, through a's delay line, the tunnel, the underlay and b's
delay line and back; the minimum round trip is kept (queueing only adds to it).

Check (:func:`cut_rtt_check`): the experiment configured the link's delays with the underlay
included (the emulated delay is configured - underlay_rtt / 2 per direction,
orchestration.cluster.underlay), so the probed RTT is compared with the configured round
trip, a_to_b.delay_s + b_to_a.delay_s (analysis.fidelity.checks.expected_rtt_s: the
probe's serialization at the shaped rate is no floor, HTB's burst lets it through),
within the RTT check's tolerance for links off a host kernel
(analysis.fidelity.checks.rtt_tolerance_s, not ``precise``: the underlay's own jitter is
not emulated and not bounded by it). ``not_exercised`` when an end has no IPv4
address (a switch port) or no echo came back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from analysis.fidelity import expected_rtt_s, rtt_tolerance_s
from models.errors import LabError
from models.plan import LabPlan
from orchestration.cluster.control import Control
from orchestration.cluster.underlay import RTT_SCRIPT

__all__ = ["PROBE_COUNT", "probe_cut_links", "cut_rtt_check"]

PROBE_COUNT = 6  # echoes per cut link (the first pays for ARP); the minimum is kept


def probe_cut_links(plan: LabPlan, cut: Sequence[str], where: Mapping[str, str],
                    run_ids: Mapping[str, str], controls: Mapping[str, Control],
                    aitb: Sequence[str], python: str, count: int = PROBE_COUNT
                    ) -> dict[str, dict[str, Any]]:
    """Link name -> ``{"from_node", "machine", "to_address", "min_rtt_s", "sent",
    "answered"}`` for every link of ``cut`` whose two ends have an IPv4 address (module
    docstring); ``min_rtt_s`` None when no echo came back. ``plan``: the experiment's plan
    (its configured delays); ``where``: node -> machine; ``run_ids``: machine -> its part's
    run id. Raises LabError naming the link and machine when the probe fails to run."""
    links = {lk.name: lk for lk in plan.links}
    out: dict[str, dict[str, Any]] = {}
    for name in cut:
        lk = links[name]
        if lk.a.ipv4 is None or lk.b.ipv4 is None:
            continue
        machine, address = where[lk.a.node], str(lk.b.ipv4.ip)
        argv = [*aitb, "exec", run_ids[machine], lk.a.node, "--", python, "-c", RTT_SCRIPT,
                address, str(count)]
        try:
            got = json.loads(controls[machine].check(argv, timeout_s=30 + 2 * count)
                             .strip().splitlines()[-1])
        except (LabError, ValueError, IndexError) as exc:
            raise LabError(f"end-to-end RTT probe of cut link {name} from node {lk.a.node} "
                           f"on machine {machine}: {exc}") from None
        out[name] = {"from_node": lk.a.node, "machine": machine, "to_address": address,
                     **got}
    return out


def cut_rtt_check(plan: LabPlan, link: str, probed: Mapping[str, Any] | None
                  ) -> dict[str, Any]:
    """The end-to-end entry of cut link ``link`` (module docstring): ``rtt_s`` (None: not
    probed or unanswered), ``expected_rtt_s``, ``tolerance_s`` (low, high), ``check``,
    and the probe's ``from_node``, ``to_address``, ``sent``, ``answered``. Pure."""
    lk = next(x for x in plan.links if x.name == link)
    low, high = rtt_tolerance_s(lk.a_to_b, lk.b_to_a)
    rtt = None if probed is None else probed.get("min_rtt_s")
    check = "not_exercised" if rtt is None else "ok" if low <= rtt <= high else "off"
    return {"rtt_s": rtt, "expected_rtt_s": expected_rtt_s(lk.a_to_b, lk.b_to_a),
            "tolerance_s": [low, high], "check": check,
            **{k: probed.get(k) for k in ("from_node", "to_address", "sent", "answered")
               if probed is not None}}
