"""Benchmark: aitb's per-flow pcap analysis against tshark on one real headers-only capture.

1. Capture: two namespaces (named with a unique run mark) joined by a veth, offloads off so
   every frame is an MTU-sized wire packet; iperf3 (4 parallel TCP streams) between them;
   ``tcpdump -s 128 -c N`` on one end writes a headers-only pcap of N packets. Namespaces and
   processes are removed afterwards, also after errors. Needs root. Skip with ``--pcap FILE``.
2. Time, on that file, in separate child processes (wall time, CPU time and peak RSS from
   wait4): ``aitb``'s analysis (analysis.tcpflows.analyse_capture: every flow with bytes, FCT,
   retransmissions classified, dup ACKs, RTT) and tshark producing the equivalent table:
   ``tshark -r F -q -z conv,tcp -z io,stat,0,COUNT(tcp.analysis.*)...``. That is the fairest
   single tshark pass: conv,tcp is tshark's per-flow table, and the io,stat counts force the
   same TCP sequence analysis aitb does (tshark runs it by default anyway).
3. Memory bounded by flows: the same analysis on the first tenth of the file must peak at
   about the same RSS.

aitb is timed twice: the whole process (interpreter, numba import, loading the cached
compiled kernel, ~0.6 s fixed) and the analysis alone once libraries are loaded (the
throughput a long capture sees). tshark is timed as a whole process.

Usage: sudo .venv/bin/python bench/pcap_analysis.py [--packets 1000000] [--pcap FILE]
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyroute2 import IPRoute, NetNS, netns

ADDR_A, ADDR_B = "198.18.250.1", "198.18.250.2"
FLAGS = ("tcp.analysis.retransmission", "tcp.analysis.fast_retransmission",
         "tcp.analysis.duplicate_ack")


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr.strip()}")
    return out


def make_lab(mark: str) -> tuple[str, str, str, str]:
    ns_a, ns_b, if_a, if_b = f"{mark}-a", f"{mark}-b", f"{mark}a", f"{mark}b"
    netns.create(ns_a)
    netns.create(ns_b)
    with IPRoute() as ipr:
        ipr.link("add", ifname=if_a, kind="veth", peer=if_b)
        ipr.link("set", index=ipr.link_lookup(ifname=if_a)[0], net_ns_fd=ns_a)
        ipr.link("set", index=ipr.link_lookup(ifname=if_b)[0], net_ns_fd=ns_b)
    for ns, ifname, addr in ((ns_a, if_a, ADDR_A), (ns_b, if_b, ADDR_B)):
        with NetNS(ns) as nl:
            idx = nl.link_lookup(ifname=ifname)[0]
            nl.addr("add", index=idx, address=addr, prefixlen=30)
            nl.link("set", index=idx, state="up")
            nl.link("set", index=nl.link_lookup(ifname="lo")[0], state="up")
        run(["ip", "netns", "exec", ns, "ethtool", "-K", ifname, "gso", "off", "tso", "off",
             "gro", "off"])
    return ns_a, ns_b, if_a, if_b


def capture(path: Path, packets: int) -> float:
    mark = "pb" + secrets.token_hex(3)  # unique owner mark of this run
    procs: list[subprocess.Popen] = []
    try:
        ns_a, ns_b, if_a, _ = make_lab(mark)
        t0 = time.monotonic()
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns_b, "iperf3", "-s", "-1", "-B",
                                       ADDR_B], stdout=subprocess.DEVNULL))
        dump = subprocess.Popen(["ip", "netns", "exec", ns_a, "tcpdump", "-i", if_a, "-s", "128",
                                 "-B", "65536", "-c", str(packets), "-Z", "root", "-w",
                                 str(path)], stderr=subprocess.PIPE, text=True)
        procs.append(dump)
        time.sleep(1.0)
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns_a, "iperf3", "-c", ADDR_B,
                                       "-P", "4", "-b", "400M", "-t", "120"],
                                      stdout=subprocess.DEVNULL))
        _, err = dump.communicate(timeout=300)
        if dump.returncode != 0:
            raise SystemExit(f"tcpdump failed: {err}")
        print("tcpdump:", " ".join(err.split("\n")[-4:]).strip())
        return time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=10)
        for ns in (f"{mark}-a", f"{mark}-b"):
            if os.path.exists(f"/var/run/netns/{ns}"):
                netns.remove(ns)
        left = [n for n in netns.listnetns() if n.startswith(mark)]
        assert not left, f"namespaces left behind: {left}"


REPEAT = 3  # every figure is the best of this many runs: other load only ever slows a run


def timed(argv: list[str]) -> tuple[float, float, int, str]:
    """Best wall s, best CPU s (user+sys), peak RSS bytes and stdout of REPEAT child runs."""
    runs = [_timed_once(argv) for _ in range(REPEAT)]
    return (min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs),
            min(runs)[3])


def _timed_once(argv: list[str]) -> tuple[float, float, int, str]:
    with tempfile.TemporaryFile(mode="w+") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed with {p.returncode}")
        out.seek(0)
        return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024, out.read()


AITB_CHILD = """
import sys, time
from analysis.tcpflows import analyse_capture
if sys.argv[2] == "compiled":  # load numba and the cached kernel first: steady-state figure
    analyse_capture(sys.argv[3], engine="compiled")
