"""Read one namespace's counters through netlink: qdisc statistics (RTM_GETQDISC dump),
interface counters (RTM_GETSTATS dump, 64-bit link stats only) and TCP_INFO of its TCP sockets
(sock_diag, ``SOCK_DIAG_BY_FAMILY`` with ``INET_DIAG_INFO``).

Requests are encoded with pyroute2's message classes (``tcmsg``, ``ifstatsmsg``,
``inet_diag_req``), interface names decoded with ``ifinfmsg``; the few counters of each answer
are read from the kernel's fixed structs by offset (see below, why). Sockets are opened once
per namespace and reused for every sample. An object whose answer is byte-for-byte the same
as in the previous sample (an idle qdisc or interface) is not decoded again (identical bytes
decode to identical values).

Cost on this host kernel: a TCP dump walks the kernel's whole established-socket hash table
(262144 buckets here, shared by all namespaces unless ``net.ipv4.tcp_child_ehash_entries`` was
set when the namespace was made), about 1-2 ms per host namespace whatever the number of
sockets; qdisc and link dumps cost about 0.1 ms per namespace. See bench/counter_sampler.py.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

from pyroute2.netlink.diag import SOCK_DIAG_BY_FAMILY, inet_diag_req
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.ifstatsmsg import ifstatsmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from aitb.models.errors import LabError
from testbed import netns

__all__ = ["NamespaceReader", "TCP_STATES", "QDISC_FIELDS", "LINK_FIELDS", "TCP_FIELDS"]

NETLINK_SOCK_DIAG = 4
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_GETLINK, RTM_NEWLINK, RTM_GETQDISC, RTM_NEWQDISC = 18, 16, 38, 36
RTM_GETSTATS, RTM_NEWSTATS = 94, 92
IFLA_STATS_LINK_64 = 1  # include/uapi/linux/if_link.h; filter bit 1 << (1 - 1)
INET_DIAG_INFO = 2  # include/uapi/linux/inet_diag.h; extension bit 1 << (2 - 1)
_HDR = struct.Struct("=IHHII")
_RCVBUF = 4 << 20
# tcp_states.h order; listening, time-wait and request sockets carry no TCP_INFO
TCP_STATES = ("unknown", "established", "syn_sent", "syn_recv", "fin_wait1", "fin_wait2",
              "time_wait", "close", "close_wait", "last_ack", "listen", "closing")
_DIAG_STATES = sum(1 << i for i, s in enumerate(TCP_STATES)
                   if s not in ("unknown", "listen", "time_wait", "syn_recv"))
QDISC_FIELDS = ("kind", "handle", "parent", "bytes", "packets", "drops", "overlimits",
                "requeues", "backlog_bytes", "backlog_packets")
LINK_FIELDS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped")
TCP_FIELDS = ("src", "sport", "dst", "dport", "state", "rtt_s", "rttvar_s", "snd_cwnd",
              "total_retrans", "lost", "bytes_acked", "bytes_sent", "delivery_rate_bps")


NameMsg = type("NameMsg", (ifinfmsg,), {
    "nla_map": tuple((e[0], e[1] if e[0] == "IFLA_IFNAME" else "none", *e[2:])
                     for e in ifinfmsg.nla_map),
    "_nlmsg_base__compiled_nla": False})  # decodes the interface name only

# fixed kernel structs read by offset (pyroute2's generic decoder costs ~150 us per qdisc,
# 45 ms per sample for a 300-qdisc lab; these reads cost a few us). Sources: include/uapi/
# linux/{rtnetlink.h (struct tcmsg, 20 bytes), gen_stats.h (gnet_stats_basic: u64 bytes,
# u32 packets; gnet_stats_queue: u32 qlen, backlog, drops, requeues, overlimits), if_link.h
# (if_stats_msg, 12 bytes; rtnl_link_stats64: u64 rx_packets, tx_packets, rx_bytes, tx_bytes,
# rx_errors, tx_errors, rx_dropped, tx_dropped, ...), inet_diag.h (inet_diag_msg, 72 bytes),
# tcp.h (struct tcp_info)}
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8
_TCMSG = struct.Struct("=BxxxiIII")
_BASIC = struct.Struct("=QI")
_QUEUE = struct.Struct("=5I")
_IFSTATS = struct.Struct("=BxxxII")
_LINK64 = struct.Struct("=8Q")
_DIAG = struct.Struct("=BBBBHH16s16sI")  # family state timer retrans sport dport src dst if
# tcp_info offsets: rtt 68, rttvar 72, snd_cwnd 80, lost 32, total_retrans 100 (u32);
# bytes_acked 120, delivery_rate 160, bytes_sent 200 (u64)
_TI_FIELDS = ((68, "I"), (72, "I"), (80, "I"), (100, "I"), (32, "I"), (120, "Q"), (200, "Q"),
              (160, "Q"))


def attrs(buf: bytes, off: int, end: int) -> dict[int, tuple[int, int]]:
    """Netlink attributes in ``buf[off:end]``: type (flags masked) -> (value offset, length)."""
    out = {}
    while off + 4 <= end:
        length, kind = struct.unpack_from("=HH", buf, off)
        if length < 4:
            break
        out[kind & 0x3FFF] = (off + 4, length - 4)
        off += (length + 3) & ~3
    return out


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


def _request(msg: Any, msg_type: int) -> bytes:
    msg["header"]["type"] = msg_type
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
    msg["header"]["sequence_number"] = 1
    msg.encode()
    return bytes(msg.data)


def _qdisc_request() -> bytes:
    return _request(tcmsg(), RTM_GETQDISC)


def _stats_request() -> bytes:
    msg = ifstatsmsg()
    msg["filter_mask"] = 1 << (IFLA_STATS_LINK_64 - 1)
    return _request(msg, RTM_GETSTATS)


def _diag_request() -> bytes:
    msg = inet_diag_req()
    msg["sdiag_family"] = socket.AF_INET
    msg["sdiag_protocol"] = socket.IPPROTO_TCP
    msg["idiag_states"] = _DIAG_STATES
    msg["idiag_ext"] = 1 << (INET_DIAG_INFO - 1)
    return _request(msg, SOCK_DIAG_BY_FAMILY)


def dump_raw(sock: socket.socket, request: bytes, want: int, where: str) -> Iterator[memoryview]:
    """Send ``request`` (a dump) and yield the payload (after the 16-byte netlink header) of
    each answer of type ``want``. Raises LabError naming ``where`` if the kernel refuses."""
    sock.send(request)
    while True:
        buf = memoryview(sock.recv(1 << 20))
        off = 0
        while off + _HDR.size <= len(buf):
            length, mtype, _, _, _ = _HDR.unpack_from(buf, off)
            if mtype == NLMSG_DONE:
                return
            if mtype == NLMSG_ERROR:
                (err,) = struct.unpack_from("=i", buf, off + 16)
                raise LabError(f"{where}: netlink dump failed: {os.strerror(-err)}")
            if mtype == want:
                yield buf[off:off + length]
            off += (length + 3) & ~3


class _Cache:
    """Decoded rows by the raw bytes of their answer (without the netlink header, whose
    sequence number and port id change every time); holds only the last sample's objects."""

    def __init__(self, decode: Callable[[bytes], tuple[Any, ...] | None]) -> None:
        self.decode, self.last, self.now = decode, {}, {}

    def row(self, msg: memoryview) -> tuple[Any, ...] | None:
        key = bytes(msg[16:])
        row = self.last.get(key)
        if row is None:
            row = self.decode(bytes(msg))
        self.now[key] = row
        return row

    def turn(self) -> None:
        self.last, self.now = self.now, {}


