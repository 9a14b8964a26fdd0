"""The native delay line (NFQUEUE + compiled helper) on real namespaces.

Two namespaces joined by a veth; the helper runs inside the receiving namespace and delays what
arrives there.  Behaviour is asserted, not tight timing: CI is a loaded 2-core box.
The first tests are pure (argv builders) and need no root.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pyroute2 import IPRoute, NetNS
from pyroute2 import netns as pr_netns

from testbed.delay.nfqueue import Helper, QueueParams, gemodel, read_pktlog
from testbed.delay.nfqueue.rules import helper_argv, maxlen_for_bdp, nfqueue_rule_argv

ADDR_A, ADDR_B = "10.231.0.1", "10.231.0.2"


# ---------------------------------------------------------------- pure (no root)

def test_rule_argv_carries_run_id_and_queue():
    argv = nfqueue_rule_argv("eth1", 7, "ab12cd", netns="ns1")
    assert argv[:4] == ["ip", "netns", "exec", "ns1"]
    assert argv[4:] == ["iptables", "-w", "-t", "mangle", "-A", "PREROUTING", "-i", "eth1",
                        "-m", "comment", "--comment", "aitb:ab12cd",
                        "-j", "NFQUEUE", "--queue-num", "7"]
    assert "--queue-bypass" not in argv  # fail closed: no helper -> drop, never pass undelayed
    rm = nfqueue_rule_argv("eth1", 7, "ab12cd", ipv6=True, delete=True, direction="out")
    assert rm[:7] == ["ip6tables", "-w", "-t", "mangle", "-D", "POSTROUTING", "-o"]


def test_helper_argv_units_and_refusals():
    q = QueueParams(3, delay_s=0.0105, jitter_s=0.001, distribution="normal", loss_pct=1.5,
                    seed=9, maxlen_packets=maxlen_for_bdp(1e9, 0.05), **gemodel(1.0))
    argv = helper_argv("/bin/h", 42, [q], "/tmp/s.json")
    spec = argv[argv.index("--queue") + 1]
    assert "delay_us=10500" in spec and "jitter_us=1000" in spec and "dist=normal" in spec
    assert "ge_p=1" in spec and "ge_r=99" in spec and "ge_1h=100" in spec and "seed=9" in spec
    assert "maxlen=8334" in spec
    with pytest.raises(ValueError, match="duplicate"):
        QueueParams(1, duplicate_pct=1)
    with pytest.raises(ValueError):
        helper_argv("/bin/h", 1, [QueueParams(1), QueueParams(1)], "/tmp/s")
    assert "--cpu" not in argv and "--spin-dense" not in argv  # shared CPUs by default
    pinned = helper_argv("/bin/h", 42, [q], "/tmp/s.json", cpu=1, spin_dense=True)
    assert pinned[pinned.index("--cpu") + 1] == "1" and "--spin-dense" in pinned


# ---------------------------------------------------------------- namespaces

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


class Pair:
    """Namespaces a and b, veth a0 <-> b0, addresses ADDR_A / ADDR_B."""

    def __init__(self, tag: str) -> None:
        self.a, self.b = f"dlt-{tag}-a", f"dlt-{tag}-b"
        self.rid = tag

    def up(self) -> None:
        for ns in (self.a, self.b):
            pr_netns.create(ns)
        with IPRoute() as ipr:
            ipr.link("add", ifname=f"dlt{self.rid}a", kind="veth", peer=f"dlt{self.rid}b")
            ia = ipr.link_lookup(ifname=f"dlt{self.rid}a")[0]
            ib = ipr.link_lookup(ifname=f"dlt{self.rid}b")[0]
            ipr.link("set", index=ia, net_ns_fd=self.a)
            ipr.link("set", index=ib, net_ns_fd=self.b)
        for ns, ifn, addr in ((self.a, f"dlt{self.rid}a", ADDR_A),
                              (self.b, f"dlt{self.rid}b", ADDR_B)):
            with NetNS(ns) as n:
                idx = n.link_lookup(ifname=ifn)[0]
                n.addr("add", index=idx, address=addr, prefixlen=24)
                n.link("set", index=idx, state="up")
                n.link("set", index=n.link_lookup(ifname="lo")[0], state="up")

    def ifname(self, ns: str) -> str:
        return f"dlt{self.rid}{'a' if ns == self.a else 'b'}"

    def down(self) -> None:
        for ns in (self.a, self.b):
            try:
                pr_netns.remove(ns)
            except OSError:
                pass


def sh(ns: str, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                          check=check, timeout=timeout)


@pytest.fixture
def pair():
    p = Pair(secrets.token_hex(2))
    try:
        p.up()
        yield p
    finally:
        p.down()
    assert not os.path.exists(f"/var/run/netns/{p.a}")


@pytest.fixture
def helpers():
    made: list[Helper] = []
    yield made
    for h in made:
        h.stop()


def delay_in(p: Pair, ns: str, q: QueueParams, tmp: Path, helpers: list, **kw) -> Helper:
    """Queue what arrives on ns's veth to queue q.queue_num; start a helper serving it (kw:
    Helper's options)."""
    sh(ns, *nfqueue_rule_argv(p.ifname(ns), q.queue_num, p.rid))
    h = Helper(ns, [q], tmp, **kw)
    h.start()
    helpers.append(h)
    deadline = time.monotonic() + 10  # bound: stats file written once the queue is bound
    while not h.stats_path.exists():
        assert h.alive(), h.stderr()
        assert time.monotonic() < deadline, "helper did not come up"
        time.sleep(0.02)
    return h


