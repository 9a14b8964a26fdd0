"""The vm tier is real: netem delay on a veth between two namespaces shows in ping RTT."""

import os
import re
import secrets
import subprocess

import pytest
from pyroute2 import NetNS, netns

DELAY_S = 0.020
ADDR_A, ADDR_B = "198.18.0.1", "198.18.0.2"  # RFC 2544 benchmarking range


@pytest.fixture
def ns_pair():
    names = [f"aitbt-{secrets.token_hex(3)}-{side}" for side in "ab"]
    handles = [NetNS(n, flags=os.O_CREAT | os.O_EXCL) for n in names]
    try:
        yield names, handles
    finally:
        for h in handles:
            h.close()
        for n in names:
            if n in netns.listnetns():
                netns.remove(n)


def _wire(names, handles):
    a, b = handles
    a.link("add", ifname="va", kind="veth", peer={"ifname": "vb", "net_ns_fd": names[1]})
    for h, ifname, addr in ((a, "va", ADDR_A), (b, "vb", ADDR_B)):
        idx = h.link_lookup(ifname=ifname)[0]
        h.addr("add", index=idx, address=addr, prefixlen=30)
        h.link("set", index=idx, state="up")
    a.tc("add", "netem", a.link_lookup(ifname="va")[0], delay=int(DELAY_S * 1e6))  # microseconds


def _ping_rtts_s(ns_name):
    out = subprocess.run(["ip", "netns", "exec", ns_name, "ping", "-n", "-c", "5", "-i", "0.2",
                          ADDR_B], capture_output=True, text=True, timeout=60, check=True).stdout
    return [float(ms) / 1e3 for ms in re.findall(r"time=([\d.]+) ms", out)]


@pytest.mark.vm
def test_netem_delay_shows_in_ping_rtt(ns_pair):
    names, handles = ns_pair
    _wire(names, handles)
    rtts = _ping_rtts_s(names[0])
    assert len(rtts) == 5
    # netem holds each packet at least DELAY_S: no RTT can be shorter (one direction delayed).
    assert min(rtts) >= DELAY_S
    # Upper bound. Native kernel: max(0.3 ms, 3 %) of the delay (the project's fidelity target).
    # Under TCG (software emulation) timers and scheduling add tens of ms: KERNEL.md saw 21-31 ms
    # for a 10 ms netem on loopback, so allow 40 ms there.
    slack_s = 0.040 if os.environ.get("AITB_IN_VM") == "tcg" else max(0.0003, 0.03 * DELAY_S)
    assert sorted(rtts)[len(rtts) // 2] <= DELAY_S + slack_s, rtts
