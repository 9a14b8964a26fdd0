"""Shaping with real traffic on the host kernel: goodput at the configured rate, live rate
changes, and the bottleneck buffer as the only place where queueing drops happen."""

from __future__ import annotations

import pytest
from plans import two_hosts_router
from traffic import iperf3, received_bps, tcp_goodput_bound_bps, wire_bps

from models.shaping import Shaping
from models.units import BufferSize

pytestmark = pytest.mark.netns


@pytest.mark.parametrize("rate_bps", [10**8, 10**9])
def test_tcp_goodput_within_5pct_of_bound(labs, rate_bps):
    with labs(two_hosts_router(Shaping(rate_bps=rate_bps))) as lab:
        # cubic: the host default bbr paces every 1448-byte segment with a timer when no fq
        # qdisc is present, which measures the CPU rather than the shaper
        got = received_bps(iperf3(lab, "h1", "h2", "198.18.2.1", seconds=3, omit=1,
                                  extra=("-C", "cubic")))
    bound = tcp_goodput_bound_bps(rate_bps)
    # 5 %: the fidelity target; one TCP flow fills an HTB to ~99 % of the bound
    assert abs(got - bound) / bound <= 0.05, f"{got / 1e6:.1f} Mbit/s vs bound {bound / 1e6:.1f}"


def test_set_shaping_changes_the_measured_rate(labs):
    from models.errors import LabError

    def rate_bps(seconds: float = 3.0) -> float:  # what arrives at r1 from the shaped link
        return wire_bps(lab, "h1", "h2", "198.18.2.1", "r1", "e1", seconds=seconds)

    # 1 ms: a delay line from the start, so that adding loss reaches the wire-packets check
    with labs(two_hosts_router(Shaping(rate_bps=50 * 10**6, delay_s=0.001))) as lab:
        with pytest.raises(LabError, match="wire_packets=True"):  # GSO lab: loss inexact
            lab.set_shaping("h1-r1", "a_to_b", Shaping(rate_bps=10**7, loss_pct=1))
        # a packet buffer needs no wire-sized packets: the change adds its segmenter
        before = rate_bps()
        lab.set_shaping("h1-r1", "a_to_b", Shaping(rate_bps=10 * 10**6,
                                                    buffer=BufferSize(packets=50)))
        kinds = [o.kind for o in lab.layout.recipes[("h1-r1", "a_to_b")].egress]
        assert kinds == ["htb", "htb", "tbf", "pfifo"]
        after = rate_bps()
        lab.set_shaping("h1-r1", "a_to_b", Shaping())  # structure change: shaping removed
        free = rate_bps(seconds=2.0)
    # frames as HTB counts them, from kernel counters: never above the rate (+3 %: HTB's
    # burst over 1.5 s); below it only when a descheduled sender lets its socket run dry
    for got, rate in ((before, 50e6), (after, 10e6)):
        assert 0.85 * rate < got < 1.03 * rate, f"{got / 1e6:.2f} Mbit/s at {rate / 1e6:.0f}"
    assert free > 200e6


def _leaf_stats(ipr, index: int) -> tuple[int, int]:
    """(qlen packets, drops) of the leaf qdisc 10: on interface ``index``."""
    for q in ipr.get_qdiscs(index=index):
        if q["handle"] == 0x100000:
            queue = q.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")
            return queue["qlen"], queue["drops"]
    raise AssertionError("no leaf qdisc 10:")


def test_buffer_of_100_packets_drops_and_never_exceeds_100(labs):
    import threading

    from pyroute2 import IPRoute

    # the bottleneck sits at the router (r1 -> h2), as in a switch: at the sender's own
    # interface the socket's send buffer would throttle the sender before the queue fills
    plan = two_hosts_router(h2_in=Shaping(rate_bps=100 * 10**6, buffer=BufferSize(packets=100)))
    with labs(plan) as lab:
        index = lab.layout.nodes["r1"].ifindex("e2")
        samples: list[tuple[int, int]] = []
        done = threading.Event()

        def sample() -> None:
            with IPRoute(netns=lab.netns_name("r1")) as ipr:
                while not done.is_set():
                    samples.append(_leaf_stats(ipr, index))
                    done.wait(0.005)
                samples.append(_leaf_stats(ipr, index))

        t = threading.Thread(target=sample)
        t.start()
        try:  # 300 Mbit/s of UDP into a 100 Mbit/s bottleneck for 1 s
            iperf3(lab, "h1", "h2", "198.18.2.1", seconds=1, omit=0,
                   extra=("-u", "-b", "300M", "-l", "1400"))
        finally:
            done.set()
            t.join()
    peak = max(q for q, _ in samples)
    drops = samples[-1][1]
    assert peak <= 100, f"queue reached {peak} packets"
    assert peak >= 90, f"queue peaked at {peak}: the bottleneck never filled"
    assert drops > 1000, f"only {drops} drops for 2x overload"  # ~2/3 of ~27k datagrams


