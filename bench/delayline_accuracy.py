"""Accuracy and cost of the native delay line (NFQUEUE + aitb-delayline) under load.

Two namespaces A and B joined by a link, twice, side by side in one run (``--holds``): the
hold point of the lab's native line, a wire namespace between A and B (A's veth - bridge -
B's veth, the helper holding what enters the bridge from A: ``wire``), against the old one,
a veth straight from A to B and the helper in B's PREROUTING (``receiver``: after B's kernel
stamped the arrival, so plain ping and B's captures missed the delay); every row runs on
both and prints wire / receiver ratios, and plain ping's minimum RTT through 10 ms each way
is printed for each (2 x 10 ms expected).  For each configured one-way delay (1, 10, 50,
200 ms) the A->B direction is delayed by the helper while iperf3 carries
  udp1g:  ~1 Gbit/s of MTU-sized datagrams (iperf3 -u -b 1G -l 1472), and
  tcpgso: one unshaped iperf3 TCP flow (GSO/GRO super-packets, queued whole), and with
  ``--modes`` also
  udpgso10g: 10 Gbit/s of UDP GSO sends (64 KB GSO packets queued whole) to a UDP GRO
          socket (bench/udp_gso_load.py): GSO traffic whose ends cost little CPU, so that on
          2 cores the row measures the line and not one TCP flow's ends, and
  tcpwire: one unshaped TCP flow of wire-sized packets (TSO/GSO off on A's veth: iperf3 sends
          only ~0.3 Gbit/s of UDP datagrams here, TCP's own segments go faster), and
  tcpwire1g: the same flow through HTB 1 Gbit/s on A's egress (1 Gbit/s of MTU packets);
the release error (release - intended release) comes from the helper's own per-packet log,
and the time the helper spent inside each verdict sendto (the kernel re-injects the accepted
packets there: for TCP the receiver's stack, its ACK and often the sender's next segments).
Both veths spread their receive processing over every CPU (RPS), as lab interfaces do; with
``--isolate`` each row runs again with the last usable CPU given to the helper as a lab's
``delay_line_cpu`` gives it (pinned, spinning before every release, RPS on the other CPUs),
and the ratio of the two is printed:  --modes tcpwire1g --rt-prio 10 --isolate
(--skip-goodput --seconds 4, 2-core VM, load 0.7-2.5, the build before and after the dedicated
CPU's helper spun through release gaps and wrote stats off its loop, alternated twice: release
error p50 / p99 dedicated, before -> now: 1 ms 3.5-4.1 / 24-51 us -> 3.8-5.3 / 23-27 us;
10 ms 4.8-6.3 / 38-44 -> 3.7-4.8 / 20-32; 50 ms 7.9-8.8 / 55-61 -> 4.7-6.7 / 39-42; 200 ms
9.4-9.6 / 96-124 -> 8.7-9.4 / 90-134; helper CPU-s per Gbit carried 0.41-0.60 -> 0.93-1.50;
shared now p50 11-34 us, p99 56-297 us; under a background load of process starts and dd
copies, dedicated p99 41-123 us before, 28-112 us now; bench/README.md, "delayline_accuracy.py",
has the table)
Then one TCP flow through HTB 1 Gbit/s with 50 ms each way (RTT 100 ms) and a BDP-sized
window, against the bound 1 Gbit/s x 1448/1514 (payload per wire byte HTB counts).

Run as root:  PYTHONPATH=. .venv/bin/python bench/delayline_accuracy.py [--seconds 5]
Lab traffic only: 10.232.0.0/24 inside the namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyroute2 import IPRoute, NetNS
from pyroute2 import netns as pr_netns

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testbed.delay.nfqueue import Helper, QueueParams, maxlen_for_bdp, read_pktlog  # noqa: E402
from testbed.delay.nfqueue.linecpu import check_line_cpu, keep_off, restore  # noqa: E402
from testbed.delay.nfqueue.rules import nfqueue_rule_argv  # noqa: E402
from testbed.ns.sysctl import all_cpus_mask  # noqa: E402

A_IP, B_IP = "10.232.0.1", "10.232.0.2"
RT_PRIO = 0  # --rt-prio
TCP_BUF_MAX_BYTES = 1 << 30  # each namespace's tcp_rmem/tcp_wmem max
OMIT_S = 1  # --omit-s: TCP rows leave out their first seconds (slow start) from the rate
ZEROCOPY = False  # --zerocopy: iperf3 -Z (the sender's sendfile: no copy from user space)
LINE_CPU: int | None = None  # --isolate: 0


def sh(ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                          check=check)


HOLDS = ("receiver", "wire")


class Pair:
    """A and B joined by one veth (``hold`` receiver: the line in B's PREROUTING) or by two
    veths into a wire namespace W whose bridge joins them (``hold`` wire: the line in W's
    PREROUTING, physdev-in the port A's veth enters by), as testbed/lab/layout.py's wires."""

    def __init__(self, hold: str = "receiver") -> None:
        self.hold = hold
        self.tag = secrets.token_hex(2)
        self.a, self.b = f"dlb-{self.tag}-a", f"dlb-{self.tag}-b"
        self.w = f"dlb-{self.tag}-w"
        self.ia, self.ib = f"dlb{self.tag}a", f"dlb{self.tag}b"
        self.wa, self.wb = f"dlw{self.tag}a", f"dlw{self.tag}b"

    def names(self) -> tuple[str, ...]:
        return (self.a, self.b, self.w) if self.hold == "wire" else (self.a, self.b)

    def line_rule(self, qnum: int, into_b: bool = True, delete: bool = False
                  ) -> tuple[str, list[str]]:
        """(namespace, iptables argv) of the rule that queues what A sends to B (``into_b``)
        or B to A on queue ``qnum``."""
        if self.hold == "receiver":
            ns, ifn = (self.b, self.ib) if into_b else (self.a, self.ia)
            return ns, nfqueue_rule_argv(ifn, qnum, "bench", delete=delete)
        port = self.wa if into_b else self.wb
        return self.w, ["iptables", "-w", "-t", "mangle", "-D" if delete else "-A",
                        "PREROUTING", "-m", "physdev", "--physdev-in", port, "-j", "NFQUEUE",
                        "--queue-num", str(qnum)]

    def wire_tx_dropped(self) -> int:
        """Packets the wire's port towards B could not hand B (B's backlog full): released
        by the line, lost after it; 0 without a wire."""
        if self.hold != "wire":
            return 0
        with NetNS(self.w) as n:
            (m,) = n.get_links(n.link_lookup(ifname=self.wb)[0])
            return int(m.get_attr("IFLA_STATS64")["tx_dropped"])

    def line_ns(self, into_b: bool = True) -> str:
        return self.line_rule(0, into_b)[0]

    def up(self) -> None:
        for ns in self.names():
            pr_netns.create(ns)
        with IPRoute() as ipr:
            if self.hold == "wire":
                for end, port, ns in ((self.ia, self.wa, self.a), (self.ib, self.wb, self.b)):
                    ipr.link("add", ifname=end, kind="veth", peer=port)
                    ipr.link("set", index=ipr.link_lookup(ifname=end)[0], net_ns_fd=ns)
                    ipr.link("set", index=ipr.link_lookup(ifname=port)[0], net_ns_fd=self.w)
            else:
                ipr.link("add", ifname=self.ia, kind="veth", peer=self.ib)
                ipr.link("set", index=ipr.link_lookup(ifname=self.ia)[0], net_ns_fd=self.a)
                ipr.link("set", index=ipr.link_lookup(ifname=self.ib)[0], net_ns_fd=self.b)
        if self.hold == "wire":
            sh(self.w, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1",
               "net.bridge.bridge-nf-call-ip6tables=1")
            with NetNS(self.w) as n:
                n.link("add", ifname="wbr", kind="bridge", br_stp_state=0,
                       br_mcast_snooping=0)
                br = n.link_lookup(ifname="wbr")[0]
                for port in (self.wa, self.wb):
                    n.link("set", index=n.link_lookup(ifname=port)[0], master=br, state="up")
                n.link("set", index=br, state="up")
        for ns, ifn, ip in ((self.a, self.ia, A_IP), (self.b, self.ib, B_IP)):
            with NetNS(ns) as n:
                idx = n.link_lookup(ifname=ifn)[0]
                n.addr("add", index=idx, address=ip, prefixlen=24)
                n.link("set", index=idx, state="up")
                n.link("set", index=n.link_lookup(ifname="lo")[0], state="up")
            # room for the window of 10 Gbit/s through the line: 10 Gbit/s x 50 ms is 62.5 MB in
            # flight, 250 MB at 200 ms, and autotuning sizes each buffer to about twice what it
            # carries (64 MB capped one GSO flow at ~5 Gbit/s at 50 ms); tcp_mem still bounds
            # the machine's total
            sh(ns, "sysctl", "-qw", f"net.ipv4.tcp_rmem=4096 131072 {TCP_BUF_MAX_BYTES}",
               f"net.ipv4.tcp_wmem=4096 131072 {TCP_BUF_MAX_BYTES}")

    def down(self) -> None:
        for ns in self.names():
            try:
                pr_netns.remove(ns)
            except OSError:
                pass


def rule(p: Pair, qnum: int, into_b: bool = True, delete: bool = False,
         check: bool = True) -> None:
    """Add (``delete``: remove) the line's rule of :meth:`Pair.line_rule`."""
    ns, argv = p.line_rule(qnum, into_b, delete)
    sh(ns, *argv, check=check)


def iperf(p: Pair, args: list[str], seconds: float, server_ip: str = B_IP) -> dict:
    """iperf3 from namespace ``p.a`` to a one-shot server in ``p.b`` at ``server_ip`` (also
    used by bench/delay_accuracy_vm.py): the client's -J result, {} if it printed none."""
    srv = subprocess.Popen(["ip", "netns", "exec", p.b, "iperf3", "-s", "-1", "-B", server_ip],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        res = sh(p.a, "iperf3", "-c", server_ip, "-J", "-t", str(seconds), *args, check=False)
        return json.loads(res.stdout) if res.stdout.strip() else {}
    finally:
        try:
            srv.wait(timeout=15)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()


def pct(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def carry(p: Pair, mode: str, delay_s: float, seconds: float) -> dict:
    """The traffic of ``mode`` from A to B (iperf3's -J result); the sender's veth set up for
    it and back."""
    if mode.startswith("tcpwire"):  # TCP builds every 1448-byte segment: wire-sized packets
        sh(p.a, "ethtool", "-K", p.ia, "tso", "off", "gso", "off")
    # --isolate: the lab's dedicated line CPU (testbed.lab.lab.Lab line_cpu): the helper pinned
    # to it, spinning before every release; both veths' receive processing on the others
    mask = all_cpus_mask(without=LINE_CPU) if LINE_CPU is not None else all_cpus_mask()
    wire = ((p.w, p.wa), (p.w, p.wb)) if p.hold == "wire" else ()
    for ns, ifn in ((p.a, p.ia), (p.b, p.ib), *wire):
        sh(ns, "sh", "-c", f"echo {mask} > /sys/class/net/{ifn}/queues/rx-0/rps_cpus")
    if mode == "tcpwire1g":  # ... carried at 1 Gbit/s: HTB on A's egress, a BDP of buffer
        sh(p.a, "tc", "qdisc", "add", "dev", p.ia, "root", "handle", "1:", "htb", "default",
           "1")
        sh(p.a, "tc", "class", "add", "dev", p.ia, "parent", "1:", "classid", "1:1", "htb",
           "rate", "1gbit", "ceil", "1gbit", "burst", "125000b", "cburst", "125000b")
        sh(p.a, "tc", "qdisc", "add", "dev", p.ia, "parent", "1:1", "handle", "10:", "bfifo",
           "limit", str(max(125_000, int(1e9 / 8 * 2 * delay_s))))
    try:
        if mode == "udpgso10g":
            return udp_gso(p, 10e9, seconds)
        args = ["-u", "-b", "1G", "-l", "1472"] if mode == "udp1g" else \
            (["-O", str(OMIT_S)] if OMIT_S else []) + (["-Z"] if ZEROCOPY else [])
        return iperf(p, args, seconds)
    finally:
        if mode.startswith("tcpwire"):
            sh(p.a, "ethtool", "-K", p.ia, "tso", "on", "gso", "on", check=False)
        if mode == "tcpwire1g":
            sh(p.a, "tc", "qdisc", "del", "dev", p.ia, "root", check=False)


def udp_gso(p: Pair, rate_bps: float, seconds: float) -> dict:
    """``rate_bps`` of UDP GSO sends (64 KB each, one GSO packet through the veth and the
    line) from A to a UDP GRO socket in B (bench/udp_gso_load.py); an iperf3-shaped result."""
    load = [sys.executable, str(Path(__file__).with_name("udp_gso_load.py"))]
    rx = subprocess.Popen(["ip", "netns", "exec", p.b, *load, "rx", "5300", "1.0"],
                          stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        sent = json.loads(sh(p.a, *load, "tx", str(rate_bps), str(seconds), B_IP,
                             "5300").stdout)
        out, _ = rx.communicate(timeout=seconds + 40)
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    got = json.loads(out)
    if got["received_bytes"] != sent["sent_bytes"]:  # the line never drops: say who did
        print(f"{'':>10} udpgso: sent {sent['sent_bytes']} B, received "
              f"{got['received_bytes']} B (the rest lost at the sender or receiver socket, or "
              f"in the kernel queue: see kernel drops)", flush=True)
    return {"end": {"sum_received": {"bits_per_second": got["bits_per_second"]}}}


def received_gbps(out: dict) -> float:
    end = out.get("end", {})
    return (end.get("sum_received") or end.get("sum") or {}).get("bits_per_second", 0.0) / 1e9


def run_case(p: Pair, tmp: Path, delay_s: float, mode: str, seconds: float, qnum: int) -> dict:
    log = tmp / f"pkt-{mode}-{delay_s}"
    q = QueueParams(qnum, delay_s=delay_s, maxlen_packets=maxlen_for_bdp(10e9, delay_s),
                    pktlog_path=str(log))
    rule(p, qnum)
    h = Helper(p.line_ns(), [q], tmp / f"h{qnum}", rt_prio=RT_PRIO, cpu=LINE_CPU,
               spin_dense=LINE_CPU is not None)
    h.start()
    while not h.stats_path.exists():
        if not h.alive():
            raise RuntimeError(h.stderr())
        time.sleep(0.02)
    dropped_before = p.wire_tx_dropped()
    try:
        out = carry(p, mode, delay_s, seconds)
    finally:
        h.stop()
        rule(p, qnum, delete=True)
    after_line = p.wire_tx_dropped() - dropped_before
    st = h.stats().queues[qnum]
    recs = [r for r in read_pktlog(log) if r[2]]
    err = sorted((r[2] - r[1]) / 1e3 for r in recs)  # us
    added = sorted((r[2] - r[0]) / 1e3 - delay_s * 1e6 for r in recs)
    gbit = st.in_bytes * 8 / 1e9
    return {"delay_ms": delay_s * 1e3, "mode": mode, "hold": p.hold,
            "gbps": received_gbps(out),
            "pkts": st.in_packets,
            "mean_pkt_B": st.in_bytes / max(1, st.in_packets),
            "err_p50_us": pct(err, .5), "err_p99_us": pct(err, .99),
            "err_max_us": err[-1] if err else 0,
            "added_minus_cfg_p99_us": pct(added, .99),
            "kdrop": st.kernel_queue_dropped + st.kernel_user_dropped,
            "after_line_drop": after_line,
            "cpu_s": h.stats().cpu_s, "cpu_s_per_gbit": h.stats().cpu_s / gbit if gbit else 0,
            "send": h.stats().verdict_send, "uptime_s": h.stats().uptime_s}


def goodput_case(p: Pair, tmp: Path, seconds: float) -> dict:
    """TCP through HTB 1 Gbit/s on A's egress, 50 ms each way, window ~BDP."""
    sh(p.a, "tc", "qdisc", "add", "dev", p.ia, "root", "handle", "1:", "htb", "default", "1")
    sh(p.a, "tc", "class", "add", "dev", p.ia, "parent", "1:", "classid", "1:1", "htb",
       "rate", "1gbit", "ceil", "1gbit")
    sh(p.a, "tc", "qdisc", "add", "dev", p.ia, "parent", "1:1", "handle", "10:", "bfifo",
       "limit", "12500000")  # a BDP of buffer at the bottleneck
    hs = []
    try:
        for into_b, qn in ((True, 101), (False, 102)):
            rule(p, qn, into_b)
            h = Helper(p.line_ns(into_b), [QueueParams(qn, delay_s=0.050,
                                                       maxlen_packets=maxlen_for_bdp(
                1e9, 0.05, factor=4))], tmp / f"g{qn}-{p.hold}", rt_prio=RT_PRIO)
            h.start()
            hs.append(h)
        time.sleep(0.7)
        # window: autotuning up to tcp_rmem/tcp_wmem max 64 MB (> 2 x BDP of 12.5 MB); iperf3 -w
        # is refused here ("socket buffer size not set correctly": net.core.[rw]mem_max)
        out = iperf(p, ["-O", "3"], seconds)
    finally:
        for h in hs:
            h.stop()
        for into_b, qn in ((True, 101), (False, 102)):
            rule(p, qn, into_b, delete=True, check=False)
        sh(p.a, "tc", "qdisc", "del", "dev", p.ia, "root", check=False)
    end = out.get("end", {})
    bps = end.get("sum_received", {}).get("bits_per_second", 0.0)
    rtx = end.get("sum_sent", {}).get("retransmits")
    st = hs[0].stats()
    return {"gbps": bps / 1e9, "bound_gbps": 1e9 * 1448 / 1514 / 1e9, "retransmits": rtx,
            "cpu_s": st.cpu_s + hs[1].stats().cpu_s,
            "rtt_ms": [s.get("min_rtt", 0) / 1e3 for s in end.get("streams", [{}])
                       for s in [s.get("sender", {})]]}


def ping_min_ms(p: Pair, tmp: Path, qnum: int, delay_s: float = 0.010, count: int = 20
                ) -> float:
    """Plain ping's minimum RTT (the kernel's receive stamp, SO_TIMESTAMP) A -> B with
    ``delay_s`` each way on ``p``'s hold point."""
    hs = []
    try:
        for into_b, qn in ((True, qnum), (False, qnum + 1)):
            rule(p, qn, into_b)
            h = Helper(p.line_ns(into_b), [QueueParams(qn, delay_s=delay_s)],
                       tmp / f"p{qn}-{p.hold}", rt_prio=RT_PRIO, spin_us=50)
            h.start()
            hs.append(h)
        time.sleep(0.5)
        out = sh(p.a, "ping", "-n", "-c", str(count), "-i", "0.05", "-W", "2", B_IP,
                 check=False).stdout
    finally:
        for h in hs:
            h.stop()
        for into_b, qn in ((True, qnum), (False, qnum + 1)):
            rule(p, qn, into_b, delete=True, check=False)
    rtts = [float(x.split("=")[1]) for x in out.split() if x.startswith("time=")]
    return min(rtts) if rtts else float("nan")


def print_ratio(old: dict, new: dict) -> None:
    def r(key: str) -> float:
        return new[key] / old[key] if old[key] else float("nan")
    print(f"{'':>10} wire / receiver: carried {r('gbps'):.2f}, release error p50 "
          f"{r('err_p50_us'):.2f} p99 {r('err_p99_us'):.2f}, helper CPU-s per Gbit "
          f"{r('cpu_s_per_gbit'):.2f}  (load {os.getloadavg()[0]:.1f})", flush=True)


def print_row(r: dict, cpu: str) -> None:
    print(f"{r['delay_ms']:>6.0f} ms {r['mode']:>9} {r['hold']:>8} {cpu:>6}  "
          f"{r['gbps']:6.2f} Gbit/s  "
          f"{r['pkts']:>8} pkts avg {r['mean_pkt_B']:>6.0f} B  release error "
          f"p50 {r['err_p50_us']:7.1f} us p99 {r['err_p99_us']:8.1f} us "
          f"max {r['err_max_us']:8.1f} us  kernel drops {r['kdrop']:>6} "
          f"after the line {r['after_line_drop']:>6}  "
          f"helper CPU {r['cpu_s']:5.2f} s = {r['cpu_s_per_gbit']:.3f} "
          f"CPU-s per Gbit carried", flush=True)
    sd = r["send"]
    if sd is not None and sd.n:
        print(f"{'':>10} verdict sendto: {sd.n} calls, p50 {sd.p50_us:.1f} us "
              f"p99 {sd.p99_us:.1f} us max {sd.max_us:.1f} us, in all "
              f"{sd.n * sd.mean_us / 1e6:.2f} s of {r['uptime_s']:.1f} s "
              f"(the kernel re-injecting the accepted packets)", flush=True)


def _use_helper(binary: Path | None) -> None:
    if binary is not None:
        import testbed.delay.nfqueue.build as build
        build.helper_path = lambda build_if_needed=True: binary.resolve()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--delays-ms", default="1,10,50,200")
    ap.add_argument("--rt-prio", type=int, default=0, help="run the helpers SCHED_FIFO")
    ap.add_argument("--modes", default="udp1g,tcpgso",
                    help="comma-separated: udp1g, tcpgso, udpgso10g (10 Gbit/s of UDP GSO "
                         "sends, 64 KB GSO packets, to a UDP GRO socket: GSO traffic whose ends "
                         "leave the CPU to the line), tcpwire (one TCP flow of wire-sized "
                         "packets: TSO and GSO off on the sender's veth), tcpwire1g (the same "
                         "through HTB 1 Gbit/s)")
    ap.add_argument("--omit-s", type=int, default=1,
                    help="TCP rows: leave the first N seconds (slow start) out of the carried "
                         "rate (iperf3 -O; the release errors count every packet)")
    ap.add_argument("--zerocopy", action="store_true",
                    help="TCP rows: the sender sends with sendfile (iperf3 -Z), so that with a "
                         "dedicated line CPU the one CPU left for both ends copies less")
    ap.add_argument("--skip-goodput", action="store_true")
    ap.add_argument("--baseline", action="store_true",
                    help="first carry each mode once without the line (the machine's ceiling)")
    ap.add_argument("--isolate", action="store_true",
                    help="run each row twice: shared CPUs, then the last usable CPU given to "
                         "the helper alone as a lab's delay_line_cpu does (pinned, spinning "
                         "before every release, the veths' receive processing on the other "
                         "CPUs); prints their ratio")
    ap.add_argument("--helper", type=Path, help="helper binary to use instead of the built one "
                    "(to compare two builds under the same load)")
    ap.add_argument("--holds", default=",".join(HOLDS),
                    help="comma-separated hold points, each row run on each side by side: "
                         "receiver (B's PREROUTING, the old place), wire (a wire namespace "
                         "between A and B, the lab's)")
    a = ap.parse_args()
    _use_helper(a.helper)
    global RT_PRIO, OMIT_S, ZEROCOPY
    RT_PRIO = a.rt_prio
    OMIT_S = a.omit_s
    ZEROCOPY = a.zerocopy
    global LINE_CPU
    holds = a.holds.split(",")
    if not holds or any(h not in HOLDS for h in holds):
        ap.error(f"--holds: each of {', '.join(HOLDS)}")
    pairs = [Pair(h) for h in holds]
    rows = []
    print(f"load average at start {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="dlbench") as td:
        tmp = Path(td)
        try:
            for p in pairs:
                p.up()
            qn = 1
            # --isolate: each row shared, then with the dedicated CPU, and their ratio
            cpus = [None, check_line_cpu(max(os.sched_getaffinity(0)), "--isolate: CPU")] \
                if a.isolate else [None]
            for mode in a.modes.split(",") if a.baseline else ():
                for cpu in cpus:  # with --isolate also on the CPUs a dedicated line leaves
                    LINE_CPU = cpu
                    saved = keep_off(cpu) if cpu is not None else None
                    try:
                        gbps = received_gbps(carry(pairs[0], mode, 0.0, a.seconds))
                    finally:
                        if saved is not None:
                            restore(saved)
                    where = "all CPUs" if cpu is None else f"all CPUs but {cpu}"
                    print(f"  no line {mode:>9}  {gbps:6.2f} Gbit/s (what this machine "
                          f"carries without the line, ends on {where})", flush=True)
                LINE_CPU = None
            for p in pairs:
                rtt = ping_min_ms(p, tmp, 900 + qn)
                qn += 2
                print(f"plain ping through 10 ms each way, hold {p.hold:>8}: minimum RTT "
                      f"{rtt:.3f} ms (20 ms expected)", flush=True)
            row = 0
            for d in (float(x) / 1e3 for x in a.delays_ms.split(",")):
                for mode in a.modes.split(","):
                    by_cpu: dict[object, dict[str, dict]] = {}
                    row += 1  # every other row the other hold first: no order bias
                    for p in pairs if row % 2 else pairs[::-1]:
                        pair = []
                        for cpu in cpus:
                            LINE_CPU = cpu
                            # as a lab does: iperf3 and this process's threads off that CPU
                            saved = keep_off(cpu) if cpu is not None else None
                            try:
                                r = run_case(p, tmp, d, mode, a.seconds, qn)
                            finally:
                                if saved is not None:
                                    restore(saved)
                            qn += 1
                            rows.append(r)
                            pair.append(r)
                            by_cpu.setdefault(cpu, {})[p.hold] = r
                            print_row(r, "shared" if cpu is None else f"CPU {cpu}")
                        if len(pair) == 2:
                            sh_, iso = pair
                            print(f"{'':>10} dedicated / shared: release error p50 "
                                  f"{iso['err_p50_us'] / sh_['err_p50_us']:.2f}, p99 "
                                  f"{iso['err_p99_us'] / sh_['err_p99_us']:.2f}, carried "
                                  f"{iso['gbps'] / sh_['gbps']:.2f}", flush=True)
                    for got in by_cpu.values():
                        if len(got) == 2:
                            print_ratio(got["receiver"], got["wire"])
            if a.skip_goodput:
                return 0
            gs = {}
            for p in pairs:
                g = gs[p.hold] = goodput_case(p, tmp, max(8.0, 2 * a.seconds))
                print(f"TCP through HTB 1 Gbit/s, 50 ms each way (RTT 100 ms), hold {p.hold}, "
                      "window autotuned (max 64 MB > BDP 12.5 MB): "
                      f"{g['gbps']:.3f} Gbit/s vs bound {g['bound_gbps']:.3f} "
                      f"({100 * g['gbps'] / g['bound_gbps']:.1f}%), retransmits "
                      f"{g['retransmits']}, iperf3 min RTT {g['rtt_ms']} ms, helpers CPU "
                      f"{g['cpu_s']:.2f} s", flush=True)
            if len(gs) == 2:
                print(f"{'':>10} wire / receiver: goodput "
                      f"{gs['wire']['gbps'] / gs['receiver']['gbps']:.3f}  "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)
        finally:
            for p in pairs:
                p.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
