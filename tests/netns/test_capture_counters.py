"""Capture and counter sampling inside `aitb run`, on the host kernel:
the pcaps open in our reader and in tshark and hold what tcpdump says it captured; counters
have the contract's columns and time base; an incast's queue drops agree with the kernel's
final counter and with the retransmissions seen in the pcaps; nothing keeps running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_namespaces

from analysis.pcap import open_capture
from analysis.tcpflows import analyse_capture

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]
QDISC_COLUMNS = ["t_s", "t_err_s", "node", "ifname", "kind", "handle", "parent", "bytes",
                 "packets", "drops", "overlimits", "requeues", "backlog_bytes", "backlog_packets"]
LINK_COLUMNS = ["t_s", "t_err_s", "node", "ifname", "rx_bytes", "tx_bytes", "rx_packets",
                "tx_packets", "rx_dropped", "tx_dropped"]
TCP_COLUMNS = ["t_s", "node", "src", "sport", "dst", "dport", "state", "rtt_s", "rttvar_s",
               "snd_cwnd", "total_retrans", "lost", "bytes_acked", "bytes_sent",
               "delivery_rate_bps"]


def run(exp: Path, results: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(exp), "--results",
                           str(results)], capture_output=True, text=True, timeout=300, env=env,
                          cwd=ROOT)


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (this test's own unique results path)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmd and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def pcap_frames(path: Path) -> int:
    cap = open_capture(path)
    n = sum(1 for _ in cap.frames())
    assert cap.warnings == [], f"{path}: {cap.warnings}"
    return n


def tshark_frames(path: Path) -> int:
    out = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "cut short" not in out.stderr and "appears to be damaged" not in out.stderr
    return len(out.stdout.split())


@pytest.mark.parametrize("engine", ["tcpdump", "shared"])
def test_run_captures_and_samples_on_one_clock(tmp_path, state_env, engine):
    exp = tmp_path / "small.yaml"
    exp.write_text(
        "name: capsmall\n"
        "topology:\n  inline:\n    name: capsmall\n"
        "    generator: {name: single_switch, params: {hosts: 3, link: lan}}\n"
        "    profiles: {lan: {rate: 200Mbit, buffer: 200p}}\n"
        "workloads:\n  - kind: collective\n    op: all_reduce\n    size: 8MiB\n"
        "    iterations: 2\n"
        # 900 KiB rounds up to tcpdump's 10^6-byte unit: about 3 MB per port make 3-4 files,
        # fewer than the ring's 5, so no file is overwritten and all packets are on disk
        "capture: {interfaces: bottleneck, snaplen: 96, rotate_size: 900KiB, files: 5, "
        f"engine: {engine}}}\n"
        "counters: {interval: 10ms}\n")
    out = run(exp, tmp_path / "results", state_env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    assert processes_mentioning(str(tmp_path / "results")) == []  # no tcpdump, no sampler
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert run_namespaces(manifest["lab_run_id"]) == []

    index = json.loads((run_dir / "captures" / "index.json").read_text())
    assert index["snaplen"] == 96 and index["engine"] == engine
    assert manifest["capture"]["engine"] == engine
    # bottleneck of a single shaped switch: its three ports toward the hosts
    assert sorted((i["node"], i["ifname"]) for i in index["interfaces"]) == [
        ("s1", "eth0"), ("s1", "eth1"), ("s1", "eth2")]
    first_ns = []
    for entry in index["interfaces"]:
        files = [run_dir / f for f in entry["files"]]
        assert len(files) >= 2 and all(f.exists() for f in files)  # rotated
        assert all(f.stat().st_size <= 10**6 + 2000 for f in files[:-1])  # -C 1, + a frame
        ours = sum(pcap_frames(f) for f in files)
        assert ours == entry["packets_captured"] > 100
        assert sum(tshark_frames(f) for f in files) == ours
        # 32 MiB rings (3 interfaces share the budget) hold the whole run's headers
        assert entry["kernel_buffer_kib"] == 32768
        assert entry["packets_dropped_by_kernel"] == 0
        cap = open_capture(files[0])
        next(iter(cap.frames()))
        first_ns.append(cap.start_ns)  # absolute time of the file's first packet

    for name, cols in (("qdisc", QDISC_COLUMNS), ("links", LINK_COLUMNS),
                       ("tcp", TCP_COLUMNS)):
        frame = pd.read_parquet(run_dir / "counters" / f"{name}.parquet")
        assert list(frame.columns) == cols and len(frame) > 0, name
    sampler = json.loads((run_dir / "counters" / "sampler.json").read_text())
    assert sampler["interval_s"] == 0.01 and sampler["samples"] >= 10
    assert sampler["cpu_s"] > 0 and sampler["interval_p50_s"] > 0
    # one clock: the records, the packets and the samples share time.time()'s base. The
    # sampler starts before the capture and stops after it; the flows lie inside both.
    flows = [json.loads(x) for x in (run_dir / "flows.jsonl").read_text().splitlines()]
    first_pkt = min(first_ns) / 1e9
    assert sampler["t_first_s"] <= first_pkt <= min(f["t_start"] for f in flows)
    assert max(f["t_end"] for f in flows) <= sampler["t_last_s"]
    tcp = pd.read_parquet(run_dir / "counters" / "tcp.parquet")
    assert set(tcp["node"]) == {"h1", "h2", "h3"} and (tcp["bytes_acked"] > 0).any()


INCAST = """\
name: capincast
seed: 1
topology:
  inline:
    name: capincast
    profiles: {port: {rate: 1Gbit, buffer: 1000p}}
    defaults: {link: {profile: port}}
    nodes: {s1: {kind: switch}, rx: {kind: host}, tx1: {kind: host}, tx2: {kind: host},
            tx3: {kind: host}, tx4: {kind: host}}
    links:
      - endpoints: ["rx:eth0", "s1:rx"]
        # s1 -> rx: a bfifo of about 22 full frames drained at a fifth of the senders' line
        # rate, so four synchronized initial windows (58 KB) overflow it even when the host's
        # CPU, not the 1 Gbit/s shapers, paces the senders (a loaded CI machine)
        b_to_a: {rate: 200Mbit, buffer: 32KiB}
      - endpoints: [tx1, s1]
      - endpoints: [tx2, s1]
      - endpoints: [tx3, s1]
      - endpoints: [tx4, s1]
