"""A carrier change seen by the kernel's routing at once, not when its linkwatch work runs.

When a veth end goes down its peer loses the carrier at once (``netif_carrier_off`` in
``veth_close``), but what follows from that is deferred to the kernel's linkwatch work
(net/core/link_watch.c): the peer's qdisc is deactivated (``dev_deactivate``) and the
``NETDEV_CHANGE`` notifier flags its next hops ``RTNH_F_LINKDOWN`` (IPv4 ``fib_sync_down_dev``,
IPv6 ``rt6_sync_down_dev``), removes its nexthop objects (``nexthop_flush_dev``: FRR's routes)
and disables a bridge port. Until that work has run, the peer's node keeps routing into the
link (the veth drops what it is given: ``tx_dropped``), for as long as the worker (a normal
priority kernel thread) waits for a CPU on a loaded machine.

``ETHTOOL_GLINK`` on the peer runs that pending work in the caller's request:
``ethtool_op_get_link`` (the veth driver's ``get_link``) calls ``linkwatch_sync_dev``, which
takes the device's event off the linkwatch list and processes it under the RTNL (or, if the
worker has it already, waits for the RTNL the worker holds), so when the ioctl returns the
peer no longer sends into the link: its qdisc is the no-op one and its routes skip it.

Needs root (the namespace); the ioctl is pyroute2's ethtool structures on a socket made in
the node's namespace.
"""

from __future__ import annotations

import ctypes
import socket

from pyroute2.ethtool.ioctl import EthtoolError, EthtoolValue, IoctlEthtool

from models.errors import LabError
from testbed.ns.netns import run_in

__all__ = ["CarrierSync", "ETHTOOL_GLINK"]

ETHTOOL_GLINK = 0x0000000A  # include/uapi/linux/ethtool.h: get link status (ethtool_value)


def _dgram() -> socket.socket:
    return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


class CarrierSync:
    """The ``ETHTOOL_GLINK`` ioctl on interfaces of one namespace (``fd``, ``what`` names the
    node in errors). The socket is made at construction (a helper thread enters the
    namespace: ~0.1-0.3 ms), so :meth:`sync` is one system call. Close with :meth:`close`."""

    def __init__(self, fd: int, what: str) -> None:
        self.what = what
        self.sock = run_in(fd, _dgram)

    def sync(self, ifname: str) -> bool:
        """Make the kernel process ``ifname``'s pending carrier change now (see the module
        docstring); return its carrier as the kernel sees it after that. Raises LabError
        naming the node and interface when the ioctl fails (no such interface)."""
        eth = IoctlEthtool.__new__(IoctlEthtool)  # its ifreq, on our socket (no socket of its own)
        eth.sock, eth.stat_names = self.sock, None
        eth.change_ifname(ifname)
        value = EthtoolValue(cmd=ETHTOOL_GLINK)
        eth.ifreq.value = ctypes.pointer(value)
        try:
            eth.ioctl()
        except (OSError, EthtoolError) as e:
            raise LabError(f"{self.what}: ETHTOOL_GLINK on {ifname} failed: {e}") from e
        return bool(value.data)

    def close(self) -> None:
        """Close the socket (the namespace is left as it was)."""
        self.sock.close()
