"""No reordering inside an unimpaired lab: one TCP flow through a rate-limited switch with
wire-sized packets must not see spurious retransmissions (the D-SACKed ones the kernel counted
when a veth handed one flow's packets to two CPUs' backlogs; see testbed.sysctl)."""

from __future__ import annotations

import pytest
from plans import two_hosts_switch
from pyroute2 import IPRoute
from traffic import iperf3

from aitb.shaping import Shaping
from aitb.units import BufferSize

pytestmark = pytest.mark.netns


def _qdisc_drops(lab, node: str) -> int:
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        return sum(q.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["drops"]
                   for q in ipr.get_qdiscs() if q.get_attr("TCA_STATS2"))


def test_one_tcp_flow_through_a_shaped_switch_is_not_reordered(labs):
    shaping = Shaping(rate_bps=10**9, buffer=BufferSize(packets=1000))
    with labs(two_hosts_switch(shaping), wire_packets=True) as lab:
        result = iperf3(lab, "h1", "h2", "198.18.0.2", seconds=2, omit=0,
                        extra=("-C", "cubic"))
        drops = sum(_qdisc_drops(lab, n) for n in ("h1", "s1", "h2"))
    retrans = result["end"]["sum_sent"]["retransmits"]
    # without RPS: 100-300 retransmissions per second here, all D-SACKed, with no drop; a
    # retransmission is only legitimate for a packet some queue dropped
    assert retrans <= drops, f"{retrans} retransmissions, {drops} drops in the lab"