transport: {tcp_congestion_control: cubic}
workloads:
  - kind: incast
    receiver: rx
    size: 512KiB
    repeats: 3
    gap: 20ms
capture:
  interfaces: [tx1:eth0, tx2:eth0, tx3:eth0, tx4:eth0, s1:rx]
"""


def final_kernel_drops(run_dir: Path) -> dict[str, int]:
    """Drops of s1:rx's qdiscs read by `describe` after the last workload (an independent
    netlink read, not the sampler's)."""
    end = json.loads(sorted(run_dir.glob("workloads/*/counters_end.json"))[-1].read_text())
    rx = next(i for i in end["nodes"]["s1"]["interfaces"] if i["ifname"] == "rx")
    return {q["kind"]: q["drops"] for q in rx["qdiscs"]}


def test_incast_queue_drops_agree_with_retransmissions(tmp_path, state_env):
    exp = tmp_path / "incast.yaml"
    exp.write_text(INCAST)
    out = run(exp, tmp_path / "results", state_env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    assert processes_mentioning(str(tmp_path / "results")) == []

    q = pd.read_parquet(run_dir / "counters" / "qdisc.parquet")
    leaf = q[(q.node == "s1") & (q.ifname == "rx") & (q.kind == "bfifo")].sort_values("t_s")
    sampled = int(leaf["drops"].iloc[-1])
    # cumulative counters: the last sample (taken after the traffic) is the kernel's final
    # count, exactly, and never decreases along the way
    assert sampled == final_kernel_drops(run_dir)["bfifo"]
    assert leaf["drops"].is_monotonic_increasing
    assert sampled > 0, "the incast did not overflow the 32 KiB buffer"

    # the senders' captures lie before the only queue that drops (s1 -> rx; every other
    # queue holds 1000 packets and counts no drop), so every segment below the highest
    # sequence already sent is a retransmission; tshark's heuristics (mirrored by our
    # analysis) call some of them out-of-order, so both classes count
    index = json.loads((run_dir / "captures" / "index.json").read_text())
    resent = 0
    for entry in index["interfaces"]:
        # 32 MiB rings (3 interfaces share the budget) hold the whole run's headers
        assert entry["kernel_buffer_kib"] == 32768
        assert entry["packets_dropped_by_kernel"] == 0
        if entry["node"] == "s1":
            continue
        for f in entry["files"]:
            for flow in analyse_capture(run_dir / f).flows:
                resent += flow["retransmissions"] + flow["out_of_order"]
    flows = [json.loads(x) for x in (run_dir / "flows.jsonl").read_text().splitlines()]
    kernel_retrans = sum(f["tcp"]["total_retrans"] for f in flows)
    # the senders' kernels count the very segments their captures hold: equal
    assert resent == kernel_retrans
    # each dropped segment is sent again at least once (all transfers completed), though one
    # retransmission may carry two small dropped segments (tcp_retrans_try_collapse: 2 of
    # slack, as in test_analysis_runs); on top, at most one spurious resend per connection
    # and burst (a tail-loss probe or an RTO resend of a segment only queued): 4 x 3 bursts
    assert sampled - 2 <= resent <= sampled + 4 * 3
    # TCP_INFO sampled through sock_diag counts the same retransmissions, up to its last
    # sample before each socket closed (so at most the agents' final reading)
    tcp = pd.read_parquet(run_dir / "counters" / "tcp.parquet")
    senders = tcp[tcp["node"].str.startswith("tx")]
    per_socket = senders.groupby(["node", "sport", "dport"])["total_retrans"].max()
    assert 0 < per_socket.sum() <= kernel_retrans


def test_failed_run_stops_capture_and_sampler_and_keeps_their_files(tmp_path, state_env):
    exp = tmp_path / "slow.yaml"
    exp.write_text(
        "name: capslow\n"
        "topology:\n  inline:\n    name: capslow\n"
        "    generator: {name: single_switch, params: {hosts: 2, link: slow}}\n"
        # cannot finish in 1 s at a 1 s RTT (slow start), though the rate would allow it
        "    profiles: {slow: {rate: 1Gbit, delay: 250ms}}\n"
        "timeouts: {transfer: 1s}\n"
        "workloads:\n  - kind: collective\n    op: all_reduce\n    size: 64MiB\n")
    out = run(exp, tmp_path / "results", state_env)
    assert out.returncode == 1
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    assert processes_mentioning(str(tmp_path / "results")) == []
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and run_namespaces(manifest["lab_run_id"]) == []
    index = json.loads((run_dir / "captures" / "index.json").read_text())
    for entry in index["interfaces"]:
        ours = sum(pcap_frames(run_dir / f) for f in entry["files"])
        assert ours == entry["packets_captured"] > 0
    sampler = json.loads((run_dir / "counters" / "sampler.json").read_text())
    assert sampler["error"] is None and sampler["samples"] > 1
    assert len(pd.read_parquet(run_dir / "counters" / "qdisc.parquet")) > 0
    assert manifest["capture"]["packets_captured"] == sum(
        e["packets_captured"] for e in index["interfaces"])
