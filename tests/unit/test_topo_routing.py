"""Routes: shortest paths by cost, ECMP where costs tie, no host transit, compact tables."""

from topo_helpers import load, walk, walk_all

from topologies import generate


def test_leaf_route_to_other_leaf_hosts_has_one_next_hop_per_spine():
    plan = generate("leaf_spine", spines=4, leaves=4, hosts_per_leaf=4)
    dst = plan.address_of("l3-h2")
    routes = [r for r in plan.node("l1").routes if dst in r.dst]
    assert len(routes) == 1
    spines = {lk.endpoint(s).ipv4.ip for lk in plan.links_of("l1")
              for s in ("s1", "s2", "s3", "s4") if s in (lk.a.node, lk.b.node)}
    assert {h.via for h in routes[0].nexthops} == spines and len(routes[0].nexthops) == 4
    assert len(walk(plan, "l1-h1", "l3-h2")) == 4  # one path per spine


def test_host_with_one_uplink_has_one_route_to_the_pool():
    plan = generate("leaf_spine", spines=2, leaves=2, hosts_per_leaf=2)
    for host in plan.hosts():
        assert [str(r.dst) for r in host.routes] == ["198.18.0.0/15"]
    assert not any(str(r.dst) == "0.0.0.0/0" for n in plan.nodes for r in n.routes)


def test_every_host_pair_reachable_through_routers_only():
    walk_all(generate("multi_dc_leaf_spine", n_dcs=3, borders=2, dci_links_per_pair=2))
    walk_all(generate("edge_star", sites=3, hosts_per_site=2))
    walk_all(generate("single_switch", hosts=3))


def test_256_host_leaf_spine_reachable_from_one_host():
    plan = generate("leaf_spine")
    hosts = [h.name for h in plan.hosts()]
    walk_all(plan, [("l1-h1", h) for h in hosts[1:]] + [(h, "l1-h1") for h in hosts[1::17]])


def test_link_cost_picks_the_cheaper_path_and_ties_make_ecmp(tmp_path):
    text = """
name: t
nodes:
  r1: {kind: router}
  r2: {kind: router}
  r3: {kind: router}
  h1: {kind: host}
  h2: {kind: host}
links:
  - endpoints: [h1, r1]
  - endpoints: [h2, r3]
  - endpoints: [r1, r3]
    cost: COST
  - endpoints: [r1, r2]
  - endpoints: [r2, r3]
"""
    direct = walk(load(tmp_path, text.replace("COST", "1")), "h1", "h2")
    assert direct == [["h1", "r1", "r3", "h2"]]
    tie = walk(load(tmp_path, text.replace("COST", "2")), "h1", "h2")
    assert sorted(map(tuple, tie)) == [("h1", "r1", "r2", "r3", "h2"), ("h1", "r1", "r3", "h2")]
    detour = walk(load(tmp_path, text.replace("COST", "5")), "h1", "h2")
    assert detour == [["h1", "r1", "r2", "r3", "h2"]]


def test_multihomed_host_is_not_transit(tmp_path):
    # h1 sits on r1 and r2; r1 and r2 must not reach each other through h1
    text = """
name: t
nodes:
  r1: {kind: router}
  r2: {kind: router}
  h1: {kind: host}
  h2: {kind: host}
  h3: {kind: host}
links:
  - endpoints: [h1, r1]
  - endpoints: [h1, r2]
  - endpoints: [h2, r1]
  - endpoints: [h3, r2]
  - endpoints: [r1, r2]
    cost: 10
"""
    plan = load(tmp_path, text)
    assert walk(plan, "h2", "h3") == [["h2", "r1", "r2", "h3"]]
    assert len(plan.node("h1").routes) >= 2  # two gateways: per-destination routes


def test_parallel_links_make_ecmp():
    plan = generate("multi_dc_leaf_spine", n_dcs=2, dci_links_per_pair=2)
    b1 = plan.node("dc1-b1")
    dc2_host = plan.address_of("dc2-l1-h1")
    (route,) = [r for r in b1.routes if dc2_host in r.dst]
    assert sorted(h.ifname for h in route.nexthops) == ["dci-dc2-1", "dci-dc2-2"]


def test_the_walker_catches_missing_routes():
    import dataclasses

    import pytest
    from topo_helpers import Unreachable

    plan = generate("leaf_spine", spines=2, leaves=2, hosts_per_leaf=1)
    broken = dataclasses.replace(plan, nodes=tuple(
        dataclasses.replace(n, routes=()) if n.name == "l1" else n for n in plan.nodes))
    with pytest.raises(Unreachable):
        walk(broken, "l1-h1", "l2-h1")
    # a host in transit: tests/unit/test_paths.py


def test_cost_of_the_last_link_counts(tmp_path):
    # r1 reaches h2's LAN through r2 (last link cost 10) or r3 (cost 1): only r3 is shortest
    text = """
name: t
nodes:
  r1: {kind: router}
  r2: {kind: router}
  r3: {kind: router}
  s1: {kind: switch}
  h1: {kind: host}
  h2: {kind: host}
links:
  - endpoints: [h1, r1]
  - endpoints: [r1, r2]
  - endpoints: [r1, r3]
  - endpoints: [r2, s1]
    cost: 10
  - endpoints: [r3, s1]
  - endpoints: [h2, s1]
"""
    plan = load(tmp_path, text)
    assert walk(plan, "h1", "h2") == [["h1", "r1", "r3", "h2"]]


def test_ipv6_routes_reach_every_host_pair(tmp_path):
    text = """
name: t
addressing: {ipv6: true}
generator: {name: multi_dc_leaf_spine, params: {n_dcs: 2, dci_links_per_pair: 2}}
"""
    plan = load(tmp_path, text)
    walk_all(plan, version=6)
    leaf = plan.node("dc1-l1")
    assert {r.dst.version for r in leaf.routes} == {4, 6}