def _qdisc_row(data: bytes) -> tuple[Any, ...] | None:
    index, handle, parent, _ = _TCMSG.unpack_from(data, 16)[1:]
    top = attrs(data, 16 + _TCMSG.size, len(data))
    if TCA_KIND not in top or TCA_STATS2 not in top:
        return None
    k_off, k_len = top[TCA_KIND]
    kind = data[k_off:k_off + k_len].rstrip(b"\0").decode()
    if kind == "noqueue":
        return None
    s_off, s_len = top[TCA_STATS2]
    st = attrs(data, s_off, s_off + s_len)
    nbytes = npackets = 0
    if TCA_STATS_BASIC in st:
        nbytes, npackets = _BASIC.unpack_from(data, st[TCA_STATS_BASIC][0])
    if TCA_STATS_PKT64 in st:  # the kernel adds it when packets no longer fit 32 bits
        (npackets,) = struct.unpack_from("=Q", data, st[TCA_STATS_PKT64][0])
    qlen = backlog = drops = requeues = overlimits = 0
    if TCA_STATS_QUEUE in st:
        qlen, backlog, drops, requeues, overlimits = _QUEUE.unpack_from(
            data, st[TCA_STATS_QUEUE][0])
    return (index, kind, handle_text(handle), handle_text(parent), nbytes, npackets, drops,
            overlimits, requeues, backlog, qlen)


