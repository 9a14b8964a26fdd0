"""``aitb run`` of an experiment with a ``cluster:`` section over two sshd "machines"
(tests/netns/sshd_machines.py), the driver in a third namespace that reaches them only over
SSH: a 2-DC lab split by DC, a ring all-reduce across the DCI (a VXLAN tunnel between the
machines), its agents started on their machines; the records of both machines in the one run
directory, their times corrected by the measured offsets (recorded with their uncertainty),
nothing left on either machine. Also: the clock correction of the agents' control channel
over real SSH with a forced offset, an unreachable machine refused before anything exists,
and a machine lost mid-run failing the run by name with the other machine torn down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sshd_machines import CAPTURED, Machines, sshd_machines, two_dc_experiment

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    """The two sshd machines, shared by this module's tests (each test's runs end by
    themselves; the lost-machine test restores m2's underlay)."""
    with sshd_machines(tmp_path_factory.mktemp("machines")) as m:
        yield m

def aitb_run(m: Machines, exp: Path, results: Path, timeout_s: float = 600,
             home: Path | None = None):
    out = m.in_under([sys.executable, "-m", "orchestration.cli", "run", str(exp), "--results",
                      str(results), "--json", "--no-analysis", "--run-id", f"t-{m.rid}"],
                     timeout_s=timeout_s, AITB_STATE_DIR=str(m.tmp / "driver-state"),
                     HOME=str(home or m.home))
    return out, json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}


def leftovers(m: Machines) -> dict:
    """What of the run remains: registries in the machines' state dir, mounted namespaces of
    the parts, processes of the parts (``aitb exec <part>``, ``aitb topo observe <part>`` and
    stdio agents)."""
    state = m.tmp / "state"
    regs = sorted(p.name for p in state.iterdir() if p.is_dir()) if state.exists() else []
    ns = [n for n in os.listdir("/run/netns") if n.startswith((f"aitb-{m.rid}0-",
                                                               f"aitb-{m.rid}1-"))]
    procs = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ((b"exec" in argv or b"observe" in argv)
                and any(a in argv for a in (f"{m.rid}0".encode(), f"{m.rid}1".encode()))) or \
                (b"traffic_gen.agent" in argv and b"-" in argv):
            procs.append(pid)
    return {"registries": regs, "namespaces": ns, "processes": procs}


def _pcap_frames(path: Path) -> list[tuple[float, str | None, str | None, int]]:
    """(absolute time s, source, destination, TCP/UDP payload bytes) of every frame of a
    pcap, read by analysis' own reader (addresses None: not IPv4 TCP/UDP, e.g. ARP)."""
    import ipaddress

    from analysis.pcap.decode import DecodeStats, decode_frame
    from analysis.pcap.detect import open_capture

    cap, stats, out = open_capture(path), DecodeStats(), []
    for t, link, buf, off, caplen, wirelen in cap.frames():
        got = decode_frame(link, buf, off, caplen, wirelen, stats)
        t_s = cap.start_ns / 1e9 + t
        if got is not None and len(got[1]) == 4:
            out.append((t_s, str(ipaddress.IPv4Address(got[1])),
                        str(ipaddress.IPv4Address(got[2])), got[5]))
        else:
            out.append((t_s, None, None, 0))
    assert not cap.warnings, cap.warnings
    return out


