"""The netlink messages of the counter sampler: trimmed subclasses of pyroute2's message
classes, and a pyroute2 ``Marshal`` that splits answers and decodes only what changed.

pyroute2's full classes decode every attribute of an answer (a qdisc's options, rate tables,
xstats; all 23 link counters; all of ``tcp_info``): about 150 us per qdisc. The classes here
declare only the attributes the sampler writes (models/counter_columns.py), so pyroute2
decodes nothing else; the structs they decode are pyroute2's own (``stats2.basic``/``queue``,
``ifstats64``, ``inet_diag_msg.tcp_info``), cut to the prefix that holds the wanted fields.

The attributes that are plain structs of native fields (gnet_stats_basic, gnet_stats_queue,
rtnl_link_stats64, tcp_info) use pyroute2's ``nlmsg_decoder_struct``: one ``unpack_from`` of
the joined field formats (native alignment, as the C struct) instead of one per field. It
serves only attributes without nested ones (it does not skip the struct before the NLA chain),
so the messages keep pyroute2's generic decoder.

House gotcha: pyroute2 marks a class's NLA table as compiled in a class attribute that
subclasses inherit, so every class with its own ``nla_map`` resets
``_nlmsg_base__compiled_nla`` (see :mod:`testbed.tc.msgs`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from pyroute2.netlink import NLMSG_DONE, nla, nlmsg, nlmsg_decoder_struct
from pyroute2.netlink.diag import inet_addr_codec, inet_diag_msg, inet_diag_req
from pyroute2.netlink.marshal import Marshal
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.ifstatsmsg import ifstatsmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg
from pyroute2.netlink.rtnl.tcmsg.common import stats2

from models.counter_columns import columns

__all__ = ["NameMsg", "QdiscMsg", "LinkStatsMsg", "DiagMsg", "inet_diag_req", "RowMarshal",
           "SOCKID_FIELDS", "TCP_INFO_FIELDS", "LINK64_FIELDS", "TCP_INFO_SIZE"]

# the socket id of struct inet_diag_sockid (include/uapi/linux/inet_diag.h), as pyroute2 names
# its fields in both inet_diag_req and inet_diag_msg
SOCKID_FIELDS = ("idiag_sport", "idiag_dport", "idiag_src", "idiag_dst", "idiag_if",
                 "idiag_cookie")
# the tcp_info fields the sampler writes (counters/tcp.parquet, models.counter_columns)
TCP_INFO_FIELDS = ("tcpi_rtt", "tcpi_rttvar", "tcpi_snd_cwnd", "tcpi_total_retrans",
                   "tcpi_lost", "tcpi_bytes_acked", "tcpi_bytes_sent", "tcpi_delivery_rate")
# rtnl_link_stats64 fields the sampler writes: the kernel's names are the column names
LINK64_FIELDS = columns("links", read=True)


def _prefix(fields: Any, wanted: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """pyroute2's ``fields`` of a struct up to the last of ``wanted`` (the rest is skipped)."""
    fields = tuple(fields)
    last = max(i for i, (name, _) in enumerate(fields) if name in wanted)
    return fields[:last + 1]


NameMsg = type("NameMsg", (ifinfmsg,), {
    "nla_map": tuple((e[0], e[1] if e[0] == "IFLA_IFNAME" else "none", *e[2:])
                     for e in ifinfmsg.nla_map),
    "_nlmsg_base__compiled_nla": False})  # decodes the interface name only


class QdiscStats2(stats2):
    """TCA_STATS2 with basic and queue stats and the 64-bit packet count only
    (TCA_STATS_PKT64, which the kernel adds when packets no longer fit 32 bits;
    include/uapi/linux/gen_stats.h)."""

    _nlmsg_base__compiled_nla = False
    nla_map = ((1, "TCA_STATS_BASIC", "basic"), (3, "TCA_STATS_QUEUE", "queue"),
               (8, "TCA_STATS_PKT64", "uint64"))

    class basic(nlmsg_decoder_struct, stats2.basic):
        """gnet_stats_basic, pyroute2's fields, decoded in one unpack (see module doc)."""

    class queue(nlmsg_decoder_struct, stats2.queue):
        """gnet_stats_queue, pyroute2's fields, decoded in one unpack (see module doc)."""


class QdiscMsg(tcmsg):
    """RTM_NEWQDISC with TCA_KIND and TCA_STATS2 only (the request is an empty one)."""

    _nlmsg_base__compiled_nla = False
    nla_map = ((1, "TCA_KIND", "asciiz"), (7, "TCA_STATS2", "stats2"))
    stats2 = QdiscStats2


