"""What the running kernel can do, probed in a throwaway namespace (nothing is left behind).

A qdisc kind the kernel lacks is refused with ENOENT ("Specified qdisc kind is unknown");
a present kind with missing options gives another error or succeeds. The probe runs on ``lo``
of an anonymous namespace that a helper thread unshares and that vanishes with its socket.
"""

from __future__ import annotations

import ctypes
import errno
import socket

from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from testbed.ns import netns
from testbed.ns.nl import F_CREATE, F_EXCL, Batch
from testbed.tc.msgs import RTM_NEWQDISC, TC_H_INGRESS, TC_H_ROOT, TcMsg

__all__ = ["missing_features", "VM_HINT"]

VM_HINT = ("run the same command inside the stock-kernel VM: `aitb --vm ...` "
           "(see `aitb doctor`)")
_cache: dict[str, bool] = {}


def _probe_msgs(kinds: list[str]) -> list[tuple[str, object, int]]:
    out: list[tuple[str, object, int]] = []
    for kind in kinds:
        if kind == "ifb":
            m = ifinfmsg()
            m["attrs"] = [["IFLA_IFNAME", "aitbprobe"],
                          ["IFLA_LINKINFO", {"attrs": [["IFLA_INFO_KIND", "ifb"]]}]]
            out.append((kind, m, 16))
            continue
        m = TcMsg()
        m["index"] = 1
        m["parent"] = TC_H_INGRESS if kind == "ingress" else TC_H_ROOT
        m["handle"] = 0xFFFF0000 if kind == "ingress" else 0x10000
        m["attrs"] = [["TCA_KIND", kind]]
        out.append((kind, m, RTM_NEWQDISC))
    return out


def _probe(kinds: list[str]) -> dict[str, bool]:
    if ctypes.CDLL(None, use_errno=True).unshare(netns.CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) for the kernel probe")
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, netns.NETLINK_ROUTE)
    try:
        result = {}
        for kind, msg, mtype in _probe_msgs(kinds):
            # one request per batch: an earlier qdisc on lo must not make a later one fail
            batch = Batch(sock, "kernel probe")
            batch.add(msg, mtype, F_CREATE | F_EXCL, kind)  # type: ignore[arg-type]
            fails = batch.commit(tolerate=frozenset(range(1, 200)))
            result[kind] = not fails or fails[0].code not in (errno.ENOENT, errno.EOPNOTSUPP)
            _reset_lo(sock)
        return result
    finally:
        sock.close()


def _reset_lo(sock: socket.socket) -> None:
    for parent in (TC_H_ROOT, TC_H_INGRESS):
        m = TcMsg()
        m["index"], m["parent"] = 1, parent
        batch = Batch(sock, "kernel probe")
        batch.add(m, 37, 0, "delete probe qdisc")
        batch.commit(tolerate=frozenset(range(1, 200)))


def missing_features(kinds: set[str]) -> list[str]:
    """The names in ``kinds`` (qdisc kinds, or ``ifb``) the kernel lacks, sorted. Filters and
    actions (u32, mirred) are not probed. Needs root; results are cached per process."""
    todo = sorted(k for k in kinds if k not in _cache and k not in ("u32",))
    if todo:
        _cache.update(netns.run_in(None, _probe, todo))
    return sorted(k for k in kinds if k in _cache and not _cache[k])