def test_a_two_dc_experiment_split_by_dc_over_two_machines(machines, tmp_path):
    """Records, captures and counter samples of both machines in the one run directory on
    the driver's clock; fidelity.json with the cluster checks; the underlay's RTT measured
    and taken out of the DCI's delay; nothing left on either machine."""
    import pandas as pd
    from sshd_machines import TOPO

    import topologies

    m = machines
    results = tmp_path / "results"
    out, got = aitb_run(m, two_dc_experiment(m, tmp_path / "exp.yaml", observe=True), results)
    assert out.returncode == 0 and got.get("ok"), out.stderr[-3000:]
    run_dir = Path(got["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    for name in ("m1", "m2"):  # the host keys used: the cluster's known_hosts file's
        host_key = manifest["cluster"]["machines"][name]["host_key"]
        assert host_key["trusted_by"] == "known_hosts" and host_key["type"] == "ssh-ed25519"
        assert host_key["file"] == str(m.known_hosts) and host_key["fingerprint"] in [
            subprocess.run(["ssh-keygen", "-lf", str(m.tmp / f"host_{name}.pub")],
                           capture_output=True, text=True).stdout.split()[1]]
    colls = [json.loads(x) for x in (run_dir / "collectives.jsonl").read_text().splitlines()]
    assert len(colls) == 1 and len(colls[0]["ranks"]) == 4 and colls[0]["cct_s"] > 0
    flows = [json.loads(x) for x in (run_dir / "flows.jsonl").read_text().splitlines()]
    senders = {f["src_node"] for f in flows}
    assert {"dc1-l1-h1", "dc2-l1-h1"} <= senders  # records of agents on both machines
    assert all(f["t_end"] is not None and f["t_end"] >= f["t_start"] for f in flows)
    cluster = manifest["cluster"]
    assert cluster["lost"] == {} and cluster["teardown_errors"] == {}
    assert cluster["machines"]["m2"]["nodes"] == [
        "dc2-b1", "dc2-l1", "dc2-l1-h1", "dc2-l1-h2", "dc2-s1"]
    for name in ("m1", "m2"):
        clock = cluster["machines"][name]["clock"]
        for when in ("before", "after"):
            sample = clock[when]
            # one clock here: the estimate lies within its NTP error bound of 0
            assert abs(sample["offset_s"]) <= sample["delay_s"] / 2
        assert clock["uncertainty_s"] >= clock["before"]["delay_s"] / 2 > 0
        # the drift between the two measurements, taken after the traffic
        before, after = clock["before"], clock["after"]
        assert after["t_s"] > before["t_s"] >= pd.Timestamp(manifest["started_at"]).timestamp()
        assert clock["drift_ppm"] == pytest.approx(
            (after["offset_s"] - before["offset_s"]) / (after["t_s"] - before["t_s"]) * 1e6)
        assert cluster["machines"][name]["deploy_s"] > 0
    assert cluster["deploy"] == "parallel" and cluster["timings_s"]["parts_s"] > 0
    # corrected times lie on the driver's time base: within the run's phases
    phases = json.loads((run_dir / "workloads" / "0-ring" / "phases.json").read_text())
    t0 = phases["phases"][0]["t0"]
    unc = max(cluster["machines"][k]["clock"]["uncertainty_s"] for k in ("m1", "m2"))
    assert all(f["t_start"] >= t0 - unc for f in flows)
    ends = json.loads((run_dir / "workloads" / "0-ring" / "counters_end.json")
                      .read_text())["nodes"]
    assert ends["dc1-b1"]["machine"] == "m1" and ends["dc2-b1"]["machine"] == "m2"
    assert (run_dir / "workloads" / "0-ring" / "agents" / "dc2-l1-h1.log").exists()
    # agents on their stdio (both machines' stdio agents) end cleanly: no abort at exit
    for log in (run_dir / "workloads" / "0-ring" / "agents").glob("*.log"):
        assert "Fatal Python error" not in log.read_text(), log

    # the underlay: measured between the machines, taken out of the DCI's delay
    under = cluster["underlay"]["m1~m2"]
    assert under["answered"] > 0 and under["min_rtt_s"] > 0
    (dci,) = cluster["cut_links"]
    assert dci["link"] == "dc1-b1-dc2-b1" and dci["underlay_rtt_s"] == under["min_rtt_s"]
    for d in ("a_to_b", "b_to_a"):
        assert dci[d]["configured_delay_s"] == 0.002
        assert dci[d]["emulated_delay_s"] == pytest.approx(0.002 - under["min_rtt_s"] / 2)

    # captures: taken on both machines, parseable, with the packets of remote hosts
    index = json.loads((run_dir / "captures" / "index.json").read_text())
    by_iface = {f"{i['node']}:{i['ifname']}": i for i in index["interfaces"]}
    assert sorted(by_iface) == sorted(CAPTURED)
    assert by_iface["dc2-b1:dci-dc1-1"]["machine"] == "m2"
    assert by_iface["dc1-b1:dci-dc2-1"]["machine"] == "m1"
    # captures corrected with the drift measured after the traffic (before they were merged)
    assert all(i["clock_drift_ppm"] == cluster["machines"][i["machine"]]["clock"]["drift_ppm"]
               for i in index["interfaces"])
    assert manifest["capture"]["packets_captured"] == sum(
        i["packets_captured"] for i in index["interfaces"])
    plan = topologies.resolve(topologies.parse_topology(TOPO, "t"), "t", None)
    h1 = str(plan.address_of("dc2-l1-h1"))
    for name, entry in by_iface.items():
        packets = [p for rel in entry["files"] for p in _pcap_frames(run_dir / rel)]
        assert len(packets) == entry["packets_captured"] > 0, name
        # on the driver's clock: nothing before the run began, nothing after it ended
        started = pd.Timestamp(manifest["started_at"]).timestamp()
        assert all(started - unc <= p[0] for p in packets), name
        assert max(p[0] for p in packets) <= pd.Timestamp(manifest["ended_at"]).timestamp()
    # dc2-l1-h1 (on m2) sends its ring chunks: they appear at m2's leaf port
    leaf = [p for rel in by_iface["dc2-l1:eth0"]["files"] for p in _pcap_frames(run_dir / rel)]
    sent = sum(p[3] for p in leaf if p[1] == h1)
    assert sent >= sum(f["size_bytes"] for f in flows if f["src_node"] == "dc2-l1-h1")
    # the DCI carries bytes both ways, seen on both machines' ends of the tunnel
    for name in ("dc1-b1:dci-dc2-1", "dc2-b1:dci-dc1-1"):
        dci_packets = [p for rel in by_iface[name]["files"]
                       for p in _pcap_frames(run_dir / rel)]
        cross = sum(f["size_bytes"] for f in flows
                    if f["src_node"][:3] != f["dst_node"][:3])
        assert sum(p[3] for p in dci_packets) >= cross > 0, name

    # counter samples from both machines' parts, one table, no proxy switch rows
    links = pd.read_parquet(run_dir / "counters" / "links.parquet")
    assert set(links["node"]) == {n.name for n in plan.nodes}
    assert links["t_s"].is_monotonic_increasing
    h1_tx = links[(links["node"] == "dc2-l1-h1") & (links["ifname"] == "eth0")]["tx_bytes"]
    assert len(h1_tx) >= 2 and h1_tx.max() - h1_tx.min() >= sum(
        f["size_bytes"] for f in flows if f["src_node"] == "dc2-l1-h1")
    qdisc = pd.read_parquet(run_dir / "counters" / "qdisc.parquet")
    assert {"dc1-b1", "dc2-b1"} <= set(qdisc["node"])
    sampler = json.loads((run_dir / "counters" / "sampler.json").read_text())
    assert sorted(sampler["machines"]) == ["m1", "m2"] and sampler["samples"] >= 2

    # fidelity.json: every machine's shaped directions and the cluster's checks
    fid = json.loads((run_dir / "fidelity.json").read_text())
    assert {e["machine"] for e in fid["links"]} == {"m1", "m2"}
    dirs = {(e["link"], e["direction"]) for e in fid["links"]}
    assert ("dc1-b1-dc2-b1", "a->b") in dirs and ("dc1-b1-dc2-b1", "b->a") in dirs
    clock = fid["cluster"]["clock"]
    assert clock["max_uncertainty_s"] == unc
    assert clock["smallest_duration_s"] == min(
        [f["fct_s"] for f in flows if f["fct_s"]] + [c["cct_s"] for c in colls])
    assert clock["check"] == ("ok" if 2 * unc <= 0.1 * clock["smallest_duration_s"]
                              else "off")
    assert (clock["check"] == "off") == any("clock offset" in r for r in fid["reasons"])
    assert [e["check"] for e in fid["cluster"]["cut_links"]] == ["ok", "ok"]
    # the DCI probed from end to end across the tunnel: echoes answered, the round trip at
    # least the emulated delays plus the underlay's (2 x 2 ms configured, underlay included)
    e2e = fid["cluster"]["end_to_end"]["dc1-b1-dc2-b1"]
    assert e2e["from_node"] == "dc1-b1" and e2e["answered"] > 0
    assert e2e["rtt_s"] >= dci["a_to_b"]["emulated_delay_s"] + dci["b_to_a"][
        "emulated_delay_s"] + under["min_rtt_s"] * 0.5
    assert e2e["expected_rtt_s"] >= 0.004 and e2e["check"] in ("ok", "off")
    assert (e2e["check"] == "off") == any("end-to-end RTT" in r for r in fid["reasons"])
    assert all(e["end_to_end"] == e2e for e in fid["links"] if e["link"] == "dc1-b1-dc2-b1")
    assert manifest["fidelity"]["trustworthy"] == fid["trustworthy"]
    assert leftovers(m) == {"registries": [], "namespaces": [], "processes": []}
    assert not list(Path("/tmp").glob(f"aitb-observe-{m.rid}*"))
    assert not list(Path("/tmp").glob(f"aitb-part-{m.rid}*"))  # each machine's part plan
    assert not (m.tmp / "driver-state").exists() or not any(
        p.is_dir() for p in (m.tmp / "driver-state").iterdir())


CLOCK = r"""
import json, socket, sys, threading
from orchestration.cluster.control import Control, HostTrust
from orchestration.cluster.lab import RemoteAgent
from orchestration.cluster.spec import parse_cluster
key, rid, tmp, python = sys.argv[1:5]
m = parse_cluster({"machines": [{"name": "m2", "ssh": "10.77.0.2", "key": key}]}, "t").machines[0]
# the machine's side: log what it got, answer with a record stamped at the start it was
# told, and end (as an agent does after its last phase, while the controller's socket is open)
echo = ("import json,sys\nfor line in sys.stdin:\n    msg = json.loads(line)\n"
        "    print(line.strip(), file=sys.stderr, flush=True)\n"
        "    print(json.dumps({'type': 'phase_done', 'records': [{'t_start': msg['t0'],"
        " 'size_bytes': 5}]}), flush=True)\n    break\n")
path = tmp + "/clock.sock"
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(1)
log = open(tmp + "/clock.log", "w")
with Control(m, HostTrust(tmp + "/known_hosts")) as c:
    agent = RemoteAgent(c, [python, "-c", echo], path, log, offset_s=100.0)
    conn, _ = srv.accept()
    conn.sendall(json.dumps({"type": "start", "phase": 0, "t0": 5.0}).encode() + b"\n")
    back = json.loads(conn.makefile("rb").readline())
    code = agent.wait(timeout=30)
    # the join ended with the agent: its thread towards the agent, which waits on our
    # socket, is done although the controller (here) has not closed its end yet
    towards = [t.is_alive() for t in agent._threads]
    conn.close()
print(json.dumps({"back": back, "code": code, "log": open(tmp + "/clock.log").read(),
                  "threads_alive": towards}))
"""


def test_the_control_channel_moves_times_by_the_machine_offset(machines):
    got = machines.drive(CLOCK)
    assert got["code"] == 0 and got["threads_alive"] == [False, False, False]
    told = json.loads(got["log"].strip().splitlines()[0])
    assert told["t0"] == 105.0  # the start instant on the machine's clock (+100 s)
    assert got["back"]["records"] == [{"t_start": 5.0, "size_bytes": 5}]  # back on ours


def test_an_unreachable_machine_is_refused_before_anything_exists(machines, tmp_path):
    m = machines
    results = tmp_path / "results"
    exp = two_dc_experiment(m, tmp_path / "exp.yaml", ssh2="10.77.0.9")
    out, _ = aitb_run(m, exp, results, timeout_s=120)
    assert out.returncode != 0
    assert str(exp) in out.stderr and "cluster.machines[1]" in out.stderr \
        and "machine m2" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert not results.exists() or list(results.rglob("*")) == []
    assert leftovers(m) == {"registries": [], "namespaces": [], "processes": []}


def test_a_machine_lost_mid_run_fails_the_run_naming_it(machines, tmp_path):
    """m2's underlay goes down while the collective runs: the run fails naming m2, m1's part
    is torn down by the run; m2, back, is cleaned by its own ``aitb topo destroy``."""
    import subprocess
    import time

    m = machines
    results = tmp_path / "results"
    # found lost within 10 s, not the default 30 s: the test's 30 s were mostly that wait
    exp = two_dc_experiment(m, tmp_path / "exp.yaml", size="16MiB", iterations=4,
                            probe_timeout="10s")
    argv = ["ip", "netns", "exec", m.under, sys.executable, "-m", "orchestration.cli",
            "run", str(exp), "--results", str(results), "--json", "--no-analysis",
            "--run-id", f"t-{m.rid}"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "AITB_STATE_DIR": str(m.tmp / "driver-state")}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    m2 = f"aitb-{m.rid}-m2"
    try:
        log = results / "split" / f"t-{m.rid}" / "run.log"
        deadline = time.monotonic() + 300
        while not (log.exists() and "workload 0" in log.read_text()):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the workload never started"
            time.sleep(0.2)
        subprocess.run(["ip", "-n", m2, "link", "set", "eth0", "down"], check=True)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "-n", m2, "link", "set", "eth0", "up"], check=True)
    assert out.strip() and "Traceback" not in err, err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert not got["ok"] and "machine m2 lost mid-run" in got["error"], got
    manifest = json.loads((Path(got["run_dir"]) / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "m2" in manifest["cluster"]["lost"]
    left = leftovers(m)
    assert not [n for n in left["namespaces"] if n.startswith(f"aitb-{m.rid}0-")]
    assert left["registries"] == [f"{m.rid}1"]  # m2's part: its machine was unreachable
    # back on m2: its own aitb ends what the run left there (agents by pid, namespaces)
    done = subprocess.run(["ip", "netns", "exec", m2, *m.aitb_argv(), "topo", "destroy",
                           f"{m.rid}1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert leftovers(m) == {"registries": [], "namespaces": [], "processes": []}
    # m2's observer, ended by that teardown, removed what nobody will copy back
    assert not list(Path("/tmp").glob(f"aitb-observe-{m.rid}*"))
