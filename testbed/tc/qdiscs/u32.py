"""The u32 classifier with a mirred redirect action (cls_u32, act_mirred): match every packet
arriving on an interface and redirect it to a device (the IFB of a delay line). A filter:
not probed (testbed.host.kernel probes qdiscs), not read back (filters have no counters we use)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyroute2.netlink.rtnl.tcmsg import cls_u32

from testbed.tc.qdiscs.common import TcLike

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "words", "options", "problems", "stats"]

KINDS = ("u32",)
CAPABILITIES: tuple[str, ...] = ()
KMODS = ("cls_u32", "act_mirred")
NLA: dict[str, Any] = {}


def words(o: TcLike) -> list[str]:
    """``protocol all prio P u32 match u32 0 0 action mirred egress redirect dev D``."""
    return ["protocol", "all", "prio", str(o.params["prio"]), "u32", "match", "u32", "0", "0",
            "action", "mirred", "egress", "redirect", "dev", o.params["redirect_dev"]]


def options(o: TcLike, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    """Match-all key and the mirred action to ``redirect_dev`` (resolved by ``ifindex_of``)."""
    return cls_u32.get_parameters({"target": 0x10001, "keys": ["0x0/0x0+0"], "action": {
        "kind": "mirred", "direction": "egress", "action": "redirect",
        "ifindex": ifindex_of(o.params["redirect_dev"])}})


def problems(o: TcLike, opts: Any) -> list[str]:
    """Filters are not read back."""
    return []


def stats(opts: Any) -> dict[str, Any]:
    """Nothing beyond the counters."""
    return {}
