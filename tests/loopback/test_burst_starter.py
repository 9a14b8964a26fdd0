"""The starter (traffic_gen/burst_starter.py) on loopback TCP sockets: descriptors handed over,
bytes written at the armed instant and never before, the rest left to the owner."""

import socket
import time

import pytest

from traffic_gen.burst_starter import FIRST_BYTES, KickClient, KickServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pairs():
    srv = socket.create_server(("127.0.0.1", 0))
    made = []
    for _ in range(3):
        c = socket.create_connection(srv.getsockname())
        s, _ = srv.accept()
        made.append((c, s))
    srv.close()
    yield made
    for c, s in made:
        c.close()
        s.close()


def _drain(sock, expect, timeout_s=5.0):
    sock.settimeout(timeout_s)
    got = 0
    while got < expect:
        chunk = sock.recv(1 << 20)
        assert chunk, "peer closed early"
        got += len(chunk)
    return got


def test_starter_writes_at_the_instant_and_reports_bytes(tmp_path, pairs):
    server = KickServer(tmp_path / "kick.sock", spin_s=0.0, rt_priority=None)
    server.start()
    try:
        client = KickClient([str(server.path)], kick_bytes=20000)
        client.register({f"c{i}": c for i, (c, _) in enumerate(pairs)})
        t = time.time() + 0.2
        sizes = [100, 5000, 1 << 20]  # below one segment, between the passes, above kick_bytes
        armed = [client.arm(f"c{i}", t, size) for i, size in enumerate(sizes)]
        for (ev, box), size, (_, peer) in zip(armed, sizes, pairs, strict=True):
            assert ev.wait(5.0)
            reply = box[0]
            assert "error" not in reply
            assert reply["t"] >= t  # never before the instant
            assert reply["bytes"] == min(size, 20000)
            assert _drain(peer, reply["bytes"]) == reply["bytes"]
        assert FIRST_BYTES < 5000 < 20000
        client.close()
    finally:
        server.close()
    assert not (tmp_path / "kick.sock").exists()
    assert server.error is None


def test_unknown_connection_is_an_error_reply(tmp_path, pairs):
    server = KickServer(tmp_path / "kick.sock", spin_s=0.0, rt_priority=None)
    server.start()
    try:
        client = KickClient([str(server.path)], kick_bytes=1000)
        client.register({"c0": pairs[0][0]})
        ev, box = client.arm("nope", time.time(), 10)
        assert ev.wait(5.0)
        assert "unknown connection nope" in box[0]["error"]
        client.close()
    finally:
        server.close()
