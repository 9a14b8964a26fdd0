"""The vm tier's delay, loss, buffer and DCI checks (tests/netns/test_netem_vm.py,
tests/vm/test_dci_delay_iteration.py) on the host kernel against the native delay line, with
the native tolerances: CI needs the VM only for netem itself.

RTTs come from ``ping -U`` (user-space send/receive times): plain ping takes the kernel's
receive timestamp, stamped before PREROUTING, where the line in the pinger's own namespace
holds the reply.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from plans import two_hosts_router
from traffic import iperf3, start_server, warm_up_lossy

from models.plan import NodePlan
from models.shaping import Shaping
from models.units import BufferSize
from testbed.delay import native

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]


def _native(plan):
    return dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, delay_line="native")
                                                 for lk in plan.links))


def _rtts_ms(out: str) -> list[float]:
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]


def test_ping_rtt_matches_twice_the_configured_delay(labs):
    delay_s = 0.010
    plan = _native(two_hosts_router(Shaping(delay_s=delay_s), Shaping(delay_s=delay_s)))
    with labs(plan) as lab:
        lab.run("h1", ["ping", "-c", "2", "-W", "2", "198.18.2.1"])  # ARP, warm-up
        out = lab.run("h1", ["ping", "-U", "-c", "20", "-i", "0.05", "198.18.2.1"]).stdout
        line = native.stats(lab)["h1-r1/a_to_b"]["queue"]["added_delay"]
    rtts = sorted(_rtts_ms(out))
    want = 2 * delay_s * 1e3
    print(f"FIGURE ping -U RTT through 2 x {delay_s * 1e3:.0f} ms native line: min "
          f"{rtts[0]:.3f}, median {rtts[len(rtts) // 2]:.3f} ms, want {want:.1f} ms; line "
          f"added delay p50 {line['p50_us']:.0f} us p99 {line['p99_us']:.0f} us")
    # the target, max(0.3 ms, 3 %), on the minimum: ping itself is a nice-0 process
    # on a shared 2-core box, woken ms late at times (its median measures that, not the line)
    assert abs(rtts[0] - want) <= max(0.3, 0.03 * want), rtts
    # the line's own record (kernel arrival to release) has the same target at its median
    assert abs(line["p50_us"] / 1e3 - delay_s * 1e3) <= max(0.3, 0.03 * delay_s * 1e3)


def test_random_loss_inside_the_9999pct_binomial_interval(labs):
    loss_pct, n = 10.0, 1000
    with labs(_native(two_hosts_router(Shaping(loss_pct=loss_pct)))) as lab:
        warm_up_lossy(lab, "h1", "198.18.2.1")
        before = native.stats(lab)["h1-r1/a_to_b"]["queue"]["dropped_loss"]
        proc = lab.popen("h1", ["ping", "-q", "-c", str(n), "-i", "0.002", "-W", "1",
                                "198.18.2.1"], stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=120)
        counted = native.stats(lab)["h1-r1/a_to_b"]["queue"]["dropped_loss"] - before
    received = int(re.search(r"(\d+) received", out).group(1))
    lost, p = n - received, loss_pct / 100
    # 99.99 % normal approximation of Binomial(n, p): n*p +- 3.891*sqrt(n*p*(1-p)); the
    # 99 % interval would fail one run in a hundred by design (a CI run saw it)
    half = 3.891 * math.sqrt(n * p * (1 - p))
    print(f"FIGURE native random loss {loss_pct}%: lost {lost} of {n} (line counted "
          f"{counted}), 99.99% interval [{n * p - half:.0f}, {n * p + half:.0f}]")
    assert n * p - half <= counted <= n * p + half, f"the line dropped {counted} of {n}"
    # the line's drops are ping's losses, give or take a few: a warm-up echo or an IPv6
    # neighbour message may be among the line's (a CI run: 102 vs 101), and on a loaded
    # machine ping may give up on a late reply (-W 1) that the line did not drop
    assert abs(lost - counted) <= 5, f"ping lost {lost}, the line dropped {counted}"


def _drops(lab, node: str, ifname: str, handle: int) -> int:
    from pyroute2 import IPRoute
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        for q in ipr.get_qdiscs(index=lab.layout.nodes[node].ifindex(ifname)):
            if q["handle"] == handle:
                return q.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["drops"]
    raise AssertionError(f"no qdisc {handle:#x} on {node}:{ifname}")


def _line_drops(lab, key: str) -> int:
    q = native.stats(lab)[key]["queue"]
    return (q["dropped_loss"] + q["dropped_ge"] + max(0, q["kernel_queue_dropped"])
            + max(0, q["kernel_user_dropped"]))


def test_item7_buffer_independent_of_the_delay_line(labs):
    """100 Mbit/s, 50 ms, 100-packet buffer: a BDP window runs without drops; a window free to
    grow builds a standing queue that only the 100-packet buffer drops; the native line (its
    queue sized from the BDP) drops nothing. As the vm tier's netem test, same reasoning."""
    # Wire-sized packets on every hop, as in the vm tier's netem test: a BDP window then
    # arrives ACK-clocked, one or two frames at a time. With GSO (a packet buffer alone keeps
    # it, behind its segmenter) the unshaped sender would put 64 KB bursts into the 100-packet
    # buffer, which a shallow buffer fed by a fast link drops even with a BDP window
    # (tests/netns/test_shaping_traffic.py covers that regime). 100 Mbit/s, not 1 Gbit/s:
    # with wire-sized packets every hop handles every frame (~83 000 packets/s at 1 Gbit/s,
    # too many for a loaded 2-core box). 100 Mbit/s x 50 ms still has a BDP (413 packets)
    # four times the buffer. bench/native_vs_netem.py measures 1 Gbit/s (GSO kept).
    rate_bps, delay_s = 10**8, 0.050
    bdp_bytes = int(rate_bps * delay_s / 8)
    big = {"net.ipv4.tcp_wmem": "4096 131072 67108864"}
    plan = _native(two_hosts_router(h2_in=Shaping(rate_bps=rate_bps, delay_s=delay_s,
                                                  buffer=BufferSize(packets=100))))
    plan = plan.__class__(plan.name, tuple(
        NodePlan(n.name, n.kind, routes=n.routes, sysctls=big) if n.kind == "host" else n
        for n in plan.nodes), plan.links)
    with labs(plan, wire_packets=True) as lab:
        buf = ("r1", "e2", 0x100000)
        lab.run("h1", ["ping", "-c", "1", "-W", "2", "198.18.2.1"])
        lab.run("h2", ["sysctl", "-w", f"net.ipv4.tcp_rmem=4096 131072 {2 * bdp_bytes}"])
        server = start_server(lab, "h2")
        client = lab.popen("h1", ["iperf3", "-c", "198.18.2.1", "-t", "10", "-C", "cubic",
                                  "-J"], stdout=subprocess.PIPE, text=True)
        time.sleep(5)  # slow start and its losses are over: the window limits the flow now
        before = _drops(lab, *buf)
        out, _ = client.communicate(timeout=60)
        # the one-off server ends after its test: until it has, the next server cannot bind
        # port 5201 (and the next start_server saw the old listener: connection refused)
        server.communicate(timeout=30)
        steady = (_drops(lab, *buf) - before, _line_drops(lab, "h2-r1/b_to_a"))
        lab.run("h2", ["sysctl", "-w", f"net.ipv4.tcp_rmem=4096 131072 {64 << 20}"])
        iperf3(lab, "h1", "h2", "198.18.2.1", seconds=5, omit=0, extra=("-C", "cubic"))
        grown = (_drops(lab, *buf) - before - steady[0], _line_drops(lab, "h2-r1/b_to_a"))
    intervals = json.loads(out)["intervals"]
    last = intervals[-1]["sum"]["bits_per_second"]
    # segments sent while the drops were counted (the client's last 5 s)
    segments = sum(i["sum"]["bytes"] for i in intervals if i["sum"]["start"] >= 5) / 1448
    print(f"FIGURE native item 7 at 100 Mbit/s x 50 ms, 100p buffer: BDP window drops "
          f"(buffer, line) {steady} of {segments:.0f} segments, grown window drops {grown}, "
          f"goodput {last / 1e6:.1f} Mbit/s")
    # Behaviour, asserted: the line never drops, and the drops a window grown past the BDP
    # causes are the 100-packet buffer's. How few drops a BDP window has, and its goodput, are
    # figures (printed above; the target is measured by bench/native_vs_netem.py): on a quiet
    # machine 0 drops and ~82 % of the bound (the host's 6.x kernel scales tcp_rmem to a window
    # by its payload/truesize ratio), but under load a stall of the line's helper or of r1's
    # softirqs beyond ~12 ms (100 packets at 100 Mbit/s) releases a clump whose ACKs make the
    # unshaped sender burst past the buffer: CI run 10 saw 10 drops in ~40 000 segments at
    # load ~2, a run beside a TCG VM boot 312 in 31 270 (1 %) and 62.6 Mbit/s. The loose bounds
    # below still fail a line that releases in clumps all the time or carries next to nothing.
    assert steady[1] == 0 and steady[0] <= 0.05 * segments, \
        f"(buffer, delay line) drops with a BDP window: {steady} of {segments:.0f} segments"
    assert grown[0] > 0 and grown[1] == 0, f"(buffer, delay line) drops: {grown}"
    assert last >= 0.30 * rate_bps * 1448 / 1514, f"{last / 1e6:.1f} Mbit/s"


