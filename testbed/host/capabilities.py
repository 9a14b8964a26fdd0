"""What this host can emulate, found by trying it, not by reading kernel config files.

Link kinds are probed in ONE throwaway network namespace (``aitb-probe-<pid>.<start>-<hex>``),
removed afterwards also on error: veth, bridge and IFB links are created there; ENOENT or
EOPNOTSUPP from the kernel means absent, any other error means the probe itself is wrong and
is raised. qdisc kinds come from :func:`testbed.host.kernel.missing_features`, the probe that also
guards a lab's bring-up (in an anonymous namespace that vanishes with its socket). Programs
are looked up on PATH; the VM path is checked by :func:`testbed.vm.kernel.vm_problems`
(boots nothing).

``python -m testbed.host.capabilities --has netem`` exits 0 when the host has every named capability
(used by scripts/setup.sh to decide whether to install the VM path).
"""

from __future__ import annotations

import errno
import functools
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pyroute2 import NetNS, netns
from pyroute2.netlink.exceptions import NetlinkError

from models.errors import LabError
from models.owned import owned_name
from testbed.host import kernel
from testbed.host.probe_result import Capability
from testbed.ovs import datapath as ovs_datapath
from testbed.tc import qdiscs
from testbed.vm.kernel import SETUP_REMEDY, vm_problems

__all__ = ["Capability", "CapabilityReport", "probe", "probe_kernel", "needs_vm", "require_kernel",
           "in_vm",
           "QDISCS", "LINK_KINDS", "PROGRAMS"]

ABSENT_ERRNOS = {errno.ENOENT, errno.EOPNOTSUPP}
VM_HINT = "run under `aitb --vm ...` (`make vm` installs the stock-kernel VM)"

# qdisc kinds (each discipline module of testbed.tc.qdiscs names its own), probed by
# testbed.host.kernel (the same probe that guards a lab's bring-up, so `aitb doctor` and
# `aitb topo deploy` can never disagree)
QDISCS: tuple[str, ...] = qdiscs.capabilities()
LINK_KINDS: dict[str, dict[str, object]] = {
    "veth": {"peer": "aitbprb1"},
    "bridge": {},
    "ifb": {},
}
PROGRAMS = ("tcpdump", "iperf3", "tshark")
APT_NAME = {"tcpdump": "tcpdump", "iperf3": "iperf3", "tshark": "tshark"}


@dataclass(frozen=True)
class CapabilityReport:
    """Everything probed on one host; ``in_vm`` is ``"kvm"``/``"tcg"`` inside aitb's VM."""

    kernel_release: str
    in_vm: str | None
    capabilities: dict[str, Capability] = field(default_factory=dict)

    def missing(self) -> list[str]:
        """Names of the absent capabilities, in probe order."""
        return [c.name for c in self.capabilities.values() if not c.present]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: ``capabilities`` {name: bool}, ``remedies`` {missing name: text}, ..."""
        caps = self.capabilities.values()
        return {
            "kernel_release": self.kernel_release,
            "in_vm": self.in_vm,
            "capabilities": {c.name: c.present for c in caps},
            "remedies": {c.name: c.remedy for c in caps if not c.present},
            "details": {c.name: c.detail for c in caps if c.detail},
        }


def in_vm() -> str | None:
    """``"kvm"`` or ``"tcg"`` when running inside aitb's stock-kernel VM, else None."""
    return os.environ.get("AITB_IN_VM") or None


def _is_root() -> bool:
    return os.geteuid() == 0


def _kernel_remedy(name: str) -> str:
    return f"host kernel lacks {name}: {VM_HINT}"


def _absent_or_raise(exc: NetlinkError, what: str) -> str:
    if exc.code in ABSENT_ERRNOS:
        return os.strerror(exc.code)
    raise LabError(f"capability probe {what} failed unexpectedly: "
                   f"errno {exc.code} ({os.strerror(exc.code)})") from exc


def _probe_qdiscs() -> list[Capability]:
    missing = set(kernel.missing_features(set(QDISCS)))
    return [Capability(k, False, "the kernel does not know this qdisc kind",
                       _kernel_remedy(f"sch_{k}")) if k in missing
            else Capability(k, True, "the kernel knows this qdisc kind") for k in QDISCS]


