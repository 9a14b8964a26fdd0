"""Direct-connect fabrics: hosts that forward (``forward: true``) are the routers of a torus,
hypercube, full mesh or ring; each has a node address on its loopback, reached over the
shortest paths through the other hosts."""

from __future__ import annotations

import ipaddress

import pytest
from topo_helpers import find_issue, issues, load, walk

from models.errors import SpecError
from models.paths import paths
from models.plan import plan_from_dict, plan_to_dict
from topologies import generate
from topologies.generators.torus import grid_edges


def test_direct_torus_has_no_routers_and_node_addresses_on_loopback():
    plan = generate("torus", dims=[3, 3], direct=True)
    assert {n.kind for n in plan.nodes} == {"host"} and len(plan.nodes) == 9
    assert all(n.forward for n in plan.nodes)
    assert len(plan.links) == len(grid_edges((3, 3), True)) == 18
    los = [n.lo_ipv4 for n in plan.nodes]
    assert all(lo is not None and lo.network.prefixlen == 32 for lo in los)
    assert len(set(los)) == 9
    link_addrs = {ep.ipv4.ip for lk in plan.links for ep in (lk.a, lk.b)}
    assert not link_addrs & {lo.ip for lo in los}
    assert plan.address_of("t2-2") == plan.node("t2-2").lo_ipv4.ip
    assert plan_from_dict(plan_to_dict(plan)) == plan


def test_direct_torus_routes_through_hosts_on_shortest_paths():
    plan = generate("torus", dims=[3, 3], direct=True)
    assert walk(plan, "t1-1", "t1-2") == [["t1-1", "t1-2"]]
    assert walk(plan, "t1-1", "t1-3") == [["t1-1", "t1-3"]]  # the wrap-around link
    assert sorted(walk(plan, "t1-1", "t2-2")) == [["t1-1", "t1-2", "t2-2"],
                                                  ["t1-1", "t2-1", "t2-2"]]  # ECMP


def test_direct_mesh_transits_the_hosts_between():
    plan = generate("torus", dims=[3, 3], wrap=False, direct=True)
    assert walk(plan, "t1-1", "t1-3") == [["t1-1", "t1-2", "t1-3"]]
    assert len(walk(plan, "t1-1", "t3-3")) == 6  # 4 choose 2 monotone lattice paths


def test_direct_full_mesh_goes_straight_and_hypercube_by_bits():
    mesh = generate("full_mesh", n=5, direct=True)
    assert walk(mesh, "m1", "m4") == [["m1", "m4"]]  # never via a third host
    cube = generate("hypercube", d=3, direct=True)
    assert len(walk(cube, "q0", "q7")) == 6 and all(len(p) == 4 for p in walk(cube, "q0", "q7"))


def test_direct_ipv6_node_addresses(tmp_path):
    plan = load(tmp_path, """\
        name: t
        addressing: {ipv6: true}
        generator: {name: ring, params: {n: 4, direct: true}}
        """)
    lo6 = plan.node("r3").lo_ipv6
    assert lo6 is not None and lo6.network.prefixlen == 128
    assert sorted(h.node for p in paths(plan, "r1", lo6.ip) for h in p) == ["r1", "r1", "r2",
                                                                            "r4"]


def test_forward_key_in_a_file_makes_a_chain_of_hosts_reachable(tmp_path):
    text = """\
        name: t
        nodes:
          h1: {kind: host}
          h2: {kind: host, forward: true}
          h3: {kind: host}
        links:
          - endpoints: [h1, h2]
          - endpoints: [h2, h3]
        """
    plan = load(tmp_path, text)
    assert walk(plan, "h1", "h3") == [["h1", "h2", "h3"]]
    assert plan.node("h2").lo_ipv4 is not None and plan.node("h1").lo_ipv4 is None


def test_chain_without_forward_is_refused_pointing_at_forward(tmp_path):
    text = "name: t\nnodes:\n  h1: {kind: host}\n  h2: {kind: host}\n  h3: {kind: host}\n" \
           "links:\n  - endpoints: [h1, h2]\n  - endpoints: [h2, h3]\n"
    issue = find_issue(issues(tmp_path, text), "nodes.h1", "cannot reach")
    assert "forward: true" in issue.message


def test_direct_with_hosts_per_router_is_refused_naming_the_parameter():
    with pytest.raises(SpecError) as info:
        generate("torus", dims=[3, 3], direct=True, hosts_per_router=2)
    (issue,) = info.value.issues
    assert issue.to_dict()["key"] == "generator.params.hosts_per_router"
    assert "'torus'" in issue.message and "leave hosts_per_router at 1" in issue.message


def test_pool_too_small_counts_the_node_addresses(tmp_path):
    # 4 links (/31: 8 addresses) + 4 node addresses (/32) = 12 > the /29's 8
    found = issues(tmp_path, """\
        name: t
        addressing: {ipv4_pool: 198.18.0.0/29}
        generator: {name: ring, params: {n: 4, direct: true}}
        """)
    issue = find_issue(found, "addressing.ipv4_pool", "needs 12")
    assert ipaddress.ip_network("198.18.0.0/29").num_addresses == 8 and issue