def ping(p: Pair, count: int, interval: float = 0.02,
         wait: float = 2.0) -> tuple[set[int], float | None]:
    """Ping b from a: the icmp_seq numbers answered and the min RTT in ms (None: no answer)."""
    # -U: user-to-user time; without it ping takes the kernel receive timestamp of the reply,
    # stamped before PREROUTING, so a delay line in the pinger's own namespace is not seen
    res = sh(p.a, "ping", "-U", "-n", "-c", str(count), "-i", str(interval), "-W", str(wait),
             ADDR_B, check=False)
    seqs = {int(m) for m in re.findall(r"icmp_seq=(\d+)", res.stdout)}
    m = re.search(r"= ([\d.]+)/", res.stdout)
    return seqs, float(m.group(1)) if m else None




@pytest.mark.netns
@needs_root
def test_rtt_through_both_directions_and_counts(pair, helpers, tmp_path):
    delay = 0.010
    hb = delay_in(pair, pair.b, QueueParams(1, delay_s=delay), tmp_path / "b", helpers)
    ha = delay_in(pair, pair.a, QueueParams(2, delay_s=delay), tmp_path / "a", helpers)
    seqs, rtt_min = ping(pair, 20, interval=0.05)
    assert len(seqs) == 20
    # lower bound exact (the helper never releases early); the upper slack of 15 ms covers
    # wake-up and scheduling latency of two helpers and ping on a loaded 2-core CI box
    assert 2 * delay * 1e3 <= rtt_min < 2 * delay * 1e3 + 15
    for h in (hb, ha):
        assert h.stop() == 0
    sb, sa = hb.stats().queues[1], ha.stats().queues[2]
    assert hb.stats().final
    assert sb.in_packets == sb.out_packets == 20  # echo requests
    assert sa.in_packets == sa.out_packets == 20  # echo replies
    assert sb.added_delay.min_us >= delay * 1e6
    assert sb.added_delay.p50_us < delay * 1e6 + 10_000