def _probe_link(ns: NetNS, kind: str, args: dict[str, object]) -> Capability:
    try:
        ns.link("add", ifname=f"aitbprb-{kind}"[:15], kind=kind, **args)
    except NetlinkError as exc:
        return Capability(kind, False, _absent_or_raise(exc, f"link kind {kind}"),
                          _kernel_remedy(f"{kind} links"))
    return Capability(kind, True, "created in the probe namespace")


def _probe_ovs_system() -> Capability:
    found = ovs_datapath.kernel_datapath()
    return Capability("ovs_system", found.present, found.detail, None if found.present else
                      _kernel_remedy("the openvswitch kernel datapath (OVS switches use the "
                                     "user-space one here)"))


def _probe_ovs(kernel_caps: dict[str, Capability]) -> list[Capability]:
    """``ovs_netdev`` (OVS's user-space datapath can run: programs, /dev/net/tun) and
    ``openvswitch`` (OVS switches work here, on either datapath)."""
    problems = ovs_datapath.userspace_problems()
    netdev = Capability("ovs_netdev", not problems,
                        "; ".join(problems) or "OVS programs and /dev/net/tun present",
                        "apt-get install openvswitch-switch" if problems else None)
    system = kernel_caps.get("ovs_system")
    datapaths = [n for n, ok in (("system", system is not None and system.present
                                  and not ovs_datapath.program_problems()),
                                 ("netdev", netdev.present)) if ok]
    usable = Capability("openvswitch", bool(datapaths),
                        f"datapaths: {', '.join(datapaths) or 'none'} (ovs_datapath: auto "
                        "takes system where present)", None if datapaths else netdev.remedy)
    return [netdev, usable]


def _in_throwaway_netns(body: Callable[[NetNS], list[Capability]]) -> list[Capability]:
    name = owned_name("probe", secrets.token_hex(3))  # a SIGKILL here: `aitb clean` removes it
    try:
        ns = NetNS(name, flags=os.O_CREAT | os.O_EXCL)
    except (OSError, NetlinkError) as exc:
        if name in netns.listnetns():
            netns.remove(name)
        return [Capability("netns", False, f"cannot create a namespace: {exc}",
                           _kernel_remedy("network namespaces"))]
    try:
        return [Capability("netns", True, "created and removed a throwaway namespace"),
                *body(ns)]
    finally:
        ns.close()
        netns.remove(name)


def _probe_in_netns(ns: NetNS) -> list[Capability]:
    return [_probe_link(ns, kind, args) for kind, args in LINK_KINDS.items()]


@functools.lru_cache(maxsize=1)
def probe_kernel() -> tuple[Capability, ...]:
    """Probe netns, link kinds, qdiscs and the openvswitch kernel datapath (``ovs_system``,
    after trying ``modprobe openvswitch``; see :mod:`testbed.ovs.datapath`); cached per
    process.

    Needs root; without it every kernel capability is reported absent with remedy "run as root".
    Side effects: creates and removes one namespace ``aitb-probe-<pid>.<start>-<hex>``
    (models.owned: left by a SIGKILL, ``aitb clean`` removes it).

    Raises:
        LabError: when the kernel answers a probe with an unexpected errno.
    """
    names = ["netns", *LINK_KINDS, *QDISCS, "ovs_system"]
    if not _is_root():
        return tuple(Capability(n, False, "not probed: needs root",
                                "run aitb as root (sudo): namespaces and tc need CAP_NET_ADMIN")
                     for n in names)
    caps = _in_throwaway_netns(_probe_in_netns)
    if caps[0].present:
        caps += _probe_qdiscs()
    else:
        caps += [Capability(n, False, "no namespace to probe in", caps[0].remedy)
                 for n in names[1:-1]]
    return (*caps, _probe_ovs_system())


def _probe_programs() -> list[Capability]:
    return [Capability(p, shutil.which(p) is not None, shutil.which(p) or "not on PATH",
                       f"apt-get install {APT_NAME[p]}") for p in PROGRAMS]


def _probe_vm() -> Capability:
    problems = vm_problems()
    if problems:
        return Capability("vm", False, "; ".join(problems), SETUP_REMEDY)
    return Capability("vm", True, "qemu, vng and the stock kernel are installed")


