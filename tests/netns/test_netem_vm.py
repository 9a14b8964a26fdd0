"""Delay line fidelity (netem): needs a kernel with sch_netem, so these run inside the
stock-kernel VM (`make test-vm`); the VM exports AITB_IN_VM=tcg|kvm.

Under TCG (software emulation) timers fire late and the guest runs ~50x slower: delays get
a wider tolerance and the item-7 experiment runs at a scaled rate (same buffer and delay).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time

import pytest
from plans import two_hosts_router
from pyroute2 import IPRoute
from traffic import iperf3, numbered_udp_stream, overtaken, start_server, warm_up_lossy

from models.plan import NodePlan
from models.shaping import Shaping
from models.units import BufferSize

pytestmark = [pytest.mark.vm, pytest.mark.netns]
TCG = os.environ.get("AITB_IN_VM") == "tcg"


def _rtts_ms(out: str) -> list[float]:
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]


def test_ping_rtt_matches_twice_the_configured_delay(labs):
    delay_s = 0.010
    plan = two_hosts_router(Shaping(delay_s=delay_s), Shaping(delay_s=delay_s))
    with labs(plan) as lab:
        lab.run("h1", ["ping", "-c", "2", "-W", "2", "198.18.2.1"])  # ARP, warm-up
        out = lab.run("h1", ["ping", "-c", "20", "-i", "0.05", "198.18.2.1"]).stdout
    rtts = sorted(_rtts_ms(out))
    median = rtts[len(rtts) // 2]
    want = 2 * delay_s * 1e3
    accel = os.environ.get("AITB_IN_VM")
    print(f"FIGURE ping RTT through 2 x {delay_s * 1e3:.0f} ms netem: median {median:.2f} ms "
          f"(min {rtts[0]:.2f}, max {rtts[-1]:.2f}), want {want:.1f} ms, accel {accel}")
    if TCG:  # emulated timers: KERNEL.md saw 21-31 ms through a 20 ms netem round trip
        assert want - 0.3 <= median <= want + 12, rtts
    else:  # the target: max(0.3 ms, 3 %) on a native or KVM kernel
        assert abs(median - want) <= max(0.3, 0.03 * want), rtts


def test_random_loss_inside_the_9999pct_binomial_interval(labs):
    loss_pct, n = 10.0, 1000
    with labs(two_hosts_router(Shaping(loss_pct=loss_pct))) as lab:
        warm_up_lossy(lab, "h1", "198.18.2.1")
        proc = lab.popen("h1", ["ping", "-q", "-c", str(n), "-i", "0.002", "-W", "1",
                                "198.18.2.1"], stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=120)
    received = int(re.search(r"(\d+) received", out).group(1))
    lost, p = n - received, loss_pct / 100
    # 99.99 % normal approximation of Binomial(n, p): n*p +- 3.891*sqrt(n*p*(1-p)); the
    # 99 % interval would fail one run in a hundred by design (as the native twin says)
    half = 3.891 * math.sqrt(n * p * (1 - p))
    print(f"FIGURE random loss {loss_pct}%: lost {lost} of {n}, 99.99% interval "
          f"[{n * p - half:.0f}, {n * p + half:.0f}]")
    assert n * p - half <= lost <= n * p + half, f"lost {lost} of {n}"


def _drops(lab, node: str, ifname: str, handle: int) -> int:
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        for q in ipr.get_qdiscs(index=lab.layout.nodes[node].ifindex(ifname)):
            if q["handle"] == handle:
                return q.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["drops"]
    raise AssertionError(f"no qdisc {handle:#x} on {node}:{ifname}")


def _set_rmem_max(lab, node: str, max_bytes: int) -> None:
    lab.run(node, ["sysctl", "-w", f"net.ipv4.tcp_rmem=4096 131072 {max_bytes}"])


def test_item7_buffer_independent_of_the_delay_line(labs):
    """1 Gbit/s, 50 ms, 100-packet buffer: a TCP flow whose window is one
    BDP runs in steady state without any drop; a window free to grow past BDP + 100 packets
    builds a standing queue that the 100-packet buffer drops; the delay line (netem, its limit
    sized from the BDP) drops nothing in either case.

    The receiver's window is set through tcp_rmem (autotuning ignores SO_RCVBUF caps): with
    tcp_adv_win_scale=1 (the 6.1 stock kernel) the advertised window is half of it. Drops of
    slow start's transient (2x bursts, ~BDP/2 of queue) are excluded by counting only after
    the flow is window-limited."""
    # Under TCG netem's timer fires 10-30 ms late and then releases that much of the line at
    # once; the ACKs of such a clump make the sender burst lateness x rate packets into the
    # buffer. 10 Mbit/s x 200 ms keeps that burst (<= 25 packets) well below the buffer while
    # the BDP (165 packets) still exceeds it, as 1 Gbit/s x 50 ms (4128 packets) does natively.
    rate_bps, delay_s = (10**7, 0.200) if TCG else (10**9, 0.050)
    bdp_bytes = int(rate_bps * delay_s / 8)
    assert bdp_bytes / 1514 > 100  # the window does not fit into the buffer
    big = {"net.ipv4.tcp_wmem": "4096 131072 67108864"}
    plan = two_hosts_router(h2_in=Shaping(rate_bps=rate_bps, delay_s=delay_s,
                                          buffer=BufferSize(packets=100)))
    plan = plan.__class__(plan.name, tuple(
        NodePlan(n.name, n.kind, routes=n.routes, sysctls=big) if n.kind == "host" else n
        for n in plan.nodes), plan.links)
    # wire-sized packets on every hop, as this test was designed: a BDP window then arrives
    # ACK-clocked; with GSO (a packet buffer alone keeps it, behind its segmenter) the
    # unshaped sender's 64 KB bursts overflow a 100-packet buffer even with a BDP window
    with labs(plan, wire_packets=True) as lab:
        line = ("h2", "ifb" + str(lab.layout.nodes["h2"].ifindex("eth0")), 0x10000)
        buf = ("r1", "e2", 0x100000)
        lab.run("h1", ["ping", "-c", "1", "-W", "2", "198.18.2.1"])
        _set_rmem_max(lab, "h2", 2 * bdp_bytes)  # window = BDP
        server = start_server(lab, "h2")
        client = lab.popen("h1", ["iperf3", "-c", "198.18.2.1", "-t", "10", "-C", "cubic",
                                  "-J"], stdout=subprocess.PIPE, text=True)
        time.sleep(5)  # slow start and its losses are over: the window limits the flow now
        before = _drops(lab, *buf)
        out, _ = client.communicate(timeout=60)
        server.communicate(timeout=30)  # port 5201 free before the next one-off server
        steady = (_drops(lab, *buf) - before, _drops(lab, *line))
        _set_rmem_max(lab, "h2", 64 << 20)  # window free to grow far past BDP + 100 packets
        iperf3(lab, "h1", "h2", "198.18.2.1", seconds=5, omit=0, extra=("-C", "cubic"))
        grown = (_drops(lab, *buf) - before - steady[0], _drops(lab, *line))
    last = json.loads(out)["intervals"][-1]["sum"]["bits_per_second"]
    print(f"FIGURE item 7 at {rate_bps / 1e6:.0f} Mbit/s x {delay_s * 1e3:.0f} ms, 100p buffer: "
          f"BDP window drops (buffer, delay line) {steady}, grown window drops {grown}, "
          f"goodput {last / 1e6:.1f} Mbit/s")
    assert steady == (0, 0), f"(buffer, delay line) drops with a BDP window: {steady}"
    assert grown[0] > 0 and grown[1] == 0, f"(buffer, delay line) drops: {grown}"
    # The goodput of the BDP window is a figure, not asserted: under TCG netem's late timers
    # set it (6.6 Mbit/s of the 9.56 Mbit/s bound in one CI run, above 8.1 in others). The
    # goodput target is measured by bench/native_vs_netem.py (native and, with --vm, netem).
    assert last > 0, "the window-limited flow carried nothing"


def test_set_shaping_adds_changes_and_removes_a_delay_line(labs):
    def median_rtt_ms(lab) -> float:
        rtts = sorted(_rtts_ms(lab.run("h1", ["ping", "-c", "5", "-i", "0.05",
                                              "198.18.2.1"]).stdout))
        return rtts[len(rtts) // 2]

    with labs(two_hosts_router()) as lab:
        base = median_rtt_ms(lab)
        lab.set_shaping("h1-r1", "a_to_b", Shaping(delay_s=0.02))  # new IFB + netem
        assert median_rtt_ms(lab) >= base + 19.5
        lab.set_shaping("h1-r1", "a_to_b", Shaping(delay_s=0.04))  # netem changed in place
        assert median_rtt_ms(lab) >= base + 39.5
        lab.set_shaping("h1-r1", "a_to_b", Shaping())  # delay line removed
        assert median_rtt_ms(lab) < base + 10
        with IPRoute(netns=lab.netns_name("r1")) as ipr:
            assert not [x for x in ipr.get_links() if x.get_attr("IFLA_IFNAME").startswith("ifb")]


@pytest.mark.parametrize("jitter_reorder", [False, True], ids=["fifo", "jitter_reorder"])
def test_netem_jitter_keeps_order_unless_jitter_reorder(labs, jitter_reorder):
    # netem with a rate sends no packet before the one ahead of it (the 10 Tbit/s rate of
    # testbed/tc/qdiscs/netem.py); without one it sorts by each packet's own draw. Order does
    # not depend on timing, so TCG's late timers change nothing but the spacing
    shaping = Shaping(delay_s=0.020, jitter_s=0.010, jitter_distribution="uniform",
                      jitter_reorder=jitter_reorder)
    with labs(two_hosts_router(shaping)) as lab:
        got = numbered_udp_stream(lab, "h1", "h2", "198.18.2.1", 500, 0.001, wait_s=5.0)
    assert sorted(got) == list(range(500))
    if jitter_reorder:
        assert overtaken(got) > 0
    else:
        assert overtaken(got) == 0, f"{overtaken(got)} of 500 datagrams overtaken"
