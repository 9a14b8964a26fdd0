"""No reordering inside an unimpaired lab: one TCP flow through a rate-limited switch with
wire-sized packets must not be reordered (a veth handed one flow's packets to two CPUs'
backlogs, which the kernel saw as reordering and D-SACKed spurious retransmissions; see
testbed.ns.sysctl).

What is asserted is the sender's own reordering detection (TCP_INFO, Linux >= 5.6):
``reord_seen`` counts the times a segment that was never retransmitted was (S)ACKed below
the highest SACKed sequence, i.e. arrived after a later one (``tcp_check_sack_reordering``,
net/ipv4/tcp_input.c), and ``reordering`` (starts at net.ipv4.tcp_reordering, 3) grows only
there. A retransmission by a timer (RTO, tail loss probe; a loaded box delays ACKs past the
RTO) or for a segment a queue dropped fills its hole with a retransmitted segment and so
counts neither; the retransmissions and queue drops are printed, not asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from plans import two_hosts_switch
from pyroute2 import IPRoute
from traffic import wait_listening

from models.shaping import Shaping
from models.units import BufferSize
from testbed.ns import sysctl

pytestmark = pytest.mark.netns

PORT = 7200
SINK = ("import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
        f"socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', {PORT})); s.listen(1)\n"
        "c, _ = s.accept()\nwhile c.recv(1 << 20):\n    pass\n")
# one cubic connection sending for argv[2] seconds; once all is ACKed, prints its TCP_INFO
SEND = ("import socket, sys, time, json\nfrom traffic_gen.tcpinfo import read_tcp_info\n"
        f"c = socket.create_connection((sys.argv[1], {PORT}))\n"
        "c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b'cubic')\n"
        "end = time.monotonic() + float(sys.argv[2])\nbuf = b'x' * (1 << 16)\n"
        "while time.monotonic() < end:\n    c.sendall(buf)\n"
        "while read_tcp_info(c)['unacked']: time.sleep(0.01)\n"
        "print(json.dumps(read_tcp_info(c)), flush=True)\nc.close()\n")


def _qdisc_drops(lab, node: str) -> int:
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        return sum(q.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["drops"]
                   for q in ipr.get_qdiscs() if q.get_attr("TCA_STATS2"))


def _send(lab, seconds: float) -> dict[str, int]:
    """The sender's TCP_INFO after ``seconds`` of one flow h1 -> h2, all of it ACKed."""
    lab.popen("h2", [sys.executable, "-c", SINK], stdout=subprocess.DEVNULL,
              stderr=subprocess.DEVNULL)
    wait_listening(lab, "h2", PORT)
    out = lab.run("h1", [sys.executable, "-c", SEND, "198.18.0.2", str(seconds)],
                  timeout_s=seconds + 60)
    return json.loads(out.stdout)


def test_one_tcp_flow_through_a_shaped_switch_is_not_reordered(labs):
    shaping = Shaping(rate_bps=10**9, buffer=BufferSize(packets=1000))
    with labs(two_hosts_switch(shaping), wire_packets=True) as lab:
        default = int(sysctl.read(lab.node_io("h1").fd, "net.ipv4.tcp_reordering"))
        info = _send(lab, 2.0)
        drops = sum(_qdisc_drops(lab, n) for n in ("h1", "s1", "h2"))
    seen = {k: info[k] for k in ("reord_seen", "reordering", "total_retrans", "dsack_dups")}
    print("sender", seen, "queue drops", drops)
    # with RPS off on every node (NodePlan.sysctls net.core.rps_default_mask "0"), 4 runs
    # here: reord_seen 8-96, reordering 4-21, with D-SACKed retransmissions and no drop
    assert info["reord_seen"] == 0 and info["reordering"] <= default, (
        f"the sender saw reordering: {seen}, {drops} queue drops in the lab")

