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
from testbed.delay import native
from testbed.ns import netns

pytestmark = pytest.mark.netns

COUNT = 500
GAP_S = 0.001
PORT = 5999
SO_RCVBUFFORCE = 33  # include/uapi/asm-generic/socket.h (not in Python's socket module)
JITTERY = Shaping(delay_s=0.020, jitter_s=0.010, jitter_distribution="uniform")


def _native(plan):
    return dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, delay_line="native")
                                                 for lk in plan.links))


def _udp(bind: tuple[str, int] | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if bind:
        # room for the whole stream (root: past net.core.rmem_max), so a reader thread kept
        # off the CPU for a while loses nothing
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 * 2**20)
        s.bind(bind)
    return s


def _stream_through(labs, h1_out: Shaping) -> tuple[list[int], dict]:
    """Send COUNT numbered datagrams h1 -> h2, GAP_S apart: the numbers in arrival order, and
    the line's queue stats (testbed/delay/nfqueue/stats.py fields)."""
    with labs(_native(two_hosts_router(h1_out))) as lab:
        lab.run("h1", ["ping", "-c", "1", "-W", "3", "198.18.2.1"])  # ARP on both hops
        # a socket belongs to the namespace it was made in, whichever thread uses it later
        rx = netns.run_in(lab.node_io("h2").fd, _udp, ("198.18.2.1", PORT))
        tx = netns.run_in(lab.node_io("h1").fd, _udp)
        got: list[int] = []

        def receive() -> None:
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
                time.sleep(max(0.0, start + seq * GAP_S - time.monotonic()))
                tx.sendto(seq.to_bytes(4, "big"), ("198.18.2.1", PORT))
        finally:
            reader.join()
            rx.close()
            tx.close()
        queue = native.stats(lab)["h1-r1/a_to_b"]["queue"]
    return got, queue


def _overtaken(seqs: list[int]) -> int:
    """Datagrams that arrived after a higher-numbered one."""
    top, n = -1, 0
    for s in seqs:
        if s < top:
            n += 1
        top = max(top, s)
    return n


def test_jitter_keeps_a_flows_order(labs):
    got, queue = _stream_through(labs, JITTERY)
    assert sorted(got) == list(range(COUNT))  # nothing lost on the way
    assert _overtaken(got) == 0, f"{_overtaken(got)} of {COUNT} datagrams overtaken"
    # what packets got is reported, not what was drawn: with gaps (1 ms) far below the
    # jitter's spread (20 ms) most packets wait for a larger draw ahead of them
    drawn, added = queue["drawn_delay"], queue["added_delay"]
    assert drawn["n"] >= COUNT and drawn["max_us"] <= 30_000
    assert added["p50_us"] > drawn["p50_us"]


def test_jitter_reorder_lets_jittered_packets_pass_each_other(labs):
    got, _ = _stream_through(labs, JITTERY.with_changes(jitter_reorder=True))
    assert sorted(got) == list(range(COUNT))
    assert _overtaken(got) > 0


def test_reorder_still_reorders_a_fifo_jittered_line(labs):
    # reorder sends some datagrams at once, past the held ones (FIFO alone overtakes none)
    got, _ = _stream_through(labs, JITTERY.with_changes(reorder_pct=10))
    assert sorted(got) == list(range(COUNT))
    assert _overtaken(got) > 0
