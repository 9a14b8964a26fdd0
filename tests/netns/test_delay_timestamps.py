"""A delayed link looks like a cable to every timestamp taken at its ends.

The native delay line holds packets in the lab's wire namespace, between the link's two
ends, so the sender's kernel stamps a packet when it leaves and the receiver's when it
arrives, after the delay: plain ``ping`` (its receive stamp is the kernel's, SO_TIMESTAMP)
sees both directions' delay, and tcpdump on the two ends of one link reads each packet's
one-way delay. These are properties of the emulation (a line never releases early; the
minimum of ~20 samples is the delay itself plus microseconds), not margins on CI load:
tolerance max(0.3 ms, 3 %), the fidelity check's. Host kernel, no netem; lab addresses only.
"""

from __future__ import annotations

import ipaddress as ip
import re
import struct
import subprocess
import time
from pathlib import Path

import pytest
from traffic import start_server

from analysis.tcpflows import analyse_capture
from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
from models.shaping import Shaping

pytestmark = pytest.mark.netns

DELAY_S = 0.010
COUNT = 20
H1, H2 = "198.18.0.1", "198.18.0.2"
ICMP_ECHO = 8


def _tolerance_s(value_s: float) -> float:
    return max(0.3e-3, 0.03 * value_s)


def _cable(delay_s: float = DELAY_S) -> LabPlan:
    """h1 - h2 on one link, ``delay_s`` each way on the native line."""
    line = Shaping(delay_s=delay_s)
    return LabPlan("cable", nodes=(NodePlan("h1", "host"), NodePlan("h2", "host")),
                   links=(LinkPlan("h1-h2", Endpoint("h1", "eth0", ip.IPv4Interface(f"{H1}/24")),
                                   Endpoint("h2", "eth0", ip.IPv4Interface(f"{H2}/24")),
                                   a_to_b=line, b_to_a=line, delay_line="native"),))


def _ping_rtts_s(lab, count: int = COUNT) -> list[float]:
    """Plain ping (the kernel's receive stamp), h1 -> h2."""
    out = lab.run("h1", ["ping", "-n", "-c", str(count), "-i", "0.05", "-W", "2", H2]).stdout
    return [float(x) / 1e3 for x in re.findall(r"time=([\d.]+) ms", out)]


def test_plain_ping_sees_both_directions_delay(labs):
    with labs(_cable()) as lab:
        lab.run("h1", ["ping", "-c", "1", "-W", "3", H2])  # ARP
        rtts = _ping_rtts_s(lab)
    assert len(rtts) == COUNT
    assert abs(min(rtts) - 2 * DELAY_S) <= _tolerance_s(2 * DELAY_S), \
        f"plain ping's minimum RTT {min(rtts) * 1e3:.3f} ms, link 2 x {DELAY_S * 1e3:g} ms"


def _echo_requests(pcap: Path) -> dict[tuple[int, int], float]:
    """(ICMP id, seq) -> capture time (s, nanosecond pcap) of every IPv4 echo request in
    ``pcap`` (Ethernet link type): the pcap file format's 24-byte header and 16-byte record
    headers, IPv4 header length from its IHL."""
    data = pcap.read_bytes()
    assert struct.unpack("<I", data[:4])[0] == 0xA1B23C4D, "not a nanosecond pcap"
    out, off = {}, 24
    while off + 16 <= len(data):
        sec, nsec, caplen, _ = struct.unpack("<IIII", data[off:off + 16])
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        if len(frame) < 14 + 20 + 8 or frame[12:14] != b"\x08\x00" or frame[23] != 1:
            continue
        icmp = 14 + (frame[14] & 0x0F) * 4
        if frame[icmp] == ICMP_ECHO:
            key = struct.unpack("!HH", frame[icmp + 4:icmp + 8])
            out[key] = sec + nsec / 1e9
    return out


def _capture(lab, node: str, path: Path, what: str = "icmp") -> subprocess.Popen:
    proc = lab.popen(node, ["tcpdump", "-n", "-U", "--immediate-mode", "-i", "eth0", "-s", "128",
                            "--time-stamp-precision=nano", "-w", str(path), what],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # tcpdump says "listening on" once its socket is bound (stderr, after -w is opened)
    deadline = time.monotonic() + 10
    while not path.exists() or path.stat().st_size < 24:
        assert proc.poll() is None and time.monotonic() < deadline, "tcpdump did not start"
        time.sleep(0.02)
    return proc


def test_the_two_ends_captures_read_the_one_way_delay(labs, tmp_path):
    with labs(_cable()) as lab:
        lab.run("h1", ["ping", "-c", "1", "-W", "3", H2])  # ARP
        caps = {n: tmp_path / f"{n}.pcap" for n in ("h1", "h2")}
        procs = [_capture(lab, n, p) for n, p in caps.items()]
        sent_s = time.time()
        _ping_rtts_s(lab)
        time.sleep(0.2)
        for p in procs:
            p.terminate()
            p.wait(10)
    left, arrived = _echo_requests(caps["h1"]), _echo_requests(caps["h2"])
    assert len(arrived) == COUNT and arrived.keys() <= left.keys()
    one_way = [arrived[k] - left[k] for k in arrived]
    # the receiver's capture stamps each packet no earlier than it was sent plus the delay
    assert all(arrived[k] >= sent_s + DELAY_S for k in arrived)
    assert min(one_way) >= DELAY_S, f"a packet seen at h2 {min(one_way) * 1e3:.3f} ms after h1"
    # and the sender's stamps it when it leaves: the two differ by the one-way delay
    assert min(one_way) - DELAY_S <= _tolerance_s(DELAY_S), \
        f"h2's capture minus h1's: at least {min(one_way) * 1e3:.3f} ms, delay {DELAY_S * 1e3:g} ms"


def test_a_senders_capture_reads_tcps_full_rtt(labs, tmp_path):
    """The RTT samples ``aitb pcap`` takes on the sending host's capture (a segment out, its
    ACK in) span both directions' delay: the ACK is stamped when it arrives, not before a
    hold in the sender's own namespace."""
    cap = tmp_path / "h1.pcap"
    with labs(_cable()) as lab:
        lab.run("h1", ["ping", "-c", "1", "-W", "3", H2])  # ARP
        srv = start_server(lab, "h2")
        proc = _capture(lab, "h1", cap, "tcp port 5201")
        lab.run("h1", ["iperf3", "-c", H2, "-n", "2M"])
        srv.wait(10)
        time.sleep(0.2)
        proc.terminate()
        proc.wait(10)
    flows = [f for f in analyse_capture(cap).flows if f.get("rtt_samples")]
    bulk = max(flows, key=lambda f: f["rtt_samples"])  # iperf3's data connection
    assert abs(bulk["rtt_min_s"] - 2 * DELAY_S) <= _tolerance_s(2 * DELAY_S), bulk
