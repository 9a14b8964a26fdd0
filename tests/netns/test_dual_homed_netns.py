"""Dual-homed hosts with equal-cost NICs on the host kernel (topologies/examples/dual_homed.yaml:
h1 and h2 each on leaves l1 and l2, h3 on l3): traffic from a NIC's address leaves by that NIC
(per-source tables, testbed/routing/source_routing.py), even towards an address the main table
reaches
over the other NIC; replay spreads the peers of a host over both its NICs
(models.paths.peer_addresses), and each flow's records carry the planned NIC pair; a NIC link that
fails and comes back gets its per-source routes back."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest
from conftest import run_namespaces
from pyroute2 import IPRoute

from models.paths import host_addresses, peer_addresses
from models.records import FlowRecord
from models.schedule import Collective, Group, Schedule
from testbed.lab.lab import Lab
from testbed.routing import source_routing
from topologies import load_topology
from traffic_gen import replay
from traffic_gen.jsonl import read_records
from traffic_gen.launch import LabLauncher

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]

EXAMPLE = Path(__file__).resolve().parents[2] / "topologies" / "examples" / "dual_homed.yaml"
DATAGRAMS, PAYLOAD = 50, 1000
SEND = ("import socket, sys\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.bind((sys.argv[1], 0))\n"
        "for dst in sys.argv[2:]:\n"
        f"    for _ in range({DATAGRAMS}):\n"
        f"        s.sendto(b'x' * {PAYLOAD}, (dst, 9))\n")
SIZE = 96 << 10


def _tx(lab, node: str) -> dict[str, int]:
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        return {m.get_attr("IFLA_IFNAME"): m.get_attr("IFLA_STATS64")["tx_bytes"]
                for m in ipr.get_links() if m.get_attr("IFLA_IFNAME") != "lo"}


def _nic(plan, node: str, ip: str) -> str:
    (ifname,) = [lk.endpoint(node).ifname for lk in plan.links_of(node)
                 if str(lk.endpoint(node).ipv4.ip) == ip]
    return ifname


@pytest.fixture(scope="module")
def dual(tmp_path_factory):
    """The dual-homed lab, up for this module's tests (one bring-up); afterwards none of its
    namespaces remains."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    plan = load_topology(EXAMPLE)
    lab = Lab(plan, secrets.token_hex(3), tmp_path_factory.mktemp("state"))
    with lab:
        yield plan, lab
    assert not run_namespaces(lab.run_id), "namespaces left behind"


def test_traffic_from_each_nic_address_leaves_by_that_nic(dual):
    plan, lab = dual
    assert {sr.ifname for sr in plan.node("h1").source_routes} == {"eth0", "eth1"}
    targets = [a for h in ("h2", "h3") for a in host_addresses(plan, h)]
    for src_ip in host_addresses(plan, "h1"):
        before = _tx(lab, "h1")
        lab.run("h1", [sys.executable, "-c", SEND, src_ip, *targets])
        after = _tx(lab, "h1")
        sent = {i: after[i] - before[i] for i in after}
        mine = _nic(plan, "h1", src_ip)
        # every datagram to every address of h2 and h3 (h2's other NIC too, which the main
        # table reaches over h1's other NIC) leaves by the NIC of its source address
        assert sent[mine] >= DATAGRAMS * PAYLOAD * len(targets), (src_ip, sent)
        others = {i: b for i, b in sent.items() if i != mine}
        assert max(others.values()) < PAYLOAD, (src_ip, sent)  # ARP at most


def test_replay_spreads_peers_over_both_nics(dual, tmp_path):
    plan, lab = dual
    hosts = ["h1", "h2", "h3"]
    place = dict(enumerate(hosts))
    sched = Schedule("a2a", 3, {"w": Group("w", "dp", (0, 1, 2))},
                     (Collective("all_to_all", "w", SIZE),))
    pairs = peer_addresses(plan, hosts)
    before = {h: _tx(lab, h) for h in hosts}
    res = replay(sched, place, LabLauncher(lab), tmp_path,
                 {h: str(plan.address_of(h)) for h in hosts}, pair_addresses=pairs)
    assert res.ok, res.failures
    after = {h: _tx(lab, h) for h in hosts}
    for h in ("h1", "h2"):  # both NICs of each dual-homed host carry a peer's share
        for ifname in ("eth0", "eth1"):
            assert after[h][ifname] - before[h][ifname] >= SIZE // 3, (h, ifname)
    flows = list(read_records(res.paths["flows"], FlowRecord))
    assert len(flows) == 6
    for f in flows:
        assert (f.src_ip, f.dst_ip) == pairs[(f.src_node, f.dst_node)], f


def test_a_nic_link_that_comes_back_gets_its_source_table_back(dual):
    plan, lab = dual
    (second,) = [lk.name for lk in plan.links_of("h1") if lk.endpoint("h1").ifname == "eth1"]
    lab.set_links([second], False)  # the kernel deletes the routes through it, table too
    table = f"table {source_routing.TABLE_BASE + 2} "  # eth1 is h1's second source-routed NIC
    assert any(table in p for p in source_routing.check(lab, ["h1"]))
    lab.set_links([second], True)
    assert source_routing.check(lab, ["h1"]) == []
    a1, a2 = host_addresses(plan, "h1"), host_addresses(plan, "h2")
    before = _tx(lab, "h1")
    lab.run("h1", [sys.executable, "-c", SEND, a1[1], a2[0]])
    assert _tx(lab, "h1")["eth1"] - before["eth1"] >= DATAGRAMS * PAYLOAD
