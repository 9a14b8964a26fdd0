"""The columns of the counter tables, the one table of them: what the sampler
(testbed.counters) and the before/after snapshot (testbed.counters.snapshot) write into a run's
``counters/qdisc.parquet``, ``counters/links.parquet`` and ``counters/tcp.parquet``, and what
the analysis (analysis.tables) reads. Each column is (name, Arrow type); units are in the
names (``t_s`` host-clock seconds, ``*_bytes``, ``rtt_s``, ``delivery_rate_bps``); counters
are the kernel's cumulative values (``tc -s qdisc``, ``ip -s link``, ``ss -ti``).

``t_s`` of a qdisc or link row is the midpoint of the netlink dump that read it (the time
before the request was sent and after the last answer arrived, ``time.time()``), and
``t_err_s`` half that dump's duration: the kernel read the counter at most ``t_err_s`` from
``t_s``. A rate between two rows is delta(counter) / delta(t_s), uncertain by at most
(t_err_s of both rows) / delta(t_s) relative (analysis.metrics.links)."""

from __future__ import annotations

__all__ = ["SCHEMAS", "columns", "KEY_COLUMNS", "QDISC_COLUMNS", "LINK_COLUMNS",
           "TCP_COLUMNS"]

_I = "int64"
SCHEMAS: dict[str, tuple[tuple[str, str], ...]] = {
    "qdisc": (("t_s", "float64"), ("t_err_s", "float64"), ("node", "string"),
              ("ifname", "string"), ("kind", "string"), ("handle", "string"),
              ("parent", "string"), ("bytes", _I), ("packets", _I), ("drops", _I),
              ("overlimits", _I), ("requeues", _I), ("backlog_bytes", _I),
              ("backlog_packets", _I)),
    "links": (("t_s", "float64"), ("t_err_s", "float64"), ("node", "string"),
              ("ifname", "string"), ("rx_bytes", _I), ("tx_bytes", _I), ("rx_packets", _I),
              ("tx_packets", _I), ("rx_dropped", _I), ("tx_dropped", _I)),
    "tcp": (("t_s", "float64"), ("node", "string"), ("src", "string"), ("sport", _I),
            ("dst", "string"), ("dport", _I), ("state", "string"), ("rtt_s", "float64"),
            ("rttvar_s", "float64"), ("snd_cwnd", _I), ("total_retrans", _I), ("lost", _I),
            ("bytes_acked", _I), ("bytes_sent", _I), ("delivery_rate_bps", _I)),
}
# columns the sampler adds to what it reads from the kernel: when, and where
KEY_COLUMNS: dict[str, tuple[str, ...]] = {"qdisc": ("t_s", "t_err_s", "node", "ifname"),
                                           "links": ("t_s", "t_err_s", "node", "ifname"),
                                           "tcp": ("t_s", "node")}


def columns(table: str, *, read: bool = False) -> tuple[str, ...]:
    """The column names of ``table`` (``qdisc``, ``links``, ``tcp``) in order; ``read``: only
    those read from the kernel (without :data:`KEY_COLUMNS`)."""
    names = tuple(name for name, _ in SCHEMAS[table])
    return names[len(KEY_COLUMNS[table]):] if read else names


QDISC_COLUMNS = columns("qdisc")
LINK_COLUMNS = columns("links")
TCP_COLUMNS = columns("tcp")