@pytest.mark.netns
@needs_root
def test_every_arrival_timed_once_and_verdicts_batched_per_call(pair, helpers, tmp_path):
    """The loop's counts: each packet is timed once (pings carry the kernel's receive stamp),
    read once, and released by at most one verdict message; sendto calls carry >= 1 each."""
    h = delay_in(pair, pair.b, QueueParams(1, delay_s=0.005), tmp_path, helpers)
    seqs, _ = ping(pair, 30, interval=0.01)
    assert len(seqs) == 30
    assert h.stop() == 0
    st = h.stats()
    q, loop = st.queues[1], st.loop
    assert q.in_packets == q.out_packets == 30
    assert loop["arrivals_stamped"] + loop["arrivals_read"] == q.in_packets
    assert loop["arrivals_stamped"] == 30  # ICMP over a veth: stamped at netif_rx
    assert loop["recv_msgs"] >= q.in_packets  # + the config acks
    assert 1 <= loop["verdict_msgs"] <= q.in_packets
    assert 1 <= loop["send_calls"] <= loop["verdict_msgs"]
    assert st.verdict_send.n == loop["send_calls"]  # every verdict sendto timed
    assert loop["recv_calls"] >= 1 and loop["epoll_wakeups"] + loop["timer_wakeups"] >= 1


