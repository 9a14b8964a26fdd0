"""The Mininet backend: the same experiment on the native and the Mininet
backend is shaped alike (no CCT under the alpha-beta bound) and moves the same bytes per link
(their CCTs side by side: bench/backend_cct.py); Mininet labs leave nothing behind, also after
a failed bring-up; forwarding hosts (a direct-connect mesh) and dual-homed hosts' per-source
tables work on Mininet's hosts as on the native backend."""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import root_links, run_namespaces
from pyroute2 import IPRoute

from models.errors import LabError
from models.paths import host_addresses
from models.plan import Endpoint, LabPlan, LinkPlan, NextHop, NodePlan, Route
from orchestration.run.runner import execute, prepare
from testbed.lab.registry import pid_alive
from testbed.mininet.backend import MininetLab
from topologies import generate, load_topology

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]
RING = ROOT / "examples/ring_allreduce.yaml"

pytest.importorskip("mininet.net", reason="Mininet is installed by scripts/setup.sh")


@pytest.fixture(autouse=True)
def _root():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


def _records(run_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines() if line]


def _bytes_per_link(run_dir: Path) -> dict[str, int]:
    """HTB class bytes (all that left each shaped interface) at the end of the workload."""
    (part,) = (run_dir / "workloads").iterdir()
    nodes = json.loads((part / "counters_end.json").read_text())["nodes"]
    return {f"{n}:{i['ifname']}": c["bytes"] for n, nd in nodes.items()
            for i in nd["interfaces"] for c in i.get("classes", [])}


def _run(out: Path, backend: str) -> Path:
    outcome = execute(prepare(RING), out, backend=backend)
    assert outcome.ok, outcome.error
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    assert manifest["backend"] == backend
    assert run_namespaces(manifest["lab_run_id"]) == []  # torn down, by this run's id
    assert not any(a == f"aitb:{manifest['lab_run_id']}" for a in root_links().values())
    return outcome.run_dir


def test_ring_allreduce_shaped_and_same_bytes_on_native_and_mininet(tmp_path):
    # two runs per backend, interleaved, so that a change of load on the shared machine hits
    # both backends alike; 3 iterations each -> 6 CCTs per backend
    runs = [(b, _run(tmp_path / f"{b}{i}", b)) for i in range(2) for b in ("native", "mininet")]
    cct = {b: [c["cct_s"] for bb, d in runs if bb == b
               for c in _records(d, "collectives.jsonl")] for b in ("native", "mininet")}
    assert len(cct["native"]) == len(cct["mininet"]) == 6
    best = {b: min(v) for b, v in cct.items()}
    print(f"fastest CCT native {best['native'] * 1e3:.1f} ms, mininet "
          f"{best['mininet'] * 1e3:.1f} ms; all: "
          f"{ {b: [round(x * 1e3, 1) for x in v] for b, v in cct.items()} }")
    # The network part of the CCT is the alpha-beta bound 2(N-1)/N * S / B = 50.3 ms at the
    # scaled 100 Mbit/s; both backends apply the same HTB recipe, so both must respect it
    # (an unshaped veth would finish in a few ms).
    bound_s = 2 * 3 / 4 * 419430 * 8 / 100e6
    assert all(b >= 0.95 * bound_s for b in best.values()), best  # 5 %: HTB's 1 ms burst
    # How close the two backends' CCTs are is a figure, not a behaviour: bench/backend_cct.py
    # prints it with the ratio (under CPU contention single iterations took up to +80 %).
    nb, mb = _bytes_per_link(runs[0][1]), _bytes_per_link(runs[1][1])
    assert nb.keys() == mb.keys() and len(nb) == 8  # 4 hosts + 4 switch ports shaped
    for link, n_bytes in nb.items():
        # 5 %: the payload per direction is fixed by the ring schedule (~1.9 MB); only the
        # pure ACKs (66 B against 1514 B data frames, < 4.4 % of the bytes) and rare
        # retransmissions differ between runs of either backend.
        assert abs(mb[link] - n_bytes) <= 0.05 * n_bytes, (link, n_bytes, mb[link])
        assert n_bytes > 1.5 * 419430 * 3  # at least the ring's payload crossed every link


def _two_hosts(bad_route: bool) -> LabPlan:
    net = ipaddress.IPv4Network("198.18.0.0/30")
    a, b = (ipaddress.IPv4Interface(f"{h}/30") for h in list(net.hosts())[:2])
    routes = (Route(ipaddress.ip_network("198.19.0.0/24"),
                    (NextHop("eth0", ipaddress.ip_address("198.18.9.9")),)),) if bad_route else ()
    return LabPlan("mn2", (NodePlan("h1", "host", routes), NodePlan("h2", "host")),
                   (LinkPlan("h1-h2", Endpoint("h1", "eth0", a), Endpoint("h2", "eth0", b)),))


def test_mininet_lab_processes_and_namespaces_are_gone_after_down(tmp_path):
    from testbed.mininet.backend import MininetLab

    lab = MininetLab(_two_hosts(False), state_dir=tmp_path)
    with lab:
        shells = [(n.pid, n.shell.pid) for n in lab.net.hosts]
        agent = lab.popen("h1", ["sleep", "30"])
        lab.run("h1", ["ping", "-c1", "-W1", "198.18.0.2"])
        assert len(run_namespaces(lab.run_id)) == 2
    assert run_namespaces(lab.run_id) == []
    assert not any(pid_alive(p, None) for p, _ in shells) and agent.poll() is not None
    assert not (tmp_path / lab.run_id).exists()


