"""Incast per burst against the packets themselves: the drops metrics.json gives each burst
(counter samples read in the idle time around it) equal the frames the senders put on the
wire towards the receiver less the frames that left the bottleneck port, counted from
captures of the same run. One short run of the incast example's lab (7 senders, a 1 Gbit/s
port with a 100-packet buffer), three bursts 150 ms apart."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import records, run_ok

from analysis.pcap.decode import DecodeStats, decode_frame
from analysis.pcap.detect import open_capture

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
SENDERS = [f"tx{i}" for i in range(1, 8)]


def _frames(path: Path, dst_ip: bytes, other: list[float] | None = None,
            data: list[float] | None = None) -> list[float]:
    """Times (s) of the TCP frames towards ``dst_ip`` in one capture (data, and the
    handshake's and teardown's: the queue counts every packet). The senders' and the port's
    queues are packet-counted buffers behind a segmenter (testbed/tc/qdiscs/tbf.py), and
    tcpdump sees what leaves a queue, so each is one frame. Frames that are not IP (ARP)
    go to ``other`` too, the ones with payload to ``data`` too."""
    cap, stats, out = open_capture(path), DecodeStats(), []
    for t, link, buf, off, caplen, wirelen in cap.frames():
        got = decode_frame(link, buf, off, caplen, wirelen, stats)
        if got is not None and got[0] == 6 and got[2] == dst_ip:
            out.append(cap.start_ns / 1e9 + t)
            if got[5] > 0 and data is not None:
                data.append(out[-1])
        elif got is None and other is not None:
            other.append(cap.start_ns / 1e9 + t)
    return out


def test_per_burst_drops_agree_with_the_captures(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}
    topo = ROOT / "topologies/examples/incast.yaml"
    points = ", ".join(["s1:rx", *(f"{h}:eth0" for h in SENDERS)])
    exp = tmp_path / "incast-bursts.yaml"
    exp.write_text(f"name: incast-bursts\nseed: 1\ntopology: {{file: {topo}}}\n"
                   f"capture: {{interfaces: [{points}]}}\n"
                   "workloads:\n  - {kind: incast, receiver: rx, size: 256KiB, repeats: 3, "
                   "gap: 150ms}\n")
    run_dir = run_ok(exp, tmp_path / "results", env)
    index = json.loads((run_dir / "captures/index.json").read_text())
    assert all(i["packets_dropped_by_kernel"] == 0 for i in index["interfaces"])
    plan = json.loads((run_dir / "plan.json").read_text())
    rx_ip = next(bytes(int(x) for x in lk["a"]["ipv4"].split("/")[0].split("."))
                 for lk in plan["links"] if lk["a"]["node"] == "rx")
    files = {(i["node"], i["ifname"]): run_dir / i["files"][0] for i in index["interfaces"]}
    data: list[float] = []  # the frames with payload: all sent before a burst's last byte
    sent = [t for h in SENDERS for t in _frames(files[(h, "eth0")], rx_ip, data=data)]
    arp: list[float] = []  # the port carries ARP too (no IP header to tell its direction)
    left = _frames(files[("s1", "rx")], rx_ip, arp)

    metrics = json.loads((run_dir / "metrics.json").read_text())
    bursts = metrics["incast"]["per_burst"]
    assert len(bursts) == 3 and len(records(run_dir, "bursts.jsonl")) == 3
    exact = [b for b in bursts if b["counts"] == "exact"]
    assert exact, [b["counts"] for b in bursts]  # 150 ms of idle time holds 10 ms samples
    for b in exact:
        lo, hi = b["counts_window_s"]  # the two counter reads: idle time on either side
        offered = sum(lo <= t <= hi for t in sent)
        through = sum(lo <= t <= hi for t in left)
        assert b["drops"] == offered - through, (b, offered, through)
        # the connections' closing packets leave about when the last byte arrives, on
        # either side of the read after it; the data all before it
        assert sum(lo <= t <= hi for t in data) <= b["offered"] \
            <= offered + sum(lo <= t <= hi for t in arp), (b, offered)
    assert sum(b["drops"] for b in exact) > 0  # the port overflowed: the check saw drops
    worst = metrics["incast"]["worst_burst"]
    assert worst["finish_s"] == max(b["finish_s"] for b in bursts)
    assert metrics["summary"]["incast_finish_s_max"] == worst["finish_s"]
