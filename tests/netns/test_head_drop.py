"""The ``head_drop`` AQM (pfifo_head_drop), added as one module of testbed/tc/qdiscs/: installed
and read back on the host kernel, and it drops the oldest packets where tail drop drops the
newest. A burst of numbered datagrams far above a 1 Mbit/s bottleneck fills its 50-packet
buffer at once: with tail drop the datagrams that arrive at a full queue are lost (the last
ones), with head drop the queue keeps the newest (the last 50 all arrive).

The lab is IPv4-only, so its namespaces have IPv6 off (testbed.ns.sysctl.node_sysctls). With it
on, r1's own link-local start-up packets (duplicate address detection's neighbour solicitation,
MLDv2 reports) joined the full queue at random instants: one arriving after the burst's last
datagram pushed the oldest of the newest 50 out (a CI run under load lost datagram 1950 so; a
capture on r1's e2 showed those packets in the queue's drain)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from plans import two_hosts_router
from pyroute2 import IPRoute

from models.shaping import Shaping
from models.units import BufferSize

pytestmark = pytest.mark.netns

N, BUFFER = 2000, 50
RECEIVER = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("198.18.2.1", 9000))
s.settimeout(3.0)  # the last queued datagram leaves 50 x 11.4 ms after the burst; 3 s of
seen = set()        # silence means the queue is empty
print("ready", flush=True)
try:
    while True:
        seen.add(int(s.recv(2048)[:8]))
except socket.timeout:
    pass
print(" ".join(map(str, sorted(seen))), flush=True)
"""
SENDER = f"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range({N}):
    s.sendto(b"%08d" % i + bytes(1392), ("198.18.2.1", 9000))
"""


def _received(lab) -> set[int]:
    rx = lab.popen("h2", [sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    assert rx.stdout.readline().strip() == "ready"
    lab.run("h1", [sys.executable, "-c", SENDER])
    out, _ = rx.communicate(timeout=60)
    return {int(x) for x in out.split()}


@pytest.mark.parametrize("aqm", ["head_drop", "fifo"])
def test_head_drop_keeps_the_newest_packets_tail_drop_the_oldest(labs, aqm):
    shaping = Shaping(rate_bps=10**6, buffer=BufferSize(packets=BUFFER), aqm=aqm)
    with labs(two_hosts_router(h2_in=shaping)) as lab:  # up() reads every qdisc back
        with IPRoute(netns=lab.netns_name("r1")) as ipr:
            idx = lab.layout.nodes["r1"].ifindex("e2")
            kinds = {q.get_attr("TCA_KIND") for q in ipr.get_qdiscs(index=idx)}
        assert {"htb", "pfifo_head_drop" if aqm == "head_drop" else "pfifo"} <= kinds
        got = _received(lab)
    last = set(range(N - BUFFER, N))
    assert len(got) < N / 2, f"{len(got)} of {N} arrived: the bottleneck never filled"
    if aqm == "head_drop":
        assert last <= got, f"head drop lost {sorted(last - got)[:5]}... of the newest"
    else:
        # the queue drains one datagram per 11.4 ms, so a slow sender may slip a few of the
        # last 50 into a freed slot; tail drop still loses nearly all of them
        assert len(last & got) < BUFFER // 5, f"tail drop kept {len(last & got)} of the newest"
