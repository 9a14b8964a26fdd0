"""``routing: frr`` on the host kernel (examples/dci_failover_frr.yaml: two DCs, two DCIs,
eBGP with BFD in every router namespace). In a lab of the example's plan: zebra, bfdd and
bgpd run in each router's namespace (by pid, in that namespace), the routers' routes are
BGP's (none of the plan's static ones), the border router spreads over both DCIs; a DCI
down withdraws the next hop through it (traffic crosses the other), its up brings it back;
after teardown no daemon (by pid), no FRR temp directory and no namespace remains. The run of
the example: the ring completes and events.jsonl has a convergence record per link event."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, check_example_run, records, run_ok

import topologies
from models.errors import LabError
from orchestration.run.runner import prepare
from testbed.lab.registry import pid_alive
from testbed.routing import frr

pytestmark = pytest.mark.netns

EXAMPLE = ROOT / "examples" / "dci_failover_frr.yaml"
DC2_HOST = "dc2-l1-h1"


def _ns_inode(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def _dc2_routes(lab, node: str) -> dict[str, tuple]:
    """``node``'s routes to DC2's host subnets: dst -> (next hop interface indexes, proto)."""
    dc2 = {str(lk.a.ipv4.network) for lk in lab.plan.links if lk.a.node.startswith("dc2-l1-h")}
    with lab.netlink_lock:
        got = frr.table(lab.node_io(node).sock, node)
    return {d: (frozenset(h[0] for h in hops), proto) for d, (hops, _f, proto) in got.items()
            if d in dc2}


def _converge(lab):
    """A convergence watch started now: (watch, its done event, its result dict)."""
    done = threading.Event()
    out: dict = {}

    def on_done(result):
        out.update(result)
        done.set()

    w = lab.watch_convergence(time.monotonic(), on_done)
    return w, done, out


def _dst_of(lab, host: str) -> str:
    return str(lab.plan.address_of(host))


@pytest.fixture
def frr_state():
    """A state directory the daemons' user (frr) may traverse (pytest's tmp_path is 0700),
    removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="aitb-frr-test-", dir="/run"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def test_frr_lab_routes_by_bgp_and_reacts_to_a_dci_down_and_up(labs, frr_state):
    plan = prepare(EXAMPLE).plan
    labs.state_dir = frr_state
    lab = labs(plan)
    routers = [n.name for n in plan.nodes if n.kind == "router"]
    with lab:
        daemons = {r: {d: p.pid for d, p in lab.frr[r].procs.items()} for r in routers}
        for r in routers:  # each router's three daemons, alive, inside its namespace
            assert set(daemons[r]) == {"zebra", "bfdd", "bgpd"}
            ns = os.fstat(lab.node_io(r).fd).st_ino
            for pid in daemons[r].values():
                assert pid_alive(pid, None) and _ns_inode(pid) == ns
            assert str(lab.frr[r].dir).startswith(str(lab.registry.dir))
        # every link subnet learned, by BGP (proto 186), none of the plan's static routes
        for r in routers:
            with lab.netlink_lock:
                got = frr.table(lab.node_io(r).sock, r)
            for dst in frr.wanted_destinations(plan, r):
                assert got[dst][2] == frr.RTPROT_BGP, (r, dst, got[dst])
        layout = lab.layout.node("dc1-b1")
        dci1, dci2 = layout.ifindex("dci-dc2-1"), layout.ifindex("dci-dc2-2")
        before = _dc2_routes(lab, "dc1-b1")
        assert before and all(h == {dci1, dci2} for h, _ in before.values())

        w, done, out = _converge(lab)
        lab.set_links(["dc1-b1-dc2-b1"], up=False)
        assert done.wait(30), "no convergence after the DCI went down"
        assert out["converged"] and set(out["convergence"]) == set(routers)
        during = _dc2_routes(lab, "dc1-b1")
        assert set(during) == set(before) and all(h == {dci2} for h, _ in during.values())
        # traffic still flows, over the other DCI: a TCP connection across the DCs
        srv = lab.popen(DC2_HOST, ["python3", "-c", _SERVER])
        try:
            lab.run("dc1-l1-h1", ["python3", "-c", _CLIENT.format(dst=_dst_of(lab, DC2_HOST))],
                    timeout_s=20)
        finally:
            srv.kill()
            srv.wait()

        w, done, out = _converge(lab)
        lab.set_links(["dc1-b1-dc2-b1"], up=True)
        assert done.wait(30), "no convergence after the DCI came back"
        assert out["converged"]
        assert _dc2_routes(lab, "dc1-b1") == before
        tmpdirs = [Path(f"/var/tmp/frr/{d}.{pid}") for r in routers
                   for d, pid in daemons[r].items()]
    for r in routers:
        for pid in daemons[r].values():
            assert not pid_alive(pid, None), (r, pid)
    assert not any(p.exists() for p in tmpdirs)  # each daemon ended cleanly, by SIGTERM
    assert not lab.registry.dir.exists()


_SERVER = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5301)); s.listen(1)
c, _ = s.accept(); data = b""
while len(data) < 65536:
    b = c.recv(65536)
    if not b: break
    data += b
c.sendall(len(data).to_bytes(4, "big")); c.close()
"""
_CLIENT = """
import socket, time
for _ in range(100):
    try:
        s = socket.create_connection(("{dst}", 5301), timeout=5); break
    except ConnectionRefusedError:
        time.sleep(0.05)
