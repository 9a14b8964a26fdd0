"""The experiment's per-host transport knobs (``transport.rto_min``, ``transport.ecn``) folded
into the lab plan before the lab exists, and the record of what was applied.

The plan stays the single description of the lab: the testbed realises ``NodePlan.rto_min_s``
as a locked RTAX_RTO_MIN metric on every route of the host and ``net.ipv4.tcp_ecn`` through
the node's sysctls, and its readback verifies both. Routers and switches are left alone: they
do not terminate TCP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from models.plan import LabPlan, NodePlan
from models.units import plain
from orchestration.run.experiment import TransportSpec

__all__ = ["ECN_SYSCTL", "CC_SYSCTL", "ecn_value", "apply_host_transport",
           "host_transport_record", "congestion_control_record"]

ECN_SYSCTL = "net.ipv4.tcp_ecn"
CC_SYSCTL = "net.ipv4.tcp_congestion_control"
_ECN = {True: "1", False: "0", "server": "2"}  # Documentation/networking/ip-sysctl.rst


def ecn_value(ecn: bool | str | None) -> str | None:
    """The ``net.ipv4.tcp_ecn`` value for the experiment's ``ecn`` (None: leave as is)."""
    return None if ecn is None else _ECN[ecn]


def _host(n: NodePlan, rto_min_s: float | None, ecn: str | None) -> NodePlan:
    sysctls = dict(n.sysctls) if ecn is None else {**n.sysctls, ECN_SYSCTL: ecn}
    return dataclasses.replace(n, rto_min_s=rto_min_s if rto_min_s is not None else n.rto_min_s,
                               sysctls=sysctls)


def apply_host_transport(plan: LabPlan, t: TransportSpec) -> LabPlan:
    """``plan`` with ``t.rto_min`` (as ``rto_min_s``, seconds) and ``t.ecn`` (as the
    ``net.ipv4.tcp_ecn`` sysctl, overriding a topology's own) on every host; other nodes and
    unset knobs unchanged. ``t`` is validated already (range of rto_min: TransportSpec)."""
    rto_min_s = plain(t.rto_min)  # read with the spec: DurationS
    ecn = ecn_value(t.ecn)
    if rto_min_s is None and ecn is None:
        return plan
    nodes = tuple(_host(n, rto_min_s, ecn) if n.kind == "host" else n for n in plan.nodes)
    return dataclasses.replace(plan, nodes=nodes)


def host_transport_record(plan: LabPlan) -> dict[str, Any]:
    """host -> {rto_min_s, rto_min_ms (the route metric), tcp_ecn} as planned (and verified by
    the lab's readback at bring-up), for the run's manifest."""
    return {h.name: {"rto_min_s": h.rto_min_s,
                     "rto_min_ms": None if h.rto_min_s is None else round(h.rto_min_s * 1000),
                     ECN_SYSCTL: h.sysctls.get(ECN_SYSCTL)} for h in plan.hosts()}


def congestion_control_record(plan: LabPlan, t: TransportSpec,
                              read: Callable[[str, str], str]) -> dict[str, Any]:
    """The congestion control each host's workload sockets use, for the run's manifest:
    ``{"congestion_control": {host: algorithm}, "congestion_control_source": ...}``.

    With ``transport.tcp_congestion_control`` set, every workload socket sets it
    (TCP_CONGESTION; the CLI refused one the kernel lacks), so that is each host's. Otherwise
    a socket takes its namespace's default, read with ``read(host, CC_SYSCTL)`` from the
    running lab (``Lab.read_sysctl``): the host kernel's default, unless the topology set the
    sysctl for that host. Never assumed: an unset default is what the kernel says it is.
    """
    hosts = [h.name for h in plan.hosts()]
    if t.tcp_congestion_control:
        return {"congestion_control": {h: t.tcp_congestion_control for h in hosts},
                "congestion_control_source": "transport.tcp_congestion_control (per socket)"}
    return {"congestion_control": {h: read(h, CC_SYSCTL) for h in hosts},
            "congestion_control_source": f"{CC_SYSCTL} of each host's namespace"}
