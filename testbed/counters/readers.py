"""Read one namespace's counters through netlink: qdisc statistics (RTM_GETQDISC dump),
interface counters (RTM_GETSTATS dump, 64-bit link stats only) and TCP_INFO of its TCP sockets
(sock_diag, ``SOCK_DIAG_BY_FAMILY`` with ``INET_DIAG_INFO``).

Every request is encoded and every answer decoded by pyroute2 message classes: trimmed
subclasses that declare only the attributes the sampler writes (:mod:`testbed.counters.msgs`),
split by pyroute2's ``Marshal``. Sockets are opened once per namespace and reused for every
sample. An answer whose bytes are the same as in the previous sample (an idle qdisc or
interface) is not decoded again (identical bytes decode to identical values).

Cost on this host kernel: a TCP dump walks the kernel's whole established-socket hash table
(262144 buckets here, shared by all namespaces unless ``net.ipv4.tcp_child_ehash_entries`` was
set when the namespace was made), about 1-2 ms per host namespace whatever the number of
sockets; qdisc and link dumps cost about 0.1 ms per namespace in the kernel. In Python, an
unchanged answer costs about 1 us, pyroute2's decoding of a changed one about 15 us (link
stats) to 45 us (a qdisc), measured here on a loaded 2-core host. See
bench/counter_sampler.py.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from pyroute2.netlink.diag import NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY
from pyroute2.netlink.rtnl import (
    RTM_GETLINK,
    RTM_GETQDISC,
    RTM_GETSTATS,
    RTM_NEWLINK,
    RTM_NEWQDISC,
    RTM_NEWSTATS,
)

from models.counter_columns import columns
from models.errors import LabError
from testbed.counters.dumps import TCP_STATES, dump, request
from testbed.counters.msgs import (
    LINK64_FIELDS,
    TCP_INFO_FIELDS,
    TCP_INFO_SIZE,
    DiagMsg,
    LinkStatsMsg,
    NameMsg,
    QdiscMsg,
    RowMarshal,
)
from testbed.counters.tcpdiag import TcpReader
from testbed.ns import netns

__all__ = ["NamespaceReader", "QDISC_FIELDS", "LINK_FIELDS", "TCP_FIELDS"]

IFLA_STATS_LINK_64 = 1  # include/uapi/linux/if_link.h; filter bit 1 << (1 - 1)
_RCVBUF = 4 << 20
# the columns each row holds, read from the kernel (models.counter_columns adds when and where)
QDISC_FIELDS = columns("qdisc", read=True)
LINK_FIELDS = columns("links", read=True)
TCP_FIELDS = columns("tcp", read=True)


def handle_text(h: int) -> str:
    """tc's spelling of a handle: ``"1:"``, ``"1:1"``, ``"root"``, ``"ingress"``."""
    if h == 0xFFFFFFFF:
        return "root"
    if h == 0xFFFFFFF1:
        return "ingress"
    major, minor = h >> 16, h & 0xFFFF
    return f"{major:x}:" if minor == 0 else f"{major:x}:{minor:x}"


def _open(fd: int, proto: int) -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, proto)
    sock.setsockopt(socket.SOL_SOCKET, 33, _RCVBUF)  # SO_RCVBUFFORCE: whole dumps
    return sock


def _qdisc_row(m: QdiscMsg) -> tuple[Any, ...] | None:
    kind, st = m.get_attr("TCA_KIND"), m.get_attr("TCA_STATS2")
    if kind is None or st is None or kind == "noqueue":
        return None
    basic = st.get_attr("TCA_STATS_BASIC") or _NO_BASIC
    queue = st.get_attr("TCA_STATS_QUEUE") or _NO_QUEUE
    packets = st.get_attr("TCA_STATS_PKT64")  # present when packets no longer fit 32 bits
    return (m["index"], kind, handle_text(m["handle"]), handle_text(m["parent"]),
            basic["bytes"], basic["packets"] if packets is None else packets, queue["drops"],
            queue["overlimits"], queue["requeues"], queue["backlog"], queue["qlen"])


def _link_row(m: LinkStatsMsg) -> tuple[Any, ...] | None:
    st = m.get_attr("IFLA_STATS_LINK_64")
    return None if st is None else (m["ifindex"], *(st[f] for f in LINK64_FIELDS))


