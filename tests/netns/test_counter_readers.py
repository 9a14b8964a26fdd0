"""The counter sampler's readers (trimmed pyroute2 message classes over its own sockets) give
the same values as pyroute2's high-level API (IPRoute.get_qdiscs, IPRoute.get_links'
IFLA_STATS64, DiagSocket.get_sock_stats with full message classes) read at the same moment on
an idle lab: equal counters, equal names and handles, equal TCP_INFO."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from plans import two_hosts_router
from pyroute2 import DiagSocket, IPRoute

from models.shaping import Shaping
from testbed.counters.readers import LINK_FIELDS, QDISC_FIELDS, TCP_FIELDS, NamespaceReader
from testbed.ns import netns
from testbed.tc.msgs import handle

pytestmark = pytest.mark.netns
INET_DIAG_INFO = 2  # include/uapi/linux/inet_diag.h


def in_ns(lab, node, fn, *args):
    fd = netns.open_fd(lab.netns_name(node))
    try:
        return netns.run_in(fd, fn, *args)
    finally:
        os.close(fd)


def idle_connection(lab):
    """An established TCP connection h1 -> h2 that moved 1 MB and then went quiet: (client,
    server-side accepted socket, listener)."""
    srv = in_ns(lab, "h2", socket.create_server, ("198.18.2.1", 0))
    cli = in_ns(lab, "h1", socket.create_connection, ("198.18.2.1", srv.getsockname()[1]))
    conn, _ = srv.accept()
    sender = threading.Thread(target=cli.sendall, args=(b"x" * 1_000_000,))
    sender.start()
    got = 0
    while got < 1_000_000:
        got += len(conn.recv(1 << 20))
    sender.join()
    conn.sendall(b"ok")
    assert cli.recv(2) == b"ok"
    # the client's ACK of "ok" is delayed, at most TCP_DELACK_MAX (200 ms, include/net/tcp.h);
    # after that the connection, and so the lab, sends nothing
    time.sleep(0.5)
    return cli, conn, srv


def reference_qdiscs(ipr, names):
    rows = {}
    for m in ipr.get_qdiscs():
        st = m.get_attr("TCA_STATS2")
        if m.get_attr("TCA_KIND") == "noqueue" or st is None:
            continue
        basic, queue = st.get_attr("TCA_STATS_BASIC"), st.get_attr("TCA_STATS_QUEUE")
        rows[(names[m["index"]], m["handle"], m["parent"])] = (
            m.get_attr("TCA_KIND"), basic["bytes"], basic["packets"], queue["drops"],
            queue["overlimits"], queue["requeues"], queue["backlog"], queue["qlen"])
    return rows


def reference_links(ipr):
    return {m.get_attr("IFLA_IFNAME"): tuple(m.get_attr("IFLA_STATS64")[f] for f in LINK_FIELDS)
            for m in ipr.get_links() if m.get_attr("IFLA_IFNAME") != "lo"}


def reference_tcp(ds):
    rows = {}
    for m in ds.get_sock_stats(family=socket.AF_INET, extensions=1 << (INET_DIAG_INFO - 1)):
        info = m.get_attr("INET_DIAG_INFO")
        if info is None or m["idiag_state"] == 10:  # TCP_LISTEN: the sampler skips it
            continue
        key = (m["idiag_src"], m["idiag_sport"], m["idiag_dst"], m["idiag_dport"])
        rows[key] = (info["tcpi_rtt"] / 1e6, info["tcpi_rttvar"] / 1e6, info["tcpi_snd_cwnd"],
                     info["tcpi_total_retrans"], info["tcpi_lost"], info["tcpi_bytes_acked"],
                     info["tcpi_bytes_sent"], 8 * info["tcpi_delivery_rate"])
    return rows


def sampler_view(reader):
    q = {(reader.ifname(r[0]), handle(r[2]), handle(r[3])): (r[1], *r[4:])
         for r in reader.read_qdiscs()}
    ln = {reader.ifname(r[0]): r[1:] for r in reader.read_links()}
    tcp = {r[:4]: r[5:] for r in reader.read_tcp()}
    return q, ln, tcp


def reference_view(lab, node):
    def read():
        with IPRoute() as ipr, DiagSocket() as ds:
            ds.bind()
            names = {m["index"]: m.get_attr("IFLA_IFNAME") for m in ipr.get_links()}
            return reference_qdiscs(ipr, names), reference_links(ipr), reference_tcp(ds)
    return in_ns(lab, node, read)


def idle_window(reader, lab, node, tries=20):
    """(sampler's values, pyroute2's) read between two equal sampler reads: the counters are
    cumulative, so nothing moved in between and the reference saw the same state. A freshly
    made lab is not quite idle (IPv6 router solicitations and MLD reports of new interfaces,
    86-byte frames, in its first seconds), hence the retries, 0.3 s apart."""
    for _ in range(tries):
        ours, ref = sampler_view(reader), reference_view(lab, node)
        if sampler_view(reader) == ours:  # the second read: the cached path
            return ours, ref
        time.sleep(0.3)
    raise AssertionError(f"{node}: counters never stood still for {tries} tries")


def test_sampler_values_equal_pyroute2_high_level_api(labs):
    plan = two_hosts_router(h1_out=Shaping(rate_bps=100_000_000),
                            h2_in=Shaping(rate_bps=50_000_000))
    with labs(plan) as lab:
        socks, kinds = idle_connection(lab), []
        try:
            for node in ("h1", "h2", "r1"):
                reader = NamespaceReader(node, lab.netns_name(node), tcp=node != "r1")
                reader.open()
                try:
                    ours, ref = idle_window(reader, lab, node)
                finally:
                    reader.close()
                for name, a, b in zip(("qdisc", "links", "tcp"), ours, ref, strict=True):
                    assert a == b, (node, name)
                kinds += [v[0] for v in ours[0].values()]
                assert all(len(v) == len(QDISC_FIELDS) - 2 for v in ours[0].values())
                assert ours[1] and all(v[0] > 0 for v in ours[1].values())  # rx_bytes
            assert sorted(kinds) == ["htb", "htb", "pfifo", "pfifo"]  # h1:eth0 and r1:e2
            tcp_rows = sampler_view_tcp(lab)
            assert len(tcp_rows) == 2 and all(len(r) == len(TCP_FIELDS) for r in tcp_rows)
            assert {r[4] for r in tcp_rows} == {"established"}
            assert max(r[10] for r in tcp_rows) >= 1_000_000  # bytes_acked of the client
        finally:
            for s in socks:
                s.close()


def sampler_view_tcp(lab):
    """Full TCP rows of both hosts (one dump each)."""
    rows = []
    for node in ("h1", "h2"):
        reader = NamespaceReader(node, lab.netns_name(node), tcp=True)
        reader.open()
        try:
            rows += reader.read_tcp()
        finally:
            reader.close()
    return rows


def test_exact_lookups_forget_closed_sockets(labs):
    """Between dumps the TCP reader asks for each known socket exactly; once both ends
    closed, the client is in time-wait (no TCP_INFO) and the server's socket is gone
    (ENOENT): both are forgotten, and no error is raised."""
    with labs(two_hosts_router()) as lab:
        socks = idle_connection(lab)
        readers = {n: NamespaceReader(n, lab.netns_name(n), tcp=True) for n in ("h1", "h2")}
        try:
            for r in readers.values():
                r.open()
                assert len(r.read_tcp()) == 1  # the dump finds the connection
                r.tcp_reader.next_dump = float("inf")  # from now on: exact lookups only
                assert len(r.read_tcp()) == 1 and len(r.tcp_reader.known) == 1
            for s in socks:
                s.close()
            time.sleep(0.2)  # FIN exchange over an unshaped veth pair: well under 1 ms
            for node, r in readers.items():
                assert r.read_tcp() == [] and r.tcp_reader.known == {}, node
        finally:
            for s in socks:
                s.close()
            for r in readers.values():
                r.close()
