"""A transfer that does not finish within the experiment's ``timeouts.transfer`` fails with
an error that says so (size, bytes moved, the timeout and what to change), not Python's bare
"timed out" (a newcomer's 1 TiB all-reduce over 100 Mbit/s ended with only that)."""

from __future__ import annotations

import socket

import pytest

from traffic_gen.transfers import Job, Shared, TcpReceiver, TcpSender


def _shared() -> Shared:
    return Shared(emit=lambda _r: None, fail=lambda _r: None, transfer_timeout_s=0.3)


def _job(size: int) -> Job:
    return Job(size_bytes=size, deps=[], done=lambda: None, key="k", meta={})


def test_a_receive_past_the_transfer_timeout_names_the_timeout_and_what_moved():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"x" * 10)  # the first bytes start the clock; then nothing more comes
        with pytest.raises(TimeoutError, match=r"could not receive 1000 bytes within "
                           r"timeouts.transfer \(0.3 s\): 10 moved; raise timeouts.transfer"):
            TcpReceiver(b, _shared(), {}).transfer(_job(1000))


def test_a_send_the_peer_never_reads_names_the_timeout():
    with socket.create_server(("127.0.0.1", 0)) as srv:  # loopback only
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
        with a, b:  # b never reads
            sender = TcpSender(a, _shared(), {}, "cubic")
            with pytest.raises(TimeoutError, match=r"could not send 100000000 bytes within "
                               r"timeouts.transfer \(0.3 s\): \d+ moved"):
                sender.transfer(_job(100_000_000))