def tcp_row(m: DiagMsg) -> tuple[int, tuple[Any, ...], tuple[Any, ...]] | None:
    """(address family, raw socket id, TCP_FIELDS row) of a sock_diag answer, or None if it
    has no TCP_INFO. Raises LabError if the kernel's tcp_info is too short (before 4.19)."""
    info = m.get_attr("INET_DIAG_INFO")
    if info is None:
        return None
    if info.length - 4 < TCP_INFO_SIZE:
        raise LabError(f"tcp_info of {info.length - 4} bytes lacks tcpi_bytes_sent "
                       "(needs Linux 4.19 or later)")
    rtt, rttvar, cwnd, retrans, lost, acked, sent, rate = (info[f] for f in TCP_INFO_FIELDS)
    state = m["idiag_state"]
    return (m["idiag_family"], m["sockid"], (
        m["idiag_src"], m["idiag_sport"], m["idiag_dst"], m["idiag_dport"],
        TCP_STATES[state] if state < len(TCP_STATES) else "unknown",
        rtt / 1e6, rttvar / 1e6, cwnd, retrans, lost, acked, sent, 8 * rate))


def marshals() -> dict[str, RowMarshal]:
    """One RowMarshal per kind of answer (names, qdiscs, links, tcp); the TCP one does not
    cache (tcp_info's times change in every answer)."""
    rows: dict[str, tuple[int, type, Callable[[Any], Any], bool]] = {
        "names": (RTM_NEWLINK, NameMsg, lambda m: (m["index"], m.get_attr("IFLA_IFNAME")),
                  False),
        "qdiscs": (RTM_NEWQDISC, QdiscMsg, _qdisc_row, True),
        "links": (RTM_NEWSTATS, LinkStatsMsg, _link_row, True),
        "tcp": (SOCK_DIAG_BY_FAMILY, DiagMsg, tcp_row, False)}
    return {k: RowMarshal(*v) for k, v in rows.items()}


def _stats_request() -> bytes:
    msg = LinkStatsMsg()
    msg["filter_mask"] = 1 << (IFLA_STATS_LINK_64 - 1)
    return request(msg, RTM_GETSTATS)


_NO_BASIC = {"bytes": 0, "packets": 0}  # a qdisc without basic or queue stats: zeros
_NO_QUEUE = {k: 0 for k in ("drops", "overlimits", "requeues", "backlog", "qlen")}


class NamespaceReader:
    """The sockets of one node's namespace (opened once, in :meth:`open`) and the last rows.

    node: node name (goes into every row); netns_name: its namespace (``/run/netns``);
    tcp: also read TCP_INFO (hosts). Needs root.
    """

    def __init__(self, node: str, netns_name: str, tcp: bool) -> None:
        self.node, self.netns_name, self.tcp = node, netns_name, tcp
        self.route: socket.socket | None = None
        self.diag: socket.socket | None = None
        self.tcp_reader: Any = None
        self.names: dict[int, str] = {}
        self.marshal = marshals()
        self._req = (request(QdiscMsg(), RTM_GETQDISC), _stats_request())

    def open(self) -> None:
        """Open the netlink sockets inside the namespace and learn interface names.
        Raises LabError if the namespace does not exist."""
        fd = netns.open_fd(self.netns_name)
        try:
            self.route = netns.run_in(fd, _open, fd, netns.NETLINK_ROUTE)
            if self.tcp:
                self.diag = netns.run_in(fd, _open, fd, NETLINK_SOCK_DIAG)
                self.tcp_reader = TcpReader(self.diag, self.marshal["tcp"],
                                            f"node {self.node}: sock_diag")
        finally:
            os.close(fd)
        self._learn_names()

    def close(self) -> None:
        """Close the sockets (idempotent)."""
        for s in (self.route, self.diag):
            if s is not None:
                s.close()
        self.route = self.diag = None

    def _learn_names(self) -> None:
        assert self.route is not None
        self.names.update(dump(self.route, request(NameMsg(), RTM_GETLINK),
                               self.marshal["names"], f"node {self.node}"))

    def ifname(self, index: int) -> str:
        """The name of interface ``index`` (re-learnt once if it is new, e.g. an IFB)."""
        if index not in self.names:
            self._learn_names()
        return self.names.get(index, f"if{index}")

    def read_qdiscs(self) -> list[tuple[Any, ...]]:
        """One row per qdisc (``noqueue`` left out): (ifindex, *QDISC_FIELDS)."""
        assert self.route is not None
        rows = dump(self.route, self._req[0], self.marshal["qdiscs"],
                    f"node {self.node}: qdiscs")
        return [r for r in rows if r is not None]

    def read_links(self) -> list[tuple[Any, ...]]:
        """One row per interface other than ``lo``: (ifindex, *LINK_FIELDS)."""
        assert self.route is not None
        rows = dump(self.route, self._req[1], self.marshal["links"],
                    f"node {self.node}: link stats")
        return [r for r in rows if r is not None and r[0] != 1]

    def read_tcp(self) -> list[tuple[Any, ...]]:
        """One row per TCP socket that has TCP_INFO (not listening, time-wait or request
        sockets): TCP_FIELDS, through :class:`testbed.counters.tcpdiag.TcpReader` (a full
        dump every 100 ms, exact lookups of the known sockets in between). Empty if this
        reader does not read TCP."""
        if self.diag is None:
            return []
        return self.tcp_reader.read()
