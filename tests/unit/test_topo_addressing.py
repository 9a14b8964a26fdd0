"""Addresses and interface names computed from the graph."""

import ipaddress
from collections import defaultdict

from topo_helpers import load

from models.plan import plan_from_dict, plan_to_dict
from topologies import generate


def addresses(plan):
    return [ep.ipv4 for lk in plan.links for ep in (lk.a, lk.b) if ep.ipv4 is not None]


def check_addressing(plan):
    kinds = {n.name: n.kind for n in plan.nodes}
    ips = [a.ip for a in addresses(plan)]
    assert len(ips) == len(set(ips)), "duplicate addresses"
    pool = ipaddress.ip_network("198.18.0.0/15")
    assert all(ip in pool for ip in ips)
    for lk in plan.links:
        for ep in (lk.a, lk.b):
            assert (ep.ipv4 is None) == (kinds[ep.node] == "switch"), (lk.name, ep)
        if kinds[lk.a.node] != "switch" and kinds[lk.b.node] != "switch":
            assert lk.a.ipv4.network == lk.b.ipv4.network and lk.a.ipv4.network.prefixlen == 31
    for a in addresses(plan):  # a LAN member never holds the network or broadcast address
        if a.network.prefixlen < 31:
            assert a.ip not in (a.network.network_address, a.network.broadcast_address), a
    nets = {a.network for a in addresses(plan)}
    for x in nets:  # subnets never overlap
        assert not any(x != y and x.overlaps(y) for y in nets)


def test_generated_plans_are_consistently_addressed():
    for plan in (generate("leaf_spine"), generate("multi_dc_leaf_spine", n_dcs=3),
                 generate("edge_star", hosts_per_site=3), generate("single_switch", hosts=5)):
        check_addressing(plan)


def test_segment_members_share_a_subnet_sized_to_fit(tmp_path):
    text = """
name: t
nodes:
  s1: {kind: switch}
  s2: {kind: switch}
  r1: {kind: router}
  h1: {kind: host}
  h2: {kind: host}
  h3: {kind: host}
  h4: {kind: host}
  h5: {kind: host}
  h6: {kind: host}
links:
  - endpoints: [h1, s1]
  - endpoints: [s1, s2]
  - endpoints: [h2, s2]
  - endpoints: [r1, s2]
  - endpoints: [h3, s1]
  - endpoints: [h4, s2]
  - endpoints: [h5, r1]
  - endpoints: [h6, s1]
"""
    plan = load(tmp_path, text)
    check_addressing(plan)
    assert plan.address_of("h1") == ipaddress.ip_address("198.18.0.1")  # first LAN member
    lan = {lk.endpoint(n).ipv4.network for lk in plan.links for n in ("h1", "h2", "h3", "h4",
                                                                        "h6", "r1")
           if n in (lk.a.node, lk.b.node) and lk.endpoint(n).ipv4
           and lk.endpoint(n).ipv4.network.prefixlen != 31}
    assert len(lan) == 1 and next(iter(lan)).prefixlen == 29  # 6 members + 2 -> 8 addresses
    s1s2 = plan.links[1]
    assert s1s2.a.ipv4 is None and s1s2.b.ipv4 is None


def test_interface_names_default_and_given(tmp_path):
    text = """
name: t
nodes:
  r1: {kind: router}
  h1: {kind: host}
  h2: {kind: host}
links:
  - endpoints: [h1, r1]
  - endpoints: ["h2:up0", "r1:eth0"]
  - endpoints: ["h2", r1]
"""
    plan = load(tmp_path, text)
    ifs = defaultdict(list)
    for lk in plan.links:
        for ep in (lk.a, lk.b):
            ifs[ep.node].append(ep.ifname)
    assert ifs["h1"] == ["eth0"]
    assert ifs["r1"] == ["eth1", "eth0", "eth2"]  # eth0 is taken explicitly by link 2
    assert ifs["h2"] == ["up0", "eth0"]
    assert [lk.name for lk in plan.links] == ["h1-r1", "h2-r1", "h2-r1-2"]


def test_ipv6_optional(tmp_path):
    text = """
name: t
addressing: {ipv6: true}
nodes:
  r1: {kind: router}
  h1: {kind: host}
  h2: {kind: host}
links:
  - endpoints: [h1, r1]
  - endpoints: [h2, r1]
"""
    plan = load(tmp_path, text)
    v6 = [ep.ipv6 for lk in plan.links for ep in (lk.a, lk.b)]
    assert all(a is not None and a.network.prefixlen == 64 for a in v6)
    assert len({a.ip for a in v6}) == 4
    assert [str(r.dst) for r in plan.node("h1").routes] == ["198.18.0.0/15", "2001:2::/48"]


def test_determinism_and_json_round_trip():
    a, b = generate("multi_dc_leaf_spine", n_dcs=3), generate("multi_dc_leaf_spine", n_dcs=3)
    assert plan_to_dict(a) == plan_to_dict(b)
    assert plan_from_dict(plan_to_dict(a)) == a