def test_a_packet_buffer_counts_wire_packets_while_gso_packets_cross_the_line(labs):
    """A buffer in packets keeps GSO (no lab-wide wire-sized packets): the segmenter tbf 9:
    cuts TCP's GSO packets into frames before pfifo 10: counts them; the native line into h2
    sits before r1's queue, where it still sees GSO packets, and drops nothing. The analysis
    takes the interface's drops from the segmenter: HTB's root misses segments dropped from a
    GSO packet whose other segments went in."""
    import dataclasses

    import pandas as pd
    from pyroute2 import IPRoute

    from analysis.metrics.counters import root_qdiscs
    from testbed.delay import native

    s = Shaping(rate_bps=100 * 10**6, delay_s=0.02, buffer=BufferSize(packets=100))
    plan = two_hosts_router(h2_in=s)
    plan = dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, delay_line="native")
                                                 for lk in plan.links))
    with labs(plan) as lab:
        assert not lab.layout.wire_packets
        iperf3(lab, "h1", "h2", "198.18.2.1", seconds=2, omit=0, extra=("-C", "cubic"))
        line = native.stats(lab)["h2-r1/b_to_a"]
        with IPRoute(netns=lab.netns_name("r1")) as ipr:
            rows = [{"t_s": 0.0, "node": "r1", "ifname": "e2", "kind": q.get_attr("TCA_KIND"),
                     "parent": "root" if q["parent"] == 0xFFFFFFFF else hex(q["parent"]),
                     "handle": q["handle"],
                     "bytes": (st := q.get_attr("TCA_STATS2")).get_attr("TCA_STATS_BASIC")["bytes"],
                     "packets": st.get_attr("TCA_STATS_BASIC")["packets"],
                     "drops": st.get_attr("TCA_STATS_QUEUE")["drops"]}
                    for q in ipr.get_qdiscs(index=lab.layout.nodes["r1"].ifindex("e2"))]
    by_kind = {r["kind"]: r for r in rows}
    fifo, htb = by_kind["pfifo"], by_kind["htb"]
    assert (line["node"], line["hook"]) == ("r1", "out")
    q = line["queue"]
    assert q["in_bytes"] / q["in_packets"] > 3 * 1514, "the line saw no GSO packets"
    assert q["dropped_loss"] + q["dropped_ge"] + max(0, q["kernel_queue_dropped"]) == 0
    assert fifo["bytes"] / fifo["packets"] <= 1514, "the buffer counted GSO packets"
    assert fifo["drops"] > 0, "the 100-packet buffer never overflowed"
    assert htb["drops"] <= fifo["drops"]
    (root,) = root_qdiscs(pd.DataFrame(rows)).to_dict("records")
    assert root["kind"] == "htb" and root["drops"] == fifo["drops"]


_SERVER = """
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 5301)); srv.listen(1); print("listening", flush=True)
c, _ = srv.accept()
for _ in range(int(sys.argv[1])):
    left = int(sys.argv[2])
    while left:
        left -= len(c.recv(min(left, 1 << 20)))
    c.sendall(b"k")
"""
_CLIENT = """
import socket, sys, time
n, size = int(sys.argv[2]), int(sys.argv[3])
c = socket.create_connection((sys.argv[1], 5301))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
took = []
for _ in range(n):
    t0 = time.monotonic(); c.sendall(b"x" * size); c.recv(1); took.append(time.monotonic() - t0)
    time.sleep(0.02)  # idle, shorter than an RTO: the next message starts with the same cwnd
print(" ".join(map(str, took)))
"""


def test_a_byte_buffer_smaller_than_a_gso_packet_counts_frames_and_carries_messages(labs):
    """4 MiB at scale 100 on a host's own 250 Mbit/s port: 41943 bytes, less than one 64 KiB
    GSO packet. A bfifo counts a GSO packet whole, so it refused each one TCP sent after an
    idle gap with a grown cwnd (the sender's TCP sees a local drop, not a loss, and retries
    on its probe timer, backing off: messages of 1 MB took seconds). The segmenter cuts GSO
    packets into frames first: the buffer counts frames, and no message waits for a timer."""
    import subprocess
    import sys

    from pyroute2 import IPRoute
    from traffic import wait_listening

    s = Shaping(rate_bps=250 * 10**6, buffer=BufferSize(size_bytes=41943))
    n, size = 8, 10**6
    with labs(two_hosts_router(h1_out=s)) as lab:
        assert not lab.layout.wire_packets
        srv = lab.popen("h2", [sys.executable, "-c", _SERVER, str(n), str(size)],
                        stdout=subprocess.PIPE)
        wait_listening(lab, "h2", 5301)
        took = [float(x) for x in lab.run("h1", [sys.executable, "-c", _CLIENT, "198.18.2.1",
                                                 str(n), str(size)], timeout_s=120).stdout.split()]
        srv.wait(timeout=10)
        with IPRoute(netns=lab.netns_name("h1")) as ipr:
            (fifo,) = [q for q in ipr.get_qdiscs(index=lab.layout.nodes["h1"].ifindex("eth0"))
                       if q.get_attr("TCA_KIND") == "bfifo"]
            basic = fifo.get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")
    assert basic["bytes"] / basic["packets"] <= 1514, "the buffer counted GSO packets"
    # a message takes 32 ms at the rate; a refused GSO packet waited for TCP's probe timer
    # (200 ms at least, TCP_RTO_MIN, doubling on each refusal): 10 s here without segmenter
    assert max(took) < 1.0, f"a message waited for a timer: {took}"