@pytest.mark.netns
@needs_root
def test_a_dedicated_cpu_helper_writes_stats_and_pktlog_from_a_thread_off_that_cpu(
        pair, helpers, tmp_path):
    """--cpu N --spin-dense: the loop stays on N at SCHED_FIFO, stats files and the pktlog are
    written by a second thread, SCHED_OTHER on the other CPUs; every packet reaches the pktlog
    in release order, none waited for room in the ring."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        pytest.skip("needs two CPUs")
    cpu = usable[-1]
    q = QueueParams(1, delay_s=0.002, pktlog_path=str(tmp_path / "log"))
    h = delay_in(pair, pair.b, q, tmp_path, helpers, rt_prio=10, cpu=cpu, spin_dense=True)
    tids = {int(t) for t in os.listdir(f"/proc/{h.pid}/task")}
    assert len(tids) == 2 and h.pid in tids
    loop_tid, (writer_tid,) = h.pid, tids - {h.pid}
    assert os.sched_getaffinity(loop_tid) == {cpu}
    assert os.sched_getscheduler(loop_tid) == os.SCHED_FIFO
    assert cpu not in os.sched_getaffinity(writer_tid)
    assert os.sched_getscheduler(writer_tid) == os.SCHED_OTHER
    seqs, _ = ping(pair, 40, interval=0.01)
    assert len(seqs) == 40
    h.snapshot()  # SIGUSR1: the writer thread writes a stats file while the helper runs
    deadline = time.monotonic() + 5
    while h.stats().queues[1].out_packets < 40:
        assert time.monotonic() < deadline, "no stats file with the released packets"
        time.sleep(0.02)
    assert h.stop() == 0
    st = h.stats()
    assert st.final and st.loop["pktlog_waits"] == 0
    log = read_pktlog(tmp_path / "log")
    assert len(log) == st.queues[1].out_packets == 40
    releases = [r[2] for r in log]
    assert releases == sorted(releases) and all(r[2] >= r[1] for r in log)


@pytest.mark.netns
@needs_root
def test_loss_100_drops_everything(pair, helpers, tmp_path):
    h = delay_in(pair, pair.b, QueueParams(1, delay_s=0.001, loss_pct=100), tmp_path, helpers)
    seqs, _ = ping(pair, 10, wait=1)
    assert seqs == set()
    h.stop()
    s = h.stats().queues[1]
    assert s.in_packets == s.dropped_loss == 10 and s.out_packets == 0


@pytest.mark.netns
@needs_root
def test_seeded_loss_pattern_repeats(pair, helpers, tmp_path):
    def run(seed: int, k: int) -> tuple[set[int], int]:
        q = QueueParams(1, loss_pct=30, seed=seed, pktlog_path=str(tmp_path / f"log{k}"))
        h = delay_in(pair, pair.b, q, tmp_path / str(k), helpers)
        seqs, _ = ping(pair, 60, interval=0.01, wait=1)
        h.stop()
        sh(pair.b, *nfqueue_rule_argv(pair.ifname(pair.b), 1, pair.rid, delete=True))
        assert h.stats().queues[1].in_packets == 60
        return seqs, h.stats().queues[1].dropped_loss

    first, d1 = run(42, 1)
    second, d2 = run(42, 2)
    other, _ = run(43, 3)
    assert first == second and d1 == d2 == 60 - len(first)
    assert 5 <= d1 <= 35  # 30% of 60, loose
    assert other != first  # another seed, another pattern
    log = read_pktlog(tmp_path / "log1")
    assert sum(1 for r in log if r[2] == 0) == d1


@pytest.mark.netns
@needs_root
def test_helper_dies_with_its_parent(pair, tmp_path):
    sh(pair.b, *nfqueue_rule_argv(pair.ifname(pair.b), 1, pair.rid))
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from testbed.delay.nfqueue import Helper, QueueParams
        h = Helper({pair.b!r}, [QueueParams(1, delay_s=0.001)], Path({str(tmp_path)!r}))
        print(h.start(), flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    try:
        helper_pid = int(parent.stdout.readline())
        assert _alive(helper_pid)
    finally:
        parent.kill()  # the pid we started
        parent.wait()
    deadline = time.monotonic() + 5
    while _alive(helper_pid):
        assert time.monotonic() < deadline, "helper outlived its parent"
        time.sleep(0.02)


@pytest.mark.netns
@needs_root
def test_wrong_parent_pid_refused(tmp_path):
    h = Helper(None, [QueueParams(1)], tmp_path)
    argv = h.argv()
    argv[argv.index("--parent-pid") + 1] = "1"
    res = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert res.returncode == 3 and "parent" in res.stderr


@pytest.mark.netns
@needs_root
def test_dead_helper_drops_not_passes(pair, helpers, tmp_path):
    h = delay_in(pair, pair.b, QueueParams(1, delay_s=0.002), tmp_path, helpers)
    seqs, rtt = ping(pair, 3)
    assert len(seqs) == 3 and rtt >= 2.0
    os.kill(h.pid, signal.SIGKILL)  # our child
    h.proc.wait()
    seqs, _ = ping(pair, 5, wait=1)
    assert seqs == set()  # fail closed: no FAIL_OPEN, no --queue-bypass


@pytest.mark.netns
@needs_root
def test_live_change_by_sighup(pair, helpers, tmp_path):
    h = delay_in(pair, pair.b, QueueParams(1, delay_s=0.002), tmp_path, helpers)
    _, rtt1 = ping(pair, 5)
    h.update([QueueParams(1, delay_s=0.030)])
    time.sleep(0.2)
    _, rtt2 = ping(pair, 5)
    assert 2 <= rtt1 < 30 and rtt2 >= 30
    h.stop()
    assert h.stats().queues[1].delay_us == 30000


@pytest.mark.netns
@needs_root
def test_a_bad_params_file_on_sighup_keeps_the_old_parameters(pair, helpers, tmp_path):
    h = delay_in(pair, pair.b, QueueParams(1, delay_s=0.020), tmp_path, helpers)
    h.params_path.write_text("num=1,delay_us=-5\n")  # out of range: refused, not fatal
    h.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10  # bound only: the refusal line comes within ms
    while "params: refused" not in h.stderr():
        assert h.alive(), h.stderr()
        assert time.monotonic() < deadline, h.stderr()
        time.sleep(0.01)
    seqs, rtt = ping(pair, 5)
    assert h.alive() and len(seqs) == 5 and rtt >= 20  # still running, still 20 ms
    h.stop()
    assert h.stats().queues[1].delay_us == 20000


@pytest.mark.netns
@needs_root
def test_delay_counts_from_the_kernels_arrival_not_from_the_helpers_wake_up(pair, helpers,
                                                                            tmp_path):
    h = delay_in(pair, pair.b, QueueParams(1, delay_s=0.300), tmp_path, helpers)
    ping(pair, 1, wait=2)  # ARP and a first echo
    os.kill(h.pid, signal.SIGSTOP)  # the helper sleeps while the request arrives...
    proc = subprocess.Popen(["ip", "netns", "exec", pair.a, "ping", "-U", "-n", "-c", "1",
                             "-W", "3", ADDR_B], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 5  # bound only
    while "1" not in _queued(pair.b):  # ...and waits in the kernel's queue
        assert time.monotonic() < deadline
        time.sleep(0.005)
    time.sleep(0.200)
    os.kill(h.pid, signal.SIGCONT)
    out, _ = proc.communicate(timeout=10)
    rtt = float(re.search(r"time=([\d.]+) ms", out).group(1))
    # released at kernel arrival + 300 ms, not at the helper's late read + 300 ms (>= 500 ms);
    # the 150 ms between covers scheduling on a loaded box without blurring the two
    assert 300 <= rtt < 450


def _queued(ns: str) -> str:
    """Packets waiting in the kernel's NFQUEUE queues of ``ns`` (field 3 of
    /proc/net/netfilter/nfnetlink_queue, per queue), as text."""
    text = sh(ns, "cat", "/proc/net/netfilter/nfnetlink_queue").stdout
    return " ".join(line.split()[2] for line in text.splitlines() if line.split())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.netns
@needs_root
@pytest.mark.parametrize("params,check", [
    # corrupted echo requests fail their checksum at b: some, not all, are lost
    (dict(corrupt_pct=50, seed=5), lambda s, n: 0 < s.corrupted < 40 and n < 40),
    # netem's reorder 50% gap 1: about half skip the 20 ms delay
    (dict(delay_s=0.020, reorder_pct=50, reorder_gap=1, seed=5),
     lambda s, n: 0 < s.reordered < 40 and s.added_delay.min_us < 20_000),
    # Gilbert-Elliott, lossy bad state: some drops, all counted as GE
    (dict(seed=5, **gemodel(20.0, 30.0)), lambda s, n: s.dropped_ge > 0 and n == 40 - s.dropped_ge),
    # jitter: delays spread around 10 ms, never below 0
    (dict(delay_s=0.010, jitter_s=0.003, distribution="paretonormal", reorder_allowed=True,
          seed=5), lambda s, n: n == 40 and s.added_delay.max_us - s.added_delay.min_us > 1000),
], ids=["corrupt", "reorder", "gemodel", "jitter"])
def test_impairments_do_something(pair, helpers, tmp_path, params, check):
    h = delay_in(pair, pair.b, QueueParams(1, **params), tmp_path, helpers)
    seqs, _ = ping(pair, 40, interval=0.01, wait=1)
    h.stop()
    s = h.stats().queues[1]
    assert s.in_packets == 40
    assert check(s, len(seqs)), (s, len(seqs))


@pytest.mark.netns
@needs_root
def test_trace_steps_apply_at_their_time(pair, helpers, tmp_path):
    from testbed.delay.nfqueue.rules import trace_file_text
    trace = tmp_path / "trace"
    trace.write_text(trace_file_text([(0.0, 0.002, 0.0), (1.0, 0.040, 0.0)]))
    start = time.time_ns() + 300_000_000
    q = QueueParams(1, trace_path=str(trace), trace_start_realtime_ns=start)
    delay_in(pair, pair.b, q, tmp_path, helpers)
    time.sleep(max(0.0, (start - time.time_ns()) / 1e9) + 0.1)
    _, early = ping(pair, 3, interval=0.05)
    time.sleep(max(0.0, (start + 1_100_000_000 - time.time_ns()) / 1e9))
    _, late = ping(pair, 3, interval=0.05)
    assert 2 <= early < 40 <= late