def test_set_shaping_changes_the_delay_live_and_to_zero(labs):
    def min_rtt_ms(lab) -> float:
        return min(_rtts_ms(lab.run("h1", ["ping", "-U", "-c", "5", "-i", "0.05",
                                           "198.18.2.1"]).stdout))

    with labs(_native(two_hosts_router(Shaping(delay_s=0.005)))) as lab:
        lab.run("h1", ["ping", "-c", "1", "-W", "2", "198.18.2.1"])
        lab.set_shaping("h1-r1", "a_to_b", Shaping(delay_s=0.02))
        assert 20 <= min_rtt_ms(lab) < 25  # never early; 5 ms: the old value would be 5
        lab.set_shaping("h1-r1", "a_to_b", Shaping(delay_s=0.04))
        assert 40 <= min_rtt_ms(lab) < 45
        lab.set_shaping("h1-r1", "a_to_b", Shaping())  # delay 0: the line stays, holds 0
        assert min_rtt_ms(lab) < 5


@pytest.mark.timeout(900)
def test_iteration_time_grows_with_dci_delay_as_alpha_beta_predicts(tmp_path):
    if "native" not in _offered():
        pytest.skip("the native delay line is not available here")
    sys.path.insert(0, str(ROOT / "tests" / "vm"))
    import test_dci_delay_iteration as dci  # the vm tier's test, its own model and tolerance
    dci.test_iteration_time_grows_with_dci_delay_as_alpha_beta_predicts(tmp_path)


@pytest.mark.timeout(600)
def test_a_mininet_run_pays_the_native_dci_delay_in_every_iteration(tmp_path):
    if "native" not in _offered():
        pytest.skip("the native delay line is not available here")
    sys.path.insert(0, str(ROOT / "tests" / "vm"))
    import test_mininet_run_vm as vm  # the vm tier's test, its own model and tolerance
    run_dir = vm.mininet_run_pays_the_dci_delay(tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert {v["backend"] for v in manifest["delay_lines"].values()} == {"native"}


def _offered() -> list[str]:
    from testbed.host.capabilities import delay_lines_offered, probe
    return delay_lines_offered(probe())