def _link_row(data: bytes) -> tuple[Any, ...] | None:
    _, index, _ = _IFSTATS.unpack_from(data, 16)
    top = attrs(data, 16 + _IFSTATS.size, len(data))
    if IFLA_STATS_LINK_64 not in top:
        return None
    rxp, txp, rxb, txb, _, _, rxd, txd = _LINK64.unpack_from(data, top[IFLA_STATS_LINK_64][0])
    return (index, rxb, txb, rxp, txp, rxd, txd)


def _address(family: int, raw: bytes) -> str:
    return socket.inet_ntop(family, raw[:4] if family == socket.AF_INET else raw)


def _tcp_row(data: bytes) -> tuple[Any, ...] | None:
    family, state, _, _, sport, dport, src, dst, _ = _DIAG.unpack_from(data, 16)
    top = attrs(data, 16 + 72, len(data))
    if INET_DIAG_INFO not in top:
        return None
    off, length = top[INET_DIAG_INFO]
    info = bytes(data[off:off + length]) + bytes(max(0, 224 - length))  # older kernels: 0
    rtt, rttvar, cwnd, retrans, lost, acked, sent, rate = (
        struct.unpack_from("=" + f, info, o)[0] for o, f in _TI_FIELDS)
    return (_address(family, src), socket.ntohs(sport), _address(family, dst),
            socket.ntohs(dport), TCP_STATES[state] if state < len(TCP_STATES) else "unknown",
            rtt / 1e6, rttvar / 1e6, cwnd, retrans, lost, acked, sent, 8 * rate)


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
        self.qdiscs, self.links = _Cache(_qdisc_row), _Cache(_link_row)
        self._req = (_qdisc_request(), _stats_request(), _diag_request())

    def open(self) -> None:
        """Open the netlink sockets inside the namespace and learn interface names.
        Raises LabError if the namespace does not exist."""
        fd = netns.open_fd(self.netns_name)
        try:
            self.route = netns.run_in(fd, _open, fd, netns.NETLINK_ROUTE)
            if self.tcp:
                self.diag = netns.run_in(fd, _open, fd, NETLINK_SOCK_DIAG)
                from testbed.counters.tcpdiag import TcpReader
                self.tcp_reader = TcpReader(self.diag, f"node {self.node}: sock_diag")
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
        for raw in dump_raw(self.route, _request(ifinfmsg(), RTM_GETLINK), RTM_NEWLINK,
                            f"node {self.node}"):
            m = NameMsg(bytes(raw))
            m.decode()
            self.names[m["index"]] = m.get_attr("IFLA_IFNAME")

    def ifname(self, index: int) -> str:
        """The name of interface ``index`` (re-learnt once if it is new, e.g. an IFB)."""
        if index not in self.names:
            self._learn_names()
        return self.names.get(index, f"if{index}")

    def read_qdiscs(self) -> list[tuple[Any, ...]]:
        """One row per qdisc (``noqueue`` left out): (ifindex, *QDISC_FIELDS)."""
        rows = [self.qdiscs.row(m) for m in dump_raw(self.route, self._req[0], RTM_NEWQDISC,
                                                     f"node {self.node}: qdiscs")]
        self.qdiscs.turn()
        return [r for r in rows if r is not None]

    def read_links(self) -> list[tuple[Any, ...]]:
        """One row per interface other than ``lo``: (ifindex, *LINK_FIELDS)."""
        rows = [self.links.row(m) for m in dump_raw(self.route, self._req[1], RTM_NEWSTATS,
                                                    f"node {self.node}: link stats")]
        self.links.turn()
        return [r for r in rows if r is not None and r[0] != 1]

    def read_tcp(self) -> list[tuple[Any, ...]]:
        """One row per TCP socket that has TCP_INFO (not listening, time-wait or request
        sockets): TCP_FIELDS, through :class:`testbed.counters.tcpdiag.TcpReader` (a full
        dump every 100 ms, exact lookups of the known sockets in between). Empty if this
        reader does not read TCP."""
        if self.diag is None:
            return []
        return self.tcp_reader.read()