def test_mininet_bringup_failure_leaves_nothing(tmp_path):
    """A route through a gateway that is on no link: the kernel refuses it while the lab is
    configured; everything Mininet and aitb made so far is removed, by this run's id."""
    from testbed.mininet.backend import MininetLab

    lab = MininetLab(_two_hosts(True), state_dir=tmp_path)
    with pytest.raises(LabError, match="198.19.0.0/24"):
        lab.up()
    assert run_namespaces(lab.run_id) == []
    assert not (tmp_path / lab.run_id).exists()


def test_sigterm_during_a_mininet_run_tears_the_lab_down(tmp_path):
    """`aitb run --backend mininet` gets SIGTERM while its agents replay: every shell, agent
    and namespace of its lab goes (found by the lab's run id in its registry)."""
    import signal
    import subprocess
    import sys
    import time

    exp = tmp_path / "long.yaml"
    exp.write_text(RING.read_text().replace("iterations: 3", "iterations: 200"))
    proc = subprocess.Popen([sys.executable, "-m", "orchestration.cli",
     "run", str(exp), "--backend",
                             "mininet", "--results", str(tmp_path / "r")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lab_id, procs, agents, deadline = None, [], 0, time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            manifests = list((tmp_path / "r").glob("*/*/manifest.json"))
            if not manifests:
                continue
            lab_id = json.loads(manifests[0].read_text())["lab_run_id"]
            reg = Path("/run/aitb") / lab_id / "registry.jsonl"
            recs = [json.loads(x) for x in reg.read_text().splitlines()] if reg.exists() else []
            # Mininet shells, agents, and the run's tcpdumps and counter sampler
            procs = [(r["pid"], r["start"]) for r in recs if r["kind"] == "process"]
            agents = sum(r["kind"] == "process" and "traffic_gen.agent" in r["argv"]
                         for r in recs)
            if agents == 4:
                break
        assert agents == 4, "the run never started its 4 agents"
        # into the replay (a SIGTERM that still comes while the agents start ends the run as
        # well: the controller kills the agents it has not heard from, tests/unit/
        # test_controller_abort.py; it used to wait 5 s for each run's stop timeout)
        time.sleep(2.0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # hung or never started: end our own child by pid, then fail
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, err[-2000:]
    assert run_namespaces(lab_id) == []
    assert not any(pid_alive(p, s) for p, s in procs)
    assert not (Path("/run/aitb") / lab_id).exists()


SEND = ("import socket, sys\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.bind((sys.argv[1], 0))\n"
        "for dst in sys.argv[2:]:\n"
        "    for _ in range(50):\n"
        "        s.sendto(b'x' * 1000, (dst, 9))\n")


def _tx(lab, node: str) -> dict[str, int]:
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        return {m.get_attr("IFLA_IFNAME"): m.get_attr("IFLA_STATS64")["tx_bytes"]
                for m in ipr.get_links() if m.get_attr("IFLA_IFNAME") != "lo"}


def _ifname(plan, node: str, peer: str) -> str:
    (lk,) = [lk for lk in plan.links_of(node) if peer in (lk.a.node, lk.b.node)]
    return lk.endpoint(node).ifname


def test_forwarding_hosts_on_mininet_route_a_direct_mesh(tmp_path):
    """forward: true hosts (a 3x3 mesh of hosts wired to hosts) on Mininet's hosts: every host
    reaches the far corner, and a flow t1-1 -> t1-3 crosses t1-2 (its counters)."""
    plan = generate("torus", dims=[3, 3], wrap=False, direct=True)
    addr = {h.name: str(plan.address_of(h.name)) for h in plan.hosts()}
    lab = MininetLab(plan, state_dir=tmp_path / "state")
    with lab:
        for h in addr:
            if h != "t3-3":
                lab.run(h, ["ping", "-c", "1", "-W", "2", "-q", "-I", addr[h], addr["t3-3"]])
        before = _tx(lab, "t1-2")
        lab.run("t1-1", [sys.executable, "-c", SEND, addr["t1-1"], addr["t1-3"]])
        after = _tx(lab, "t1-2")
    assert run_namespaces(lab.run_id) == []
    out = _ifname(plan, "t1-2", "t1-3")
    assert after[out] - before[out] >= 50 * 1000


def test_dual_homed_hosts_on_mininet_send_from_each_nic_out_of_that_nic(tmp_path):
    """The per-source tables of a dual-homed host (testbed/routing/source_routing.py) on Mininet:
    read back by verify at bring-up, and a datagram from h1's second NIC to h2's first
    address leaves by that NIC (the main table would take the first)."""
    plan = load_topology(ROOT / "topologies" / "examples" / "dual_homed.yaml")
    a1, a2 = host_addresses(plan, "h1"), host_addresses(plan, "h2")
    lab = MininetLab(plan, state_dir=tmp_path / "state")
    with lab:
        before = _tx(lab, "h1")
        lab.run("h1", [sys.executable, "-c", SEND, a1[1], a2[0]])
        after = _tx(lab, "h1")
    assert run_namespaces(lab.run_id) == []
    assert after["eth1"] - before["eth1"] >= 50 * 1000
    assert after["eth0"] - before["eth0"] < 1000
