"""Which datapath each Open vSwitch switch of a lab gets: the kernel's or OVS's user-space one.

``ovs_datapath`` of a switch (:class:`models.plan.NodePlan`):

- ``system``: the kernel's openvswitch datapath (``datapath_type=system``): packets are
  switched in the kernel, ovs-vswitchd only sees a flow's first packet;
- ``netdev``: OVS's user-space datapath (``datapath_type=netdev``): every packet passes
  through ovs-vswitchd (works on any kernel, costs CPU);
- ``auto`` (default): ``system`` where the kernel provides it, else ``netdev``.

The kernel provides it when its generic-netlink family ``ovs_datapath`` resolves (asked
through pyroute2), after ``modprobe openvswitch`` was tried once (a kernel without module
loading, or without the module, makes modprobe fail: that is an answer, not an error). The
family is global but its datapaths are per network namespace: each switch's ovs-vswitchd
runs in the switch's namespace and makes its datapath ``ovs-system`` there, so it goes with
that namespace.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from dataclasses import dataclass

from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST, genlmsg
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.generic import GenericNetlinkSocket

from models.errors import LabError
from models.plan import LabPlan

__all__ = ["KERNEL", "USERSPACE", "FAMILY", "USERSPACE_PROGRAMS", "KernelDatapath",
           "kernel_datapath", "userspace_problems", "program_problems", "datapaths_here",
           "choose", "choose_for_lab", "OvsDpMsg", "netem_into", "check_delay_line"]

KERNEL, USERSPACE = "system", "netdev"
FAMILY = "ovs_datapath"
USERSPACE_PROGRAMS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl")
TUN = "/dev/net/tun"  # the bridge's own (internal) port of a netdev datapath is a tap device
_MODPROBE_TIMEOUT_S = 30.0
_cache: list[KernelDatapath] = []


@dataclass(frozen=True)
class KernelDatapath:
    """Whether this kernel has the openvswitch datapath (``present``) and what was seen."""

    present: bool
    detail: str


def _modprobe(module: str) -> str:
    """Try ``modprobe MODULE`` (root only); what happened, as a phrase."""
    if os.geteuid() != 0:
        return "modprobe not tried (not root)"
    if shutil.which("modprobe") is None:
        return "no modprobe on PATH"
    try:
        res = subprocess.run(["modprobe", module], capture_output=True, text=True,
                             timeout=_MODPROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"modprobe {module} timed out after {_MODPROBE_TIMEOUT_S:g} s"
    if res.returncode != 0:
        return (f"modprobe {module} exited {res.returncode}: "
                f"{res.stderr.strip()[:200] or 'no message'}")
    return f"modprobe {module} ok"


def _family_resolves() -> tuple[bool, str]:
    """(the genl family :data:`FAMILY` resolves, what the kernel said). Raises LabError for
    an errno other than ENOENT (the family is unknown)."""
    sock = GenericNetlinkSocket()
    sock.module_err_level = "debug"  # absence is an answer here, not an error to log
    try:
        sock.discovery(FAMILY)
    except NetlinkError as exc:
        if exc.code != errno.ENOENT:
            raise LabError(f"asking the kernel for the genl family {FAMILY} failed: errno "
                           f"{exc.code} ({os.strerror(exc.code)})") from exc
        return False, f"genl family {FAMILY}: {os.strerror(exc.code)}"
    finally:
        sock.close()
    return True, f"genl family {FAMILY} resolved"


def kernel_datapath() -> KernelDatapath:
    """Whether the kernel provides the openvswitch datapath; tries ``modprobe openvswitch``
    first (root only; its failure is fine) unless the family already resolves. Cached per
    process. Raises LabError when the kernel answers the family lookup unexpectedly."""
    if not _cache:
        present, said = _family_resolves()
        if not present:
            tried = _modprobe("openvswitch")
            present, said = _family_resolves()
            said = f"{tried}; {said}"
        _cache.append(KernelDatapath(present, said))
    return _cache[0]


class OvsDpMsg(genlmsg):
    """A message of the ``ovs_datapath`` family: genl header, then ``struct ovs_header``
    (``dp_ifindex``), then attributes (include/uapi/linux/openvswitch.h)."""

    fields = (*genlmsg.fields, ("dp_ifindex", "i"))
    nla_map = (("OVS_DP_ATTR_UNSPEC", "none"), ("OVS_DP_ATTR_NAME", "asciiz"),
               ("OVS_DP_ATTR_UPCALL_PID", "uint32"), ("OVS_DP_ATTR_STATS", "hex"))


OVS_DP_CMD_GET, OVS_DATAPATH_VERSION = 3, 2  # include/uapi/linux/openvswitch.h


def datapaths_here() -> list[str]:
    """Names of the kernel's OVS datapaths in the calling thread's network namespace (a dump
    of the ``ovs_datapath`` family; each namespace sees only its own). [] when the kernel has
    no such family. Run it in a namespace with :func:`testbed.ns.netns.run_in`."""
    sock = GenericNetlinkSocket()
    sock.module_err_level = "debug"
    try:
        try:
            sock.bind(FAMILY, OvsDpMsg)
        except NetlinkError as exc:
            if exc.code == errno.ENOENT:
                return []
            raise
        msg = OvsDpMsg()
        msg["cmd"], msg["version"], msg["dp_ifindex"] = OVS_DP_CMD_GET, OVS_DATAPATH_VERSION, 0
        return [m.get_attr("OVS_DP_ATTR_NAME") for m in sock.nlm_request(
            msg, msg_type=sock.prid, msg_flags=NLM_F_REQUEST | NLM_F_DUMP)]
    finally:
        sock.close()


def userspace_problems() -> list[str]:
    """What the user-space datapath lacks here (missing OVS programs, no ``/dev/net/tun``
    even after trying ``modprobe tun``: a stock kernel booted without udev, as in aitb's VM,
    has the device node only once the module is loaded); [] when it can run."""
    out = program_problems()
    if not os.path.exists(TUN):
        tried = _modprobe("tun")
        if not os.path.exists(TUN):
            out.append(f"no {TUN} (the bridge's internal port is a tap device; {tried})")
    return out


def program_problems() -> list[str]:
    """The OVS programs every OVS switch needs (either datapath) that are not on PATH."""
    return [f"{p} not on PATH (apt-get install openvswitch-switch)"
            for p in USERSPACE_PROGRAMS if shutil.which(p) is None]


def choose(plan: LabPlan, kernel_has_it: bool) -> dict[str, str]:
    """switch -> ``system``/``netdev`` for every OVS switch of ``plan`` (pure): ``auto``
    takes ``system`` if ``kernel_has_it``, else ``netdev``. Raises LabError naming every
    switch that asks for ``system`` when the kernel lacks it, or a ``netdev`` switch with a
    delay line into it (:func:`check_delay_line`)."""
    want = {n.name: n.ovs_datapath for n in plan.nodes
            if n.kind == "switch" and n.datapath == "ovs"}
    refused = sorted(s for s, d in want.items() if d == KERNEL and not kernel_has_it)
    if refused:
        raise LabError(f"node(s) {', '.join(refused)}: ovs_datapath: system needs the "
                       "kernel's openvswitch datapath, which this kernel lacks (genl family "
                       f"{FAMILY} unknown); use ovs_datapath: auto or netdev, or run under "
                       "`aitb --vm ...` (the stock kernel has it)")
    chosen = {s: (KERNEL if kernel_has_it else USERSPACE) if d == "auto" else d
              for s, d in want.items()}
    for s in sorted(x for x, d in chosen.items() if d == USERSPACE):
        check_delay_line(s, netem_into(plan, s))
    return chosen


def netem_into(plan: LabPlan, node: str) -> list[str]:
    """Names of the links whose direction towards ``node`` needs a delay line (netem on an
    IFB fed by ``node``'s ingress qdisc, :mod:`testbed.tc.recipe`); the native line sits on the
    sender's side of such a link (:mod:`testbed.delay.nfqueue.labline`) and is not counted."""
    return [lk.name for lk in plan.links if lk.delay_line != "native"
            and ((lk.b.node == node and lk.a_to_b.needs_netem)
                 or (lk.a.node == node and lk.b_to_a.needs_netem))]


def check_delay_line(node: str, links: list[str]) -> None:
    """Refuse a delay line into a port of user-space OVS switch ``node`` (``links``: the
    links concerned, none: nothing to refuse). That datapath reads each port through a
    packet socket, which the kernel serves before the ingress qdisc (net/core/dev.c,
    ``__netif_receive_skb_core``: taps, then ``sch_handle_ingress``), and again when the IFB
    hands the delayed packet back: every packet would be forwarded twice, once without the
    delay (seen in the TCG VM: 36.7 ms ping RTT through four 10 ms crossings). Raises
    LabError naming the node and links."""
    if links:
        raise LabError(f"node {node}: link(s) {', '.join(links)} need a delay line (netem) "
                       "towards this OVS switch, which OVS's user-space datapath (netdev) "
                       "would bypass (it reads packets before the kernel's ingress qdisc); "
                       "use ovs_datapath: system or auto on a kernel with the openvswitch "
                       "datapath (`aitb --vm ...`), or shape only the switch's egress")


def choose_for_lab(plan: LabPlan) -> dict[str, str]:
    """:func:`choose` on this kernel (probed only when a switch may use it), for bring-up:
    call before anything exists. Raises LabError as :func:`choose` does, or naming the
    switches and what this host lacks for their datapath (OVS programs, ``/dev/net/tun``)."""
    ovs = [n for n in plan.nodes if n.kind == "switch" and n.datapath == "ovs"]
    if not ovs:
        return {}
    kernel_has_it = (any(n.ovs_datapath != USERSPACE for n in ovs)
                     and kernel_datapath().present)
    chosen = choose(plan, kernel_has_it)
    users = sorted(s for s, d in chosen.items() if d == USERSPACE)
    problems = userspace_problems() if users else program_problems()
    if problems:
        who = users or sorted(chosen)
        raise LabError(f"node(s) {', '.join(who)}: Open vSwitch cannot run here: "
                       f"{'; '.join(problems)}")
    return chosen
