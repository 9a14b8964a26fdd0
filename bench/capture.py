"""Packet capture under load: one tcpdump per interface against the shared capturer (one per
CPU, AF_PACKET TPACKET_V3 rings), same lab, same load, one run.

    sudo .venv/bin/python bench/capture.py                      # 32 hosts, 64 interfaces
    sudo .venv/bin/python bench/capture.py --hosts 128 --pps 40000 --seconds 5

Lab: the ``single_switch`` generator with ``--hosts`` hosts (unshaped links); every link
interface is captured (``all``: both ends of every link, 2 x hosts interfaces), headers only
(``--snaplen``, default 128). Load: one sender thread holds one UDP socket per host, each
opened inside its host's namespace, and sends ``--size``-byte datagrams round-robin, host i to
host i+1, at ``--pps`` datagrams per second in total for ``--seconds``. For each engine, in
turn (``--repeats`` rounds, order alternating): start the capture, send, stop it. Printed per
engine: the capturers' CPU seconds (user + system, read from /proc just before they are
stopped) and per captured packet, their resident memory summed (VmRSS: the kernel rings
mmapped by both engines included), capturer processes, packets captured against the packets
the captured interfaces counted (rx + tx, netlink link counters over the capture window) and
the drops the kernel counted; then the ratio tcpdump / shared of CPU and resident memory. The
load average is printed beside the figures (other jobs share the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import psutil
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

import topologies
from testbed.capture import make_capture
from testbed.capture.points import select_interfaces
from testbed.capture.tcpdump import CaptureConfig
from testbed.lab.lab import Lab
from testbed.ns import netns
from testbed.ns.links import RTM_GETLINK
from testbed.ns.nl import dump


def link_packets(lab: Lab, points) -> int:
    """rx + tx packets of the captured interfaces now (netlink IFLA_STATS64)."""
    total = 0
    for node in sorted({p.node for p in points}):
        names = {p.ifname for p in points if p.node == node}
        for m in dump(lab.node_io(node).sock, ifinfmsg(), RTM_GETLINK, node):
            if m.get_attr("IFLA_IFNAME") in names:
                s = m.get_attr("IFLA_STATS64")
                total += s["rx_packets"] + s["tx_packets"]
    return total


def open_senders(lab: Lab) -> list[tuple[socket.socket, tuple[str, int]]]:
    hosts = [h.name for h in lab.plan.hosts()]
    out = []
    for i, h in enumerate(hosts):
        dst = str(lab.plan.address_of(hosts[(i + 1) % len(hosts)]))
        s = netns.run_in(lab.node_io(h).fd, socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
        out.append((s, (dst, 9)))  # discard port: nobody listens (ICMP unreachable, limited)
    return out


def send(senders, pps: int, seconds: float, size: int) -> int:
    payload, sent, n = b"x" * size, 0, len(senders)
    t0 = time.monotonic()
    while (now := time.monotonic()) - t0 < seconds:
        due = int((now - t0) * pps)
        while sent < due:
            s, dst = senders[sent % n]
            try:
                s.sendto(payload, dst)
            except OSError:
                pass
            sent += 1
        time.sleep(0.001)
    return sent


def procs_of(cap) -> list[int]:
    if hasattr(cap, "procs") and cap.procs:
        return [p.pid for p, _, _ in cap.procs]
    return [r.proc.pid for r in cap.running]


def one(lab: Lab, points, engine: str, a) -> dict:
    out = Path(tempfile.mkdtemp(prefix="aitb-bench-capture-")) / "captures"
    cap = make_capture(lab, out, points, CaptureConfig(snaplen_bytes=a.snaplen, engine=engine))
    senders = open_senders(lab)
    try:
        t_start = time.perf_counter()
        cap.start()
        started_s = time.perf_counter() - t_start
        before = link_packets(lab, points)
        sent = send(senders, a.pps, a.seconds, a.size)
        time.sleep(0.2)
        after = link_packets(lab, points)
        cpu, rss = 0.0, 0
        for pid in procs_of(cap):
            p = psutil.Process(pid)
            t = p.cpu_times()
            cpu += t.user + t.system
            rss += p.memory_info().rss
        nprocs = len(procs_of(cap))
        index = cap.stop()
    finally:
        for s, _ in senders:
            s.close()
        shutil.rmtree(out.parent, ignore_errors=True)
    captured = sum(i["packets_captured"] or 0 for i in index["interfaces"])
    drops = sum(i["packets_dropped_by_kernel"] or 0 for i in index["interfaces"])
    return {"engine": engine, "processes": nprocs, "start_s": started_s, "cpu_s": cpu,
            "rss_mib": rss / 2**20, "datagrams_sent": sent, "link_packets": after - before,
            "captured": captured, "dropped_by_kernel": drops,
            "cpu_us_per_packet": cpu / max(1, captured) * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--pps", type=int, default=20000, help="datagrams per second, in total")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--size", type=int, default=200, help="UDP payload bytes")
    ap.add_argument("--snaplen", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    plan = topologies.generate("single_switch", hosts=a.hosts)
    rows = []
    with Lab(plan) as lab:
        points = select_interfaces(plan, "all")
        for r in range(a.repeats):
            order = ("tcpdump", "shared") if r % 2 == 0 else ("shared", "tcpdump")
            for engine in order:
                rows.append(one(lab, points, engine, a) | {"loadavg": os.getloadavg()})
    print(f"{a.hosts} hosts, {2 * a.hosts} interfaces captured, {a.pps} datagrams/s of "
          f"{a.size} B for {a.seconds:g} s, snaplen {a.snaplen}")
    for r in rows:
        print(f"{r['engine']:8s} procs={r['processes']:4d} cpu={r['cpu_s']:6.2f} s "
              f"({r['cpu_us_per_packet']:5.1f} us/pkt) rss={r['rss_mib']:7.1f} MiB "
              f"captured={r['captured']} of {r['link_packets']} link packets "
              f"({r['captured'] / max(1, r['link_packets']):.3f}) drops={r['dropped_by_kernel']}"
              f" start={r['start_s']:.2f} s load={r['loadavg'][0]:.1f}")
    for key in ("cpu_s", "rss_mib", "start_s"):
        t = [r[key] for r in rows if r["engine"] == "tcpdump"]
        s = [r[key] for r in rows if r["engine"] == "shared"]
        print(f"ratio tcpdump/shared {key}: {sum(t) / max(1e-9, sum(s)):.2f}x")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