def probe() -> CapabilityReport:
    """Probe everything aitb may need on this host: root, kernel, programs, the VM path.

    Returns:
        A report whose capabilities are, in order: root, netns, veth, bridge, ifb, the qdiscs
        of :data:`QDISCS`, ovs_system (the kernel's OVS datapath), ovs_netdev (OVS's
        user-space datapath), openvswitch (OVS switches work, on either), wireguard, esp and
        ktls (in-kernel encryption, testbed.host.crypto), the programs of :data:`PROGRAMS`,
        vm.

    Raises:
        LabError: a probe failed in an unexpected way (see :func:`probe_kernel`).
    """
    root = Capability("root", _is_root(), f"euid {os.geteuid()}",
                      "run aitb as root (sudo): namespaces and tc need CAP_NET_ADMIN")
    from testbed.host.crypto import probe_crypto  # not at import: doctor-only probes

    kernel_caps = probe_kernel()
    caps = [root, *kernel_caps, *_probe_ovs({c.name: c for c in kernel_caps}),
            *probe_crypto(), *_probe_programs(), _probe_vm()]
    caps += _probe_delay_lines({c.name: c for c in caps})
    return CapabilityReport(os.uname().release, in_vm(), {c.name: c for c in caps})


def _probe_delay_lines(caps: dict[str, Capability]) -> list[Capability]:
    """``delay_line_netem`` (netem and IFB in this kernel) and ``delay_line_native`` (iptables
    NFQUEUE in a namespace and the compiled helper, testbed/delay/nfqueue): the delay lines a lab
    can use here (``delay_line: auto`` takes netem, else native)."""
    from testbed.delay.nfqueue.choose import native_problem

    netem = caps["netem"].present and caps["ifb"].present
    problem = native_problem() if caps["root"].present else "needs root to probe"
    return [Capability("delay_line_netem", netem, "netem on an IFB" if netem else
                       "this kernel lacks netem or IFB",
                       "use the native delay line (delay_line: native or auto), or `aitb --vm`"),
            Capability("delay_line_native", problem is None,
                       problem or "NFQUEUE helper (user space)",
                       "apt-get install iptables libnetfilter-queue-dev libmnl-dev gcc; "
                       "python -m testbed.delay.nfqueue.build")]


def delay_lines_offered(report: CapabilityReport) -> list[str]:
    """Names of the delay lines this host offers (``netem``, ``native``), from ``report``."""
    return [n for n in ("netem", "native")
            if report.capabilities.get(f"delay_line_{n}", Capability(n, False)).present]


def needs_vm(required: Iterable[str]) -> bool:
    """True when this host lacks one of the ``required`` kernel capabilities (e.g. {"netem"}).

    Inside aitb's VM it is always False (the VM is the answer already). Probes the kernel once
    per process (needs root; see :func:`probe_kernel`).

    Raises:
        ValueError: a name that is not a kernel capability probed here.
    """
    kernel = {c.name: c for c in probe_kernel()}
    unknown = set(required) - kernel.keys()
    if unknown:
        raise ValueError(f"unknown kernel capabilities {sorted(unknown)}; "
                         f"known: {sorted(kernel)}")
    return in_vm() is None and any(not kernel[n].present for n in required)


def require_kernel(required: Iterable[str], *, what: str = "this lab") -> None:
    """Check that the kernel here has every ``required`` capability (e.g. {"netem", "htb"}).

    For commands that realise a plan: call before creating anything.

    Raises:
        LabError: naming each missing capability and offering ``aitb --vm`` (which re-runs the
            same command on the stock kernel), or ``make vm`` when the VM is not installed.
    """
    if not needs_vm(required):
        return
    kernel = {c.name: c for c in probe_kernel()}
    missing = sorted(n for n in required if not kernel[n].present)
    raise LabError(f"{what} needs {', '.join(missing)}, which the kernel here "
                   f"({os.uname().release}) lacks: re-run the same command as `aitb --vm ...` "
                   f"to run it on the stock kernel in a VM (`make vm` installs it)")


MISSING_EXIT = 3


def main(argv: list[str]) -> int:
    """``--has NAME...``: exit 0 if all are present, 3 if one is absent (prints which).

    Any other status (2 usage, 1 a failed probe) means the probe did not answer.
    """
    if len(argv) < 2 or argv[0] != "--has":
        print("usage: python -m testbed.host.capabilities --has NAME...", file=sys.stderr)
        return 2
    report = probe()
    missing = [n for n in argv[1:] if n not in report.capabilities
               or not report.capabilities[n].present]
    for name in missing:
        cap = report.capabilities.get(name)
        print(f"missing {name}: {cap.remedy if cap else 'unknown capability'}", file=sys.stderr)
    return MISSING_EXIT if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
