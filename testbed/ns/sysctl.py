"""Per-namespace sysctls, written under /proc/sys from a thread inside each namespace.

/proc/sys/net resolves against the network namespace of the task that opens the file, so one
helper thread that enters each namespace in turn configures them all without a process per
node (``ip netns exec sysctl`` would fork one each). Needs root.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence

from models.errors import LabError
from models.plan import LabPlan, NodePlan
from testbed.ns import netns

__all__ = ["node_sysctls", "lab_uses_ipv6", "apply_all", "sysctl_path", "read", "all_cpus_mask",
           "RPS_DEFAULT_MASK", "skips_carrierless_routes"]

_BRIDGE_NF = ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables",
              "net.bridge.bridge-nf-call-arptables")


def sysctl_path(key: str) -> str:
    """``net.ipv4.ip_forward`` -> ``/proc/sys/net/ipv4/ip_forward``."""
    return "/proc/sys/" + key.replace(".", "/")


RPS_DEFAULT_MASK = "net.core.rps_default_mask"


def all_cpus_mask(n_cpus: int | None = None, without: int | None = None) -> str:
    """The cpumask of CPUs 0..n-1 (default: ``os.cpu_count()``), less CPU ``without`` if
    given, as /proc/sys cpumask text: hex in comma-separated 32-bit groups, most significant
    first (bitmap_parse format)."""
    n = n_cpus or os.cpu_count() or 1
    bits = (1 << n) - 1
    if without is not None:
        bits &= ~(1 << without)
    digits = f"{bits:x}"
    groups = []
    while digits:
        groups.insert(0, digits[-8:])
        digits = digits[:-8]
    return ",".join(groups)


def lab_uses_ipv6(plan: LabPlan) -> bool:
    """Whether ``plan`` needs IPv6 in its namespaces: an IPv6 address on a link end or a
    node's loopback, or FRR sessions by interface (``peering: unnumbered`` may find its peer by
    the IPv6 link-local address). Pure."""
    return (any(ep.ipv6 for lk in plan.links for ep in (lk.a, lk.b))
            or any(n.lo_ipv6 for n in plan.nodes)
            or (plan.routing is not None and plan.routing.peering == "unnumbered"))


def node_sysctls(node: NodePlan, ipv6: bool, line_cpu: int | None = None
                 ) -> tuple[dict[str, str], dict[str, str]]:
    """(required, optional) sysctls for ``node``: forwarding by kind (and ``forward``), ECMP
    hash policy, congestion control and the plan's own sysctls (these last, so they win).
    Optional ones are skipped where the kernel lacks them (bridge netfilter hooks on switches:
    off, so frames crossing a lab bridge do not traverse iptables; :data:`RPS_DEFAULT_MASK`,
    see below).

    IPv6 labs turn duplicate address detection off for every interface created afterwards
    (``net.ipv6.conf.default.accept_dad=0``, applied before the links are made; lab addresses
    are unique by construction, see also IFA_F_NODAD in :mod:`testbed.routing.routes`): while an
    interface's link-local address is still tentative (about 1-2 s after it comes up) a
    router does not send the neighbour solicitation for a packet it forwards (it has no usable
    source address: Linux ``ndisc_send_ns``), so the first packets across it were lost.

    IPv4-only labs (``ipv6`` False, :func:`lab_uses_ipv6`) turn IPv6 off in every namespace
    (``net.ipv6.conf.{all,default}.disable_ipv6=1``, applied before the links are made;
    optional: skipped on a kernel without IPv6). Otherwise every interface sends IPv6
    link-local start-up traffic at random instants of its first seconds (duplicate address
    detection's neighbour solicitation, MLDv2 reports; hosts' router solicitations, repeated
    every few seconds) through the same shaped queues as the experiment: in a full 50-packet
    head-drop queue one such packet pushed out a measured datagram, at an incast bottleneck
    such drops count as incast loss, and every capture holds them. A node's own sysctls can
    turn it back on (they are applied last).

    RPS over all CPUs on every interface created afterwards (``net.core.rps_default_mask``,
    per namespace, Linux >= 6.2; applied before the links are made): a veth hands each packet
    to the backlog of the CPU that transmits it, and an HTB dequeues from the sender's CPU or
    from its watchdog timer on another one, so one flow's packets were processed by two CPUs
    at once and arrived reordered (spurious retransmissions, D-SACKs, with no drop anywhere).
    RPS steers each flow by its hash to one CPU, which keeps it in order. With ``line_cpu``
    (a CPU dedicated to the native delay line, :mod:`testbed.delay.nfqueue.linecpu`) the mask
    leaves that CPU out and is required: the line's helpers run there alone.

    Links that fail (testbed/live/faults.py), on hosts and routers: a multipath next hop whose
    link lost its carrier is skipped (``ignore_routes_with_linkdown``, all and default: the
    kernel ORs them; without it the kernel keeps hashing flows onto a dead peer's veth), as is
    one whose neighbour entry failed (``net.ipv4.fib_multipath_use_neigh``); IPv6 addresses
    stay on an interface that goes down (``keep_addr_on_down``; else a link that comes back
    has none)."""
    req: dict[str, str] = {}
    opt: dict[str, str] = {}
    if line_cpu is None:
        opt[RPS_DEFAULT_MASK] = all_cpus_mask()
    else:
        req[RPS_DEFAULT_MASK] = all_cpus_mask(without=line_cpu)
    if node.kind == "switch":
        opt.update({k: "0" for k in _BRIDGE_NF})
    else:
        fwd = "1" if node.kind == "router" or node.forward else "0"
        req["net.ipv4.ip_forward"] = fwd
        req["net.ipv4.fib_multipath_hash_policy"] = "1" if node.ecmp_hash == "l4" else "0"
        req.update(_LINK_FAULTS_V4)
        if ipv6:
            req["net.ipv6.conf.all.forwarding"] = fwd
            req["net.ipv6.fib_multipath_hash_policy"] = req["net.ipv4.fib_multipath_hash_policy"]
            req.update(_LINK_FAULTS_V6)
    if ipv6:
        req["net.ipv6.conf.default.accept_dad"] = "0"
    else:
        opt.update({f"net.ipv6.conf.{which}.disable_ipv6": "1" for which in ("all", "default")})
    if node.tcp_congestion_control:
        req["net.ipv4.tcp_congestion_control"] = node.tcp_congestion_control
    req.update(node.sysctls)
    return req, opt


def wire_sysctls(line_cpu: int | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(required, optional) sysctls of the lab's wire namespace (testbed/lab/layout.py
    ``add_wires``): its bridges hand IPv4 and IPv6 packets to iptables (br_netfilter), where
    the native delay line's rules take them; RPS as on the nodes (:func:`node_sysctls`); no
    IPv6 of its own (its bridges and ports have no address to announce)."""
    req = {k: "1" for k in _BRIDGE_NF}
    opt = {f"net.ipv6.conf.{which}.disable_ipv6": "1" for which in ("all", "default")}
    if line_cpu is None:
        opt[RPS_DEFAULT_MASK] = all_cpus_mask()
    else:
        req[RPS_DEFAULT_MASK] = all_cpus_mask(without=line_cpu)
    return req, opt


def skips_carrierless_routes(node: NodePlan) -> bool:
    """Whether ``node`` stops using a link that only lost its carrier (its far end went
    down), as testbed/live/faults.py relies on when it sets one end of a link down: a switch's
    bridge disables a port without carrier; a host or router skips next hops without
    carrier (``ignore_routes_with_linkdown``, :func:`node_sysctls`) unless the node's own
    sysctls set one of those keys to 0. Pure."""
    if node.kind == "switch":
        return True
    return not any(key.endswith(".ignore_routes_with_linkdown") and str(value).strip() == "0"
                   for key, value in node.sysctls.items())


_LINK_FAULTS_V4 = {"net.ipv4.conf.all.ignore_routes_with_linkdown": "1",
                   "net.ipv4.conf.default.ignore_routes_with_linkdown": "1",
                   "net.ipv4.fib_multipath_use_neigh": "1"}
_LINK_FAULTS_V6 = {"net.ipv6.conf.all.ignore_routes_with_linkdown": "1",
                   "net.ipv6.conf.default.ignore_routes_with_linkdown": "1",
                   "net.ipv6.conf.all.keep_addr_on_down": "1",
                   "net.ipv6.conf.default.keep_addr_on_down": "1"}


def _write(node: str, key: str, value: str, required: bool) -> None:
    path = sysctl_path(key)
    try:
        with open(path, "w") as f:
            f.write(str(value))
    except FileNotFoundError:
        if required:
            raise LabError(f"node {node}: sysctl {key} does not exist in this kernel") from None
    except OSError as exc:
        hint = ""
        if exc.errno in (errno.EACCES, errno.EPERM) and key.startswith("net."):
            hint = ("; this sysctl is not per network namespace (the kernel makes global "
                    "ones read-only inside a namespace): set it on the host instead")
        if key == "net.ipv4.tcp_congestion_control":
            hint = ("; a namespace's default may only be an algorithm listed in the host's "
                    "net.ipv4.tcp_allowed_congestion_control (root can still pick any per "
                    "socket, e.g. iperf3 -C)")
        raise LabError(f"node {node}: cannot set sysctl {key}={value}: {exc.strerror}{hint}"
                       ) from None


def _apply_loop(items: Sequence[tuple[int, str, Mapping[str, str], Mapping[str, str]]]) -> None:
    for fd, node, req, opt in items:
        netns.enter(fd, f"the namespace of node {node}")
        for key, value in opt.items():
            _write(node, key, value, False)
        for key, value in req.items():
            _write(node, key, value, True)


def apply_all(items: Sequence[tuple[int, str, Mapping[str, str], Mapping[str, str]]]) -> None:
    """Apply (namespace fd, node, required, optional) sysctls for many nodes; raises LabError
    naming node and key for a key that does not exist or a value the kernel refuses."""
    netns.run_in(None, _apply_loop, items)


def read(fd: int, key: str) -> str:
    """The value of sysctl ``key`` inside namespace ``fd`` (stripped)."""
    def _read() -> str:
        with open(sysctl_path(key)) as f:
            return f.read().strip()
    return netns.run_in(fd, _read)