class LinkStatsMsg(ifstatsmsg):
    """RTM_NEWSTATS with IFLA_STATS_LINK_64 only, decoded up to ``tx_dropped``."""

    _nlmsg_base__compiled_nla = False
    nla_map = ((1, "IFLA_STATS_LINK_64", "ifstats64"),)

    class ifstats64(nlmsg_decoder_struct, nla):
        """rtnl_link_stats64 (pyroute2's field list) up to tx_dropped."""

        fields = _prefix(ifstatsmsg.ifstats64.fields, LINK64_FIELDS)


class DiagMsg(inet_diag_msg):
    """sock_diag answer with INET_DIAG_INFO only, ``tcp_info`` decoded up to the last field
    the sampler writes. Keeps the raw socket id (``msg["sockid"]``, values of
    SOCKID_FIELDS) next to pyroute2's text addresses, for exact requests."""

    _nlmsg_base__compiled_nla = False
    nla_map = ((2, "INET_DIAG_INFO", "tcp_info"),)

    class tcp_info(nlmsg_decoder_struct, nla):
        """struct tcp_info (pyroute2's field list) up to the last field in TCP_INFO_FIELDS."""

        fields = _prefix(inet_diag_msg.tcp_info.fields, TCP_INFO_FIELDS)

    def ft_decode(self, offset: int) -> None:  # noqa: D102
        super().ft_decode(offset)  # fields and NLAs, before the addresses become text
        self["sockid"] = tuple(self[f] for f in SOCKID_FIELDS)

    def decode(self) -> None:  # noqa: D102
        inet_addr_codec.decode(self)


# bytes of tcp_info that DiagMsg.tcp_info reads (kernels before 4.19 send fewer): the size of
# its joined field formats, as nlmsg_decoder_struct unpacks them
TCP_INFO_SIZE = struct.calcsize("".join(f for _, f in DiagMsg.tcp_info.fields))
_UNSEEN = object()


class RowMarshal(Marshal):
    """Splits a recv() buffer of netlink messages (pyroute2's ``Marshal.parse``); messages of
    type ``mtype`` are decoded with ``msg_class`` and turned into a row by ``row_of(msg)``
    (None: no row), collected as (sequence number, row) in :attr:`rows`; other messages
    (NLMSG_DONE, NLMSG_ERROR) are decoded by pyroute2 and yielded. With ``cache``, a message
    whose bytes are the same as in the previous round (an idle qdisc or interface; the
    header's sequence number and port id are the same in every dump) is not decoded again;
    :meth:`turn` ends a round."""

    def __init__(self, mtype: int, msg_class: type, row_of: Callable[[Any], Any],
                 cache: bool = True) -> None:
        super().__init__()
        self.mtype, self.msg_class, self.row_of, self.cache = mtype, msg_class, row_of, cache
        # not msg_class: pyroute2 decodes the request echoed in an NLMSG_ERROR with the class
        # of its type, and a request (inet_diag_req) is shorter than its answer (DiagMsg)
        self.msg_map = {NLMSG_DONE: nlmsg}
        self.rows: list[tuple[int, Any]] = []
        self.last: dict[bytes, Any] = {}
        self.now: dict[bytes, Any] = {}
        self.done: dict[bytes, Any] = {}

    def parse_one_message(self, key: int, flags: int, sequence_number: int, data: bytes,
                          offset: int, length: int) -> Any:
        """Marshal's hook for one message at ``data[offset:offset + length]``: answers of
        type ``mtype`` become a row (returns None, so parse() skips them); others are
        pyroute2's decoded message (NLMSG_DONE of a dump: the same bytes every time, so
        decoded once)."""
        if key == NLMSG_DONE and self.cache:
            raw = bytes(data[offset:offset + length])
            done = self.done.get(raw)
            if done is None:
                done = self.done[raw] = super().parse_one_message(
                    key, flags, sequence_number, data, offset, length)
            return done
        if key != self.mtype:
            return super().parse_one_message(key, flags, sequence_number, data, offset,
                                             length)
        raw = bytes(data[offset:offset + length]) if self.cache else b""
        row = self.last.get(raw, _UNSEEN) if self.cache else _UNSEEN
        if row is _UNSEEN:
            msg = self.msg_class(data, offset=offset)
            msg.decode()
            row = self.row_of(msg)
        if self.cache:
            self.now[raw] = row
        self.rows.append((sequence_number, row))
        return None

    def turn(self) -> list[tuple[int, Any]]:
        """End a round: return its (sequence number, row) pairs and forget older bytes."""
        rows, self.rows = self.rows, []
        self.last, self.now = self.now, {}
        return rows
