"""TCP_INFO per transfer: back-to-back transfers on one real loopback connection, drained by a
slow reader so that ``send()`` returns long before the data is on the wire (what happens on a
shaped lab link). Each record must describe its own transfer, closed at its ack instant."""

import socket
import threading
import time

import pytest

from traffic_gen.tcpinfo import read_tcp_info
from traffic_gen.transfers import Job, Shared, TcpSender

pytestmark = pytest.mark.timeout(60)

MIB = 1 << 20
N = 4
RCVBUF = 64 << 10  # small receive window: the sender's data waits in its socket buffer
READ_BYTES, READ_GAP_S = 16 << 10, 0.001  # the reader drains at most ~16 MB/s: ~65 ms/MiB


def _slow_reader(conn: socket.socket, total: int, got: list[int]) -> None:
    while got[0] < total:
        n = len(conn.recv(READ_BYTES))
        if not n:
            return
        got[0] += n
        time.sleep(READ_GAP_S)


def _connected_pair():
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # inherited by accept()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    cli = socket.create_connection(lst.getsockname())
    srv, _ = lst.accept()
    lst.close()
    cli.sendall(bytes(12))  # like the Endpoints connection header: not part of any transfer
    assert len(srv.recv(12)) == 12  # (a single small segment on loopback)
    return cli, srv


def _run_transfers(cli: socket.socket) -> tuple[list[dict], list[dict]]:
    recs, fails, lock = [], [], threading.Lock()

    def emit(r):
        with lock:
            recs.append(r)

    shared = Shared(emit, fails.append, transfer_timeout_s=20.0)
    w = TcpSender(cli, shared, {"conn": 0}, "cubic")
    w.start()
    for i in range(N):
        w.submit(Job(MIB, [], lambda: None, f"k{i}", {"i": i}))
    flushed = threading.Event()
    w.submit(flushed)
    assert flushed.wait(30), "flush did not finish"
    w.submit(None)
    return recs, fails


def test_back_to_back_transfers_each_report_their_own_tcp_info():
    cli, srv = _connected_pair()
    got = [0]
    reader = threading.Thread(target=_slow_reader, args=(srv, N * MIB, got), daemon=True)
    reader.start()
    try:
        base = read_tcp_info(cli)
        recs, fails = _run_transfers(cli)
        reader.join(20)
        final = read_tcp_info(cli)
    finally:
        cli.close()
        srv.close()
    assert not fails
    assert [r["i"] for r in recs] == list(range(N))
    tcp = [r["tcp"] for r in recs]
    for t in tcp:
        # a transfer sends its 1 MiB once as new data, plus what was retransmitted of it
        assert MIB <= t["bytes_sent"] <= MIB + t["bytes_retrans"], tcp
    # the per-transfer figures add up to the connection's kernel counters (exactly: the
    # last record is closed with everything acknowledged, nothing sent since)
    assert sum(t["bytes_sent"] for t in tcp) == final["bytes_sent"] - base["bytes_sent"]
    assert sum(t["bytes_retrans"] for t in tcp) == final["bytes_retrans"] - base["bytes_retrans"]
    assert sum(t["total_retrans"] for t in tcp) == final["total_retrans"] - base["total_retrans"]
    # kernel: new bytes sent since the header (the retransmitted ones are in bytes_retrans)
    assert (final["bytes_sent"] - final["bytes_retrans"]) - \
        (base["bytes_sent"] - base["bytes_retrans"]) == N * MIB
    for i, r in enumerate(recs):
        # closed at this transfer's ack instant: its last byte acknowledged, and (the next
        # transfer needs ~65 ms at the reader's pace, the watcher polls at least every 10 ms)
        # before the next transfer was acknowledged in full
        assert r["acked"] and r["acked_bytes"] >= (i + 1) * MIB, r
        if i < N - 1:
            assert r["acked_bytes"] < (i + 2) * MIB, r
        assert r["t_acked"] >= r["t_sent"]
