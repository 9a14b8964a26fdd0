"""Mininet's side of the Mininet backend: importing it, its node classes, and its objects.

Mininet (Debian's ``mininet`` package, pure Python plus the ``mnexec`` helper) is made
importable from the project's venv by scripts/setup.sh (a symlink of the ``mininet`` package
directory only). Every Mininet node here lives in its own network namespace: a
``mnexec -cdn bash`` shell whose namespace aitb then bind-mounts as ``aitb-<run_id>-<node>``,
so nothing of a lab is made in the host's namespace. Mininet's own switch start-up (``brctl``
through a shell, exit status discarded) is replaced: :class:`AitbBridge` is a Mininet
``LinuxBridge`` whose bridge aitb creates and checks through netlink.
"""

from __future__ import annotations

import os
import resource
import signal
from typing import Any

from models.errors import LabError

__all__ = ["mininet_api", "AitbBridge", "AitbIntf", "AitbOVS", "new_net", "end_node", "SETUP_HINT"]

SETUP_HINT = ("install Debian's mininet package and link it into the venv with "
              "scripts/setup.sh")
_FDS_PER_NODE = 8  # pty pair, poll object, namespace fd, rtnetlink socket, slack


def mininet_api() -> dict[str, Any]:
    """Mininet's classes (``Mininet``, ``Host``, ``LinuxBridge``, ``OVSSwitch``, ``Link``,
    ``CLI``, ``RemoteController``). Raises LabError with the setup hint if Mininet is not
    importable from this Python."""
    try:
        from mininet.cli import CLI
        from mininet.link import Intf, Link
        from mininet.net import Mininet
        from mininet.node import Host, OVSSwitch, RemoteController
        from mininet.nodelib import LinuxBridge
    except ImportError as exc:
        raise LabError(f"the mininet backend needs Mininet: {exc}; {SETUP_HINT}") from None
    return {"Mininet": Mininet, "Host": Host, "LinuxBridge": LinuxBridge,
            "OVSSwitch": OVSSwitch, "Link": Link, "Intf": Intf, "CLI": CLI,
            "RemoteController": RemoteController}


class _LabMadeSwitch:
    """Mixin (first base) of Mininet switch classes whose switch the lab makes, configures,
    starts and stops itself (testbed.mininet.backend, testbed.ovs.switches): Mininet's own class
    set-up, start and stop do nothing, and the switch counts as connected."""

    @classmethod
    def setup(cls) -> None:
        return None

    def start(self, _controllers: Any) -> None:
        return None

    def stop(self, deleteIntfs: bool = False) -> None:  # noqa: N803 - Mininet's name
        return None

    def connected(self) -> bool:
        return True


def _bridge_class() -> type:
    base = mininet_api()["LinuxBridge"]

    class _AitbBridge(_LabMadeSwitch, base):  # type: ignore[misc, valid-type]
        """A Mininet LinuxBridge in its own namespace whose bridge ``br0`` aitb made and
        enslaved through netlink (verified by readback); start/stop do nothing here. (Mininet
        checks the host's bridge-nf-call-* sysctls in ``setup``; aitb turns them off inside
        each switch's namespace, testbed.ns.sysctl, so there is nothing to check in the host's.)"""

        def dpctl(self, *args: Any) -> Any:
            """``brctl ARGS`` in the switch's namespace (Mininet CLI ``dpctl``)."""
            return self.cmd("brctl", *args)

    return _AitbBridge


def _intf_class() -> type:
    base = mininet_api()["Intf"]

    class _AitbIntf(base):  # type: ignore[misc, valid-type]
        """A Mininet interface object whose settings (up, MAC, MTU, address) aitb makes
        through netlink; Mininet's own ``ifconfig`` calls per interface are skipped."""

        def config(self, **_params: Any) -> dict[str, Any]:
            return {}

    return _AitbIntf


def _ovs_class() -> type:
    base = mininet_api()["OVSSwitch"]

    class _AitbOVS(_LabMadeSwitch, base):  # type: ignore[misc, valid-type]
        """A Mininet OVSSwitch in its own namespace, run by the lab's own ovsdb-server/
        ovs-vswitchd there (testbed.ovs.switches) with the datapath testbed.ovs.datapath chose
        (``datapath``: Mininet's ``kernel`` or ``user``): Mininet's start-up through
        unchecked ``ovs-vsctl`` shell commands against the host's default database is
        replaced by aitb's checked configuration; ``dpctl`` reaches the lab's daemons."""

        ovs: Any = None  # testbed.ovs.switches.OvsDaemons, set by the lab once they run

        def __init__(self, name: str, datapath: str = "user", **params: Any) -> None:
            super().__init__(name, datapath=datapath, failMode="secure",
                             protocols="OpenFlow13", **params)

        @classmethod
        def batchStartup(cls, switches: Any, run: Any = None) -> Any:  # noqa: N802
            return switches

        @classmethod
        def batchShutdown(cls, switches: Any, run: Any = None) -> Any:  # noqa: N802
            return switches

        def dpctl(self, *args: Any) -> Any:
            """``ovs-ofctl -O OpenFlow13 CMD <this bridge> ARGS`` (Mininet CLI ``dpctl``)."""
            from testbed.ovs.switches import ofctl

            return ofctl(self.ovs, str(args[0]), *map(str, args[1:]))

    return _AitbOVS


_BRIDGE: type | None = None
_INTF: type | None = None
_OVS: type | None = None


def AitbOVS() -> type:  # noqa: N802 - reads like the class it returns
    """The :class:`mininet.node.OVSSwitch` subclass of OVS switches (built on first use)."""
    global _OVS
    if _OVS is None:
        _OVS = _ovs_class()
    return _OVS


def AitbIntf() -> type:  # noqa: N802 - reads like the class it returns
    """The :class:`mininet.link.Intf` subclass of every lab interface (built on first use)."""
    global _INTF
    if _INTF is None:
        _INTF = _intf_class()
    return _INTF


def AitbBridge() -> type:  # noqa: N802 - reads like the class it returns
    """The :class:`mininet.nodelib.LinuxBridge` subclass used for plan switches (built on
    first use, so that importing this module does not need Mininet)."""
    global _BRIDGE
    if _BRIDGE is None:
        _BRIDGE = _bridge_class()
    return _BRIDGE


def new_net(n_nodes: int, controller: Any = None) -> Any:
    """An empty ``Mininet`` object (no topology, not built) with ``controller`` (a Mininet
    controller object or None). Mininet's one-time ``init()`` is skipped: it raises global
    sysctls of the host (neighbour tables, socket buffers), which aitb must not change; only
    this process's open-file limit is raised, to fit ``n_nodes`` nodes."""
    api = mininet_api()
    _raise_nofile(n_nodes * _FDS_PER_NODE + 256)
    api["Mininet"].inited = True
    net = api["Mininet"](topo=None, switch=AitbBridge(), host=api["Host"], controller=None,
                         link=api["Link"], intf=AitbIntf(), build=False, cleanup=False)
    if controller is not None:
        net.addController(controller)
    return net


def _raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(hard, need)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def end_node(node: Any) -> None:
    """End a Mininet node's shell and what it runs: SIGKILL to its process group (the shell
    is a session leader, ``mnexec -d``), reap it, close Mininet's pty. Never raises for a
    shell that is already gone."""
    shell = getattr(node, "shell", None)
    if shell is not None and shell.poll() is None:
        try:
            os.killpg(shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shell.wait(timeout=10)
    node.cleanup()
