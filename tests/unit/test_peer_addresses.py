"""Multi-NIC hosts: one address per NIC, each peer reached over the NIC nearest to it
(models.paths.peer_addresses), and replay's check of the pairs it is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from topo_helpers import load

from models.errors import SpecError
from models.paths import PathWalker, host_addresses, paths, peer_addresses
from models.plan import plan_from_dict, plan_to_dict
from models.schedule import Collective, Group, Schedule
from topologies import generate, load_topology
from traffic_gen import replay
from traffic_gen.launch import LocalLauncher

EXAMPLES = Path(__file__).resolve().parents[2] / "topologies" / "examples"


def _addr(plan, node, peer):
    (lk,) = [lk for lk in plan.links_of(node) if peer in (lk.a.node, lk.b.node)]
    return str(lk.endpoint(node).ipv4.ip)


def test_rail_gpus_reach_their_server_over_nvlink_and_other_servers_over_their_rail():
    plan = generate("rail_optimized", servers=2, rails=2, spines=1)
    hosts = [h.name for h in plan.hosts()]
    assert host_addresses(plan, "s1g1") == [_addr(plan, "s1g1", "rail1"),
                                            _addr(plan, "s1g1", "s1nv")]
    pairs = peer_addresses(plan, hosts)
    assert len(pairs) == 12  # every ordered pair: every GPU has two NICs
    assert pairs[("s1g1", "s1g2")] == (_addr(plan, "s1g1", "s1nv"), _addr(plan, "s1g2", "s1nv"))
    assert pairs[("s1g1", "s2g1")] == (_addr(plan, "s1g1", "rail1"),
                                       _addr(plan, "s2g1", "rail1"))
    # another rail of another server: its rail NIC (its NVSwitch is only for its own GPUs)
    assert pairs[("s1g1", "s2g2")] == (_addr(plan, "s1g1", "rail1"),
                                       _addr(plan, "s2g2", "rail2"))
    (path,) = paths(plan, "s1g1", pairs[("s1g1", "s1g2")][1])
    assert [h.node for h in path] == ["s1g1", "s1nv"]


def test_the_first_nic_wins_a_tie_and_single_nic_pairs_are_left_out(tmp_path):
    plan = load(tmp_path, """\
        name: t
        nodes:
          a: {kind: host}
          b: {kind: host}
          c: {kind: host}
          r1: {kind: router}
          r2: {kind: router}
        links:
          - endpoints: [a, r1]
          - endpoints: [b, r1]
          - endpoints: [b, r2]
          - endpoints: [c, r2]
          - endpoints: [r1, r2]
        """)
    pairs = peer_addresses(plan, ["a", "b", "c"])
    assert ("a", "c") not in pairs and ("c", "a") not in pairs  # one NIC each
    assert pairs[("a", "b")] == (_addr(plan, "a", "r1"), _addr(plan, "b", "r1"))
    assert pairs[("c", "b")] == (_addr(plan, "c", "r2"), _addr(plan, "b", "r2"))
    assert pairs[("b", "a")] == (_addr(plan, "b", "r1"), _addr(plan, "a", "r1"))


def test_a_forwarding_host_keeps_its_node_address():
    plan = generate("torus", dims=[3, 3], direct=True)
    assert host_addresses(plan, "t1-1") == [str(plan.address_of("t1-1"))]
    assert peer_addresses(plan, [h.name for h in plan.hosts()]) == {}


def test_replay_refuses_bad_pair_addresses_before_starting_anything(tmp_path):
    sched = Schedule("s", 2, {"g": Group("g", "dp", (0, 1))},
                     (Collective("all_reduce", "g", 1024),))
    addrs = {"h1": "198.18.0.1", "h2": "198.18.0.2"}
    with pytest.raises(SpecError) as info:
        replay(sched, {0: "h1", 1: "h2"}, LocalLauncher(), tmp_path / "run", addrs,
               pair_addresses={("h1", "h2"): ("198.18.0.1", "nic0"),
                               ("h1", "ghost"): ("198.18.0.1", "198.18.0.9")})
    text = str(info.value)
    assert "h1 -> h2: 'nic0' is not an IPv4 address" in text
    assert "h1 -> ghost names a host without a lab address" in text
    assert not (tmp_path / "run").exists()


def test_dual_homed_hosts_get_a_table_per_nic_and_spread_their_peers_over_both():
    plan = load_topology(EXAMPLES / "dual_homed.yaml")
    h1 = plan.node("h1")
    assert [sr.ifname for sr in h1.source_routes] == ["eth0", "eth1"]
    for sr in h1.source_routes:  # its subnet on-link, the rest through that NIC's gateway
        assert {h.ifname for r in sr.routes for h in r.nexthops} == {sr.ifname}
    assert plan.node("h3").source_routes == ()  # one NIC
    a1, a2, a3 = (host_addresses(plan, h) for h in ("h1", "h2", "h3"))
    # from h1's second NIC to h2's first: the main table leaves by h1's first NIC (l1), the
    # source table by its second (l2, the spine, l1)
    (path,) = paths(plan, "h1", a2[0])
    assert [h.node for h in path] == ["h1", "l1"]
    (path,) = PathWalker(plan).paths("h1", a2[0], a1[1])
    assert [h.node for h in path] == ["h1", "l2", "sp", "l1"]
    pairs = peer_addresses(plan, ["h1", "h2", "h3"])
    # h1's peers h2 and h3 take its NICs in turn; h2 and h1 pair NIC to NIC on one leaf
    assert pairs[("h1", "h2")] == (a1[0], a2[0]) and pairs[("h2", "h1")] == (a2[0], a1[0])
    assert pairs[("h1", "h3")] == (a1[1], a3[0]) and pairs[("h2", "h3")] == (a2[1], a3[0])
    assert pairs[("h3", "h1")] == (a3[0], a1[0]) and pairs[("h3", "h2")] == (a3[0], a2[1])


def test_source_routes_survive_plan_json():
    plan = load_topology(EXAMPLES / "dual_homed.yaml")
    again = plan_from_dict(json.loads(json.dumps(plan_to_dict(plan))))
    assert again.node("h1").source_routes == plan.node("h1").source_routes


def test_a_nic_whose_table_cannot_reach_a_peer_is_not_its_source(tmp_path):
    # a's NIC on nv reaches only b (nv's other host does not forward): from that NIC's address
    # c falls through to the main table, out of the other NIC, so it is never c's source
    plan = load(tmp_path, """\
        name: t
        nodes:
          a: {kind: host, ranks_per_host: 2}
          b: {kind: host}
          c: {kind: host}
          r1: {kind: router}
          nv: {kind: router}
        links:
          - endpoints: [a, r1]
          - endpoints: [a, nv]
          - endpoints: [b, r1]
          - endpoints: [b, nv]
          - endpoints: [c, r1]
        """)
    assert [sr.ifname for sr in plan.node("a").source_routes] == ["eth0", "eth1"]
    nv_table = plan.node("a").source_routes[1].routes  # no route to the pool: c is not in it
    assert not any(plan.address_of("c") in r.dst for r in nv_table)
    assert any(plan.address_of("c") in r.dst for r in plan.node("a").source_routes[0].routes)
    pairs = peer_addresses(plan, ["a", "b", "c"])
    assert pairs[("a", "c")] == (_addr(plan, "a", "r1"), str(plan.address_of("c")))
    assert pairs[("a", "b")] == (_addr(plan, "a", "r1"), _addr(plan, "b", "r1"))