w, c = time.perf_counter(), time.process_time()
r = analyse_capture(sys.argv[1], engine=sys.argv[2])
w, c = time.perf_counter() - w, time.process_time() - c
t = [f for f in r.flows if f['proto'] == 'tcp']
print(r.packets, len(t), sum(f['retransmissions'] for f in t),
      sum(f['fast_retransmissions'] for f in t), sum(f['dup_acks'] for f in t), w, c)
"""


def tshark_argv(path: Path) -> list[str]:
    stats = ",".join(f"COUNT({f}){f}" for f in FLAGS)
    return ["tshark", "-r", str(path), "-q", "-z", "conv,tcp", "-z", f"io,stat,0,{stats}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--pcap", type=Path, help="use this capture instead of making one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="aitb-bench-") as tmp:
        path = args.pcap or Path(tmp) / "bench.pcap"
        if args.pcap is None:
            print(f"capturing {args.packets} packets ...")
            print(f"capture took {capture(path, args.packets):.1f} s")
        report(path, Path(tmp))


def aitb(path: Path, engine: str, warm: Path) -> tuple[float, float, int, list[float]]:
    runs = [_timed_once([sys.executable, "-c", AITB_CHILD, str(path), engine, str(warm)])
            for _ in range(REPEAT)]
    outs = [[float(x) for x in r[3].split()] for r in runs]
    best = min(outs, key=lambda o: o[5])
    best[5], best[6] = min(o[5] for o in outs), min(o[6] for o in outs)
    return min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs), best


def report(path: Path, tmp: Path) -> None:
    size = path.stat().st_size
    warm = tmp / "warm.pcap"  # 10 packets: loads numba and the kernel before the timed part
    run(["tcpdump", "-r", str(path), "-c", "10", "-w", str(warm)])
    _timed_once([sys.executable, "-c", AITB_CHILD, str(warm), "compiled", str(warm)])  # cache
    for engine in ("reference", "compiled"):
        wall, cpu, rss, (pkts, flows, retx, fast, dup, in_wall, in_cpu) = aitb(path, engine,
                                                                               warm)
        pkts = int(pkts)
        print(f"file: {path} ({size / 1e6:.1f} MB, {pkts} packets, {int(flows)} TCP flows)")
        print(f"aitb {engine}: process {wall:.2f} s wall, {cpu:.2f} s CPU -> "
              f"{pkts / wall / 1e6:.3f} Mpkt/s ({pkts / cpu / 1e6:.3f} per CPU-second); "
              f"analysis alone (libraries loaded) {in_wall:.2f} s wall, {in_cpu:.2f} s CPU -> "
              f"{pkts / in_wall / 1e6:.3f} Mpkt/s ({pkts / in_cpu / 1e6:.3f} per CPU-second); "
              f"peak RSS {rss / 2**20:.0f} MiB; retx {int(retx)}, fast {int(fast)}, "
              f"dup ACKs {int(dup)}")
    t_wall, t_cpu, t_rss, t_out = timed(tshark_argv(path))
    counts = [ln for ln in t_out.splitlines() if "<>" in ln and "<->" not in ln][-1]
    print(f"tshark: {t_wall:6.2f} s wall, {t_cpu:6.2f} s CPU, {pkts / t_wall / 1e6:.3f} Mpkt/s "
          f"(per core: {pkts / t_cpu / 1e6:.3f}), peak RSS {t_rss / 2**20:.0f} MiB; "
          f"io,stat row: {' '.join(counts.split())}")
    print(f"ratio tshark/aitb (compiled, whole process): {t_wall / wall:.2f}x (wall), "
          f"{t_cpu / cpu:.2f}x (CPU)")
    if shutil.which("editcap"):  # the same packets as pcapng (Wireshark's default format)
        ng = tmp / "bench.pcapng"
        run(["editcap", "-F", "pcapng", str(path), str(ng)])
        wall, cpu, _, (*_, in_wall, in_cpu) = aitb(ng, "compiled", warm)
        print(f"aitb compiled on the pcapng copy: process {wall:.2f} s wall, {cpu:.2f} s CPU; "
              f"analysis alone {in_wall:.2f} s wall, {in_cpu:.2f} s CPU -> "
              f"{pkts / in_cpu / 1e6:.3f} Mpkt per CPU-second")
    tenth = tmp / "tenth.pcap"
    run(["tcpdump", "-r", str(path), "-c", str(pkts // 10), "-w", str(tenth)])
    _, _, rss10, _ = aitb(tenth, "compiled", warm)
    print(f"memory: peak RSS {rss10 / 2**20:.0f} MiB on the first {pkts // 10} packets, "
          f"{rss / 2**20:.0f} MiB on all {pkts} (same flows: bounded by flows, not packets)")


if __name__ == "__main__":
    main()
