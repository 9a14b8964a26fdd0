"""ECN end to end on the host kernel (no RED or CoDel here): a 20 Mbit/s link whose 500 KB
fifo buffers (both directions) mark at K = 30 KiB (``ecn: true, ecn_threshold: 30KiB``,
testbed/tc/ecn_marker.py).
One cubic TCP transfer of 3 MB builds a standing queue. With ``net.ipv4.tcp_ecn = 1`` on both
hosts the connection negotiates ECN, the marker sets CE on packets that find more than K
queued, and the sender's TCP_INFO counts them (``tcpi_delivered_ce``, what the agents'
records carry as ``delivered_ce``) and ``aitb pcap``'s reading of a capture at the
receiver shows ECT(0), CE, ECE and CWR; with ``tcp_ecn = 0`` nothing is ECN-capable, nothing is
marked and nothing is counted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from traffic import wait_listening

import topologies
from analysis.tcpflows import analyse_capture
from testbed.tc.ecn_marker import counts

pytestmark = pytest.mark.netns

TOPOLOGY = """
name: ecn-pair
profiles:
  bottleneck: {rate: 20Mbit, buffer: 500KB, ecn: true, ecn_threshold: 30KiB}
defaults:
  host: {sysctls: {net.ipv4.tcp_ecn: ECN}}
nodes: {h1: {kind: host}, h2: {kind: host}}
links: [{endpoints: [h1, h2], profile: bottleneck}]
"""
PORT = 5311
SERVER = (f"import socket\ns = socket.socket(); s.bind(('0.0.0.0', {PORT})); s.listen(1)\n"
          "c, _ = s.accept()\nwhile c.recv(1 << 20):\n    pass\n")
# one cubic transfer of 3 MB; prints the sender's TCP_INFO once all of it is acknowledged
CLIENT = """
import json, socket, sys, time
from traffic_gen.tcpinfo import read_tcp_info
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
s.connect((sys.argv[1], PORT))
s.sendall(b"x" * (3 << 20))
while read_tcp_info(s)["bytes_acked"] < 3 << 20:
    time.sleep(0.01)
i = read_tcp_info(s)
print(json.dumps({"delivered_ce": i["delivered_ce"], "ecn": bool(i["options"] & 8)}))
""".replace("PORT", str(PORT))


def _transfer(labs, tmp_path, ecn: int) -> tuple[dict, dict, dict]:
    """(the sender's TCP_INFO, the marker's counts, the ECN counts ``aitb pcap`` reads from a
    capture at the receiver, summed over the connection's two directions)."""
    path = tmp_path / "ecn.yaml"
    path.write_text(TOPOLOGY.replace("ECN", str(ecn)))
    plan = topologies.load_topology(path)
    pcap = tmp_path / "h2.pcap"
    with labs(plan) as lab:
        ifname = next(lk.b.ifname for lk in plan.links)
        dump = lab.popen("h2", ["tcpdump", "-i", ifname, "-s", "96", "-U", "-w", str(pcap),
                                f"tcp port {PORT}"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
        assert "listening on" in dump.stderr.readline()  # capturing from here on
        lab.popen("h2", [sys.executable, "-c", SERVER], stdout=subprocess.DEVNULL)
        wait_listening(lab, "h2", PORT)
        out = lab.run("h1", [sys.executable, "-c", CLIENT, str(plan.address_of("h2"))],
                      timeout_s=60)
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=10)
        marker = counts(lab)["h1-h2/a_to_b"]
    flows = analyse_capture(pcap).to_dict()["flows"]
    seen = {k: sum(f.get(k, 0) for f in flows) for k in ("ect0", "ce", "ece", "cwr")}
    return json.loads(out.stdout), marker, seen


@pytest.mark.parametrize("ecn", [1, 0])
def test_ce_marks_under_a_standing_queue_with_ecn_on_and_none_with_it_off(labs, tmp_path, ecn):
    sender, marker, seen = _transfer(labs, tmp_path, ecn)
    assert marker["k_bytes"] == 30 * 1024
    if ecn:
        assert sender["ecn"] is True
        assert marker["ect_seen"] > 0 and marker["marked"] > 0
        assert sender["delivered_ce"] > 0  # the receiver echoed the marks (ECE)
        # on the wire: ECN-capable data, CE marks, their echo and the sender's reply
        assert min(seen.values()) > 0, seen
    else:
        assert sender == {"delivered_ce": 0, "ecn": False}
        assert marker["ect_seen"] == 0 and marker["marked"] == 0
        assert seen == {"ect0": 0, "ce": 0, "ece": 0, "cwr": 0}


def _filters(lab, node: str, ifname: str) -> list[str]:
    """The kinds of the filters on ``ifname``'s HTB root 1: (a netlink dump; the kernel also
    lists each priority's chain head, handle 0, skipped)."""
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    from testbed.ns.nl import dump
    req = tcmsg()
    req["index"], req["parent"] = lab.layout.node(node).ifindex(ifname), 0x10000
    return [m.get_attr("TCA_KIND") for m in dump(lab.node_io(node).sock, req, 46, node)
            if m["handle"]]


def test_a_live_reshape_moves_the_marker_and_removing_the_threshold_removes_it(labs, tmp_path):
    path = tmp_path / "ecn.yaml"
    path.write_text(TOPOLOGY.replace("ECN", "1"))
    with labs(topologies.load_topology(path)) as lab:
        link = lab.plan.links[0]
        marker = lab.ecn_markers[("h1-h2", "a_to_b")]
        assert _filters(lab, "h1", link.a.ifname) == ["bpf"]
        assert marker.read().rate_Bps == 20_000_000 // 8
        slower = link.a_to_b.with_changes(rate_bps=10_000_000)
        lab.set_shaping("h1-h2", "a_to_b", slower)  # in place: the same filter, a new rate
        assert marker.read().rate_Bps == 10_000_000 // 8
        assert _filters(lab, "h1", link.a.ifname) == ["bpf"]
        lab.set_shaping("h1-h2", "a_to_b", slower.with_changes(ecn=False, ecn_threshold=None))
        assert _filters(lab, "h1", link.a.ifname) == []
        lab.set_shaping("h1-h2", "a_to_b", slower.with_changes(buffer=None))  # back, rebuilt
        assert _filters(lab, "h1", link.a.ifname) == ["bpf"]