s.sendall(b"x" * 65536); s.shutdown(socket.SHUT_WR)
assert int.from_bytes(s.recv(4), "big") == 65536
"""


@pytest.mark.timeout(300)
def test_dci_failover_frr_example_records_convergence(tmp_path, state_env, frr_state):
    run_dir = run_ok(EXAMPLE, tmp_path / "results",
                     {**state_env, "AITB_STATE_DIR": str(frr_state)}, "--no-analysis")
    check_example_run(run_dir)  # what test_run_examples asks of every example
    evs = records(run_dir, "events.jsonl")
    actions = [e for e in evs if e.get("record") != "convergence"]
    conv = {e["event"]: e for e in evs if e.get("record") == "convergence"}
    assert [(e["kind"], e["op"]) for e in actions] == [("link_down", "down"),
                                                        ("link_up", "up")]
    assert all("error" not in e for e in evs)
    routers = {n["name"] for n in json.loads((run_dir / "plan.json").read_text())["nodes"]
               if n["kind"] == "router"}
    for i in (0, 1):
        assert conv[i]["converged"] is True and set(conv[i]["convergence"]) == routers
        assert conv[i]["convergence_s"] == max(conv[i]["convergence"].values()) >= 0
    assert [c["iteration"] for c in records(run_dir, "collectives.jsonl")] == list(range(9))


def test_routes_not_converging_in_time_fail_bring_up_naming_routers_and_leave_nothing(
        labs, frr_state):
    plan = prepare(EXAMPLE).plan
    plan = dataclasses.replace(plan, routing=dataclasses.replace(plan.routing,
                                                                 converge_timeout_s=0.01))
    labs.state_dir = frr_state
    lab = labs(plan)
    with pytest.raises(LabError) as err:
        lab.up()  # BGP cannot open a session in 10 ms: the wait gives up
    assert "did not converge within 0.01 s (routing.converge_timeout)" in str(err.value)
    assert "router dc1-b1 has no route" in str(err.value)
    pids = [p.pid for r in lab.frr.values() for p in r.procs.values()]
    assert len(pids) == 3 * len(lab.frr) == 18  # they had started; the teardown ended them
    assert not any(pid_alive(pid, None) for pid in pids)
    assert not lab.registry.dir.exists()


TWO_ROUTERS = """
name: frr-two-routers
routing: ROUTING
nodes: {h1: {kind: host}, h2: {kind: host}, r1: {kind: router}, r2: {kind: router}}
links: [{endpoints: [h1, r1]}, {endpoints: [r1, r2]}, {endpoints: [r2, h2]}]
"""


def _two_routers(tmp_path, labs, frr_state, routing: str):
    path = tmp_path / "t.yaml"
    path.write_text(TWO_ROUTERS.replace("ROUTING", routing))
    labs.state_dir = frr_state
    return labs(topologies.load_topology(path))


def test_ospf_with_bfd_learns_the_far_subnet(labs, frr_state, tmp_path):
    lab = _two_routers(tmp_path, labs, frr_state, "{kind: frr, protocol: ospf, bfd: true}")
    plan = lab.plan
    with lab:  # up() waited until r1 and r2 had the other's subnets
        assert set(lab.frr["r1"].procs) == {"zebra", "bfdd", "ospfd"}
        far = str(plan.links_of("h2")[0].a.ipv4.network)
        with lab.netlink_lock:
            assert frr.table(lab.node_io("r1").sock, "r1")[far][2] == frr.RTPROT_OSPF
        lab.run("h1", ["ping", "-c1", "-W2", str(plan.address_of("h2"))])
        peers = json.loads(lab.run("r1", ["vtysh", "--vty_socket", str(lab.frr["r1"].dir),
                                          "-c", "show bfd peers json"]).stdout)
        assert [p["status"] for p in peers] == ["up"]  # OSPF's adjacency registered BFD
        # a daemon killed by SIGKILL leaves FRR's crash-log directory: teardown removes it
        ospfd = lab.frr["r1"].procs["ospfd"]
        crash = Path(f"/var/tmp/frr/ospfd.{ospfd.pid}")
        assert crash.is_dir()
        ospfd.kill()
        ospfd.wait()
        assert crash.is_dir()
    assert not crash.exists()
    assert not lab.registry.dir.exists()


def test_unnumbered_bgp_sessions_by_interface_learn_the_far_subnet(labs, frr_state,
                                                                   tmp_path):
    lab = _two_routers(tmp_path, labs, frr_state,
                       "{kind: frr, protocol: bgp, peering: unnumbered, bfd: false}")
    plan = lab.plan
    with lab:  # up() waited until r1 and r2 had the other's subnets
        far = str(plan.links_of("h2")[0].a.ipv4.network)
        with lab.netlink_lock:
            assert frr.table(lab.node_io("r1").sock, "r1")[far][2] == frr.RTPROT_BGP
        lab.run("h1", ["ping", "-c1", "-W2", str(plan.address_of("h2"))])
        shown = json.loads(lab.run("r1", ["vtysh", "--vty_socket", str(lab.frr["r1"].dir),
                                          "-c", "show bgp neighbors json"]).stdout)
        towards_r2 = next(lk for lk in plan.links_of("r1") if "r2" in (lk.a.node, lk.b.node))
        peer = shown[towards_r2.endpoint("r1").ifname]  # the session is named by interface
        # configured without addresses; FRR found the peer on the /31 (the other address)
        assert peer["bgpState"] == "Established"
        assert peer["hostForeign"] == str(towards_r2.endpoint("r2").ipv4.ip)
        assert "198.18." not in (lab.frr["r1"].dir / "bgpd.conf").read_text().split(
            "router bgp")[1].split("address-family")[0].replace(
            f"bgp router-id {plan.address_of('r1')}", "")
