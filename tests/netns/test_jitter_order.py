"""Jitter keeps a flow's order on the native delay line; only ``jitter_reorder`` (or
``reorder``) lets packets pass each other.

A numbered UDP stream, one datagram per millisecond, crosses a 20 ms +- 10 ms (uniform) link:
the jitter's spread (20 ms) is twenty gaps, so independent draws would reorder most of the
stream (about 70 % of the datagrams overtaken), while FIFO order reorders none. Host kernel, no
netem needed; lab addresses only.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time

import pytest
from plans import two_hosts_router

from models.shaping import Shaping
from testbed.ns import netns

pytestmark = pytest.mark.netns

COUNT = 500
GAP_S = 0.001
PORT = 5999
JITTERY = Shaping(delay_s=0.020, jitter_s=0.010, jitter_distribution="uniform")


def _native(plan):
    return dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, delay_line="native")
                                                 for lk in plan.links))


def _udp(bind: tuple[str, int] | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if bind:
        s.bind(bind)
    return s


def _stream_through(labs, h1_out: Shaping) -> list[int]:
    """Send COUNT numbered datagrams h1 -> h2, GAP_S apart; the numbers in arrival order."""
    with labs(_native(two_hosts_router(h1_out))) as lab:
        lab.run("h1", ["ping", "-c", "1", "-W", "3", "198.18.2.1"])  # ARP on both hops
        # a socket belongs to the namespace it was made in, whichever thread uses it later
        rx = netns.run_in(lab.node_io("h2").fd, _udp, ("198.18.2.1", PORT))
        tx = netns.run_in(lab.node_io("h1").fd, _udp)
        got: list[int] = []

        def receive() -> None:  # as they come: 500 unread datagrams overflow a default rcvbuf
            rx.settimeout(2.0)  # well beyond delay + jitter after the last send
            while len(got) < COUNT:
                try:
                    got.append(int.from_bytes(rx.recv(64), "big"))
                except TimeoutError:
                    return

        reader = threading.Thread(target=receive)
        reader.start()
        try:
            start = time.monotonic()
            for seq in range(COUNT):
                while time.monotonic() < start + seq * GAP_S:
                    pass
                tx.sendto(seq.to_bytes(4, "big"), ("198.18.2.1", PORT))
        finally:
            reader.join()
            rx.close()
            tx.close()
    return got


def _overtaken(seqs: list[int]) -> int:
    """Datagrams that arrived after a higher-numbered one."""
    top, n = -1, 0
    for s in seqs:
        if s < top:
            n += 1
        top = max(top, s)
    return n


def test_jitter_keeps_a_flows_order(labs):
    got = _stream_through(labs, JITTERY)
    assert sorted(got) == list(range(COUNT))  # nothing lost on the way
    assert _overtaken(got) == 0, f"{_overtaken(got)} of {COUNT} datagrams overtaken"


def test_jitter_reorder_lets_jittered_packets_pass_each_other(labs):
    got = _stream_through(labs, JITTERY.with_changes(jitter_reorder=True))
    assert sorted(got) == list(range(COUNT))
    assert _overtaken(got) > 0


def test_reorder_still_reorders_a_fifo_jittered_line(labs):
    # reorder sends some datagrams at once, past the held ones (FIFO alone overtakes none)
    got = _stream_through(labs, JITTERY.with_changes(reorder_pct=10))
    assert sorted(got) == list(range(COUNT))
    assert _overtaken(got) > 0
