"""The zoo of generators: sizes, wiring, routing (shortest paths, ECMP), refused parameters."""

from collections import Counter

import pytest
from topo_helpers import walk, walk_all

from models.errors import SpecError
from models.paths import paths
from topologies import generate
from topologies.generators.dragonfly import global_links
from topologies.generators.torus import grid_edges


def kinds(plan):
    return Counter(n.kind for n in plan.nodes)


def degree(plan, node):
    return len(plan.links_of(node))


def refused(name, **params):
    with pytest.raises(SpecError) as info:
        generate(name, **params)
    (issue,) = info.value.issues
    return issue


@pytest.mark.parametrize("k", [2, 4, 6])
def test_fat_tree_sizes(k):
    plan = generate("fat_tree", k=k)
    half = k // 2
    assert kinds(plan) == {"host": k ** 3 // 4, "router": half * half + k * k}
    # every switch has k ports: edge k/2 hosts + k/2 aggs, agg k/2 edges + k/2 cores
    assert all(degree(plan, n.name) == k for n in plan.nodes if n.kind == "router"
               and not n.name.startswith("c"))
    assert all(degree(plan, f"c{m}") == k for m in range(1, half * half + 1))


def test_fat_tree_routes_hosts_in_other_pods_over_every_core():
    plan = generate("fat_tree", k=4)
    assert len(walk(plan, "p1e1-h1", "p3e2-h2")) == 4  # (k/2)^2 core paths
    assert len(walk(plan, "p1e1-h1", "p1e2-h1")) == 2  # same pod: over its k/2 aggs
    assert len(walk(plan, "p1e1-h1", "p1e1-h2")) == 1
    walk_all(plan)


def test_fat_tree_odd_k_is_refused_naming_the_parameter():
    issue = refused("fat_tree", k=5)
    assert issue.to_dict()["key"] == "generator.params.k"
    assert "'fat_tree'" in issue.message and "k=5 is odd" in issue.message
    assert "4 or 6" in issue.message


def test_leaf_spine_oversubscription_sets_the_fabric_rate():
    plan = generate("leaf_spine", spines=2, leaves=2, hosts_per_leaf=12, oversubscription=3,
                    host_rate="25Gbit")
    fab = {lk.a_to_b.rate_bps for lk in plan.links if lk.a.node.startswith("l")
           and "-h" not in lk.a.node}
    host = {lk.a_to_b.rate_bps for lk in plan.links if "-h" in lk.a.node}
    assert fab == {12 * 25 * 10**9 // (2 * 3)} and host == {25 * 10**9}
    assert refused("leaf_spine", oversubscription=2).to_dict()["key"] == \
        "generator.params.host_rate"


def test_rail_optimized_puts_nic_i_on_rail_leaf_i():
    plan = generate("rail_optimized", servers=3, rails=4, spines=2)
    for s in range(1, 4):
        for j in range(1, 5):
            peers = {lk.b.node for lk in plan.links_of(f"s{s}g{j}")}
            assert peers == {f"rail{j}", f"s{s}nv"}
    assert len(walk(plan, "s1g2", "s3g2")) == 1  # same rail: through rail2 only
    assert walk(plan, "s1g2", "s3g2")[0] == ["s1g2", "rail2", "s3g2"]
    nv_addr = next(lk.endpoint("s1g4").ipv4.ip for lk in plan.links_of("s1g4")
                   if "s1nv" in (lk.a.node, lk.b.node))
    assert [[h.node for h in p] for p in paths(plan, "s1g1", nv_addr)] == [["s1g1", "s1nv"]]
    assert len(walk(plan, "s1g1", "s2g3")) == 2  # other rail: over both spines
    walk_all(plan)


def test_torus_and_mesh_wiring():
    t = generate("torus", dims=[4, 4])
    assert kinds(t) == {"host": 16, "router": 16}
    assert all(degree(t, n.name) == 5 for n in t.nodes if n.kind == "router")  # 4 + host
    m = generate("torus", dims=[3, 3, 2], wrap=False)
    assert len(grid_edges([3, 3, 2], False)) == 2 * 3 * 2 + 3 * 2 * 2 + 3 * 3 * 1
    assert degree(m, "t2-2-1") == 5 + 1  # centre of a 3x3x2 mesh: 5 neighbours + host
    # 2 hops either way round in x and in y: 2 * 2 * C(4, 2) shortest paths
    assert len(walk(t, "t1-1-h1", "t3-3-h1")) == 24
    assert len(walk(t, "t1-1-h1", "t2-2-h1")) == 2
    walk_all(t)
    walk_all(m)


@pytest.mark.parametrize("dims,needle", [([4], "1 dimension(s)"), ([4, 1], "a dimension of 1"),
                                         ([2, 2, 2, 2], "4 dimension(s)")])
def test_torus_bad_dimensions_are_refused(dims, needle):
    issue = refused("torus", dims=dims)
    assert issue.to_dict()["key"] == "generator.params.dims" and needle in issue.message


def test_hypercube():
    plan = generate("hypercube", d=4)
    assert kinds(plan) == {"host": 16, "router": 16}
    assert all(degree(plan, f"q{i}") == 4 + 1 for i in range(16))
    assert len(walk(plan, "q0-h1", "q15-h1")) == 24  # 4! shortest paths across the cube
    walk_all(plan)


def test_dragonfly_balanced_arrangement():
    a, h = 4, 2
    links = global_links(a, h, a * h + 1)
    pairs = Counter(frozenset((i, j)) for i, _, j, _ in links)
    assert len(pairs) == 9 * 8 // 2 and set(pairs.values()) == {1}  # one link per group pair
    ports = Counter((i, r) for i, r, _, _ in links) + Counter((j, s) for _, _, j, s in links)
    assert set(ports.values()) == {h} and len(ports) == 9 * a  # h global links per router
    plan = generate("dragonfly", a=a, h=h, p=2)
    assert kinds(plan) == {"host": 9 * 4 * 2, "router": 9 * 4}
    walk_all(generate("dragonfly", a=2, h=1, p=1))


def test_dragonfly_with_fewer_groups_doubles_the_links():
    links = global_links(4, 2, 5)  # 8 ports over 4 other groups: 2 links per pair
    assert set(Counter(frozenset((i, j)) for i, _, j, _ in links).values()) == {2}
    issue = refused("dragonfly", a=4, h=2, groups=4)
    assert issue.to_dict()["key"] == "generator.params.groups"
    assert "valid groups: [2, 3, 5, 9]" in issue.message


def test_full_mesh_and_ring():
    fm = generate("full_mesh", n=5)
    assert sum(1 for lk in fm.links if "-h" not in lk.a.node) == 10
    assert all(len(p) == 4 for p in walk(fm, "m1-h1", "m4-h1"))
    r = generate("ring", n=8)
    assert len(walk(r, "r1-h1", "r5-h1")) == 2  # both ways round
    assert len(walk(r, "r1-h1", "r3-h1")) == 1
    walk_all(fm)
    walk_all(r)


@pytest.mark.parametrize("model,params", [("erdos_renyi", {"p": 0.4}),
                                          ("waxman", {"alpha": 0.5, "beta": 0.9, "seed": 2}),
                                          ("barabasi_albert", {"m": 2})])
def test_random_graphs_are_seeded_and_connected(model, params):
    a = generate("random_graph", model=model, n=12, **params)
    b = generate("random_graph", model=model, n=12, **params)
    assert [(lk.a.node, lk.b.node) for lk in a.links] == [(lk.a.node, lk.b.node)
                                                          for lk in b.links]
    walk_all(a)


def test_random_graph_not_connected_is_refused():
    issue = refused("random_graph", model="erdos_renyi", n=20, p=0.01)
    assert issue.to_dict()["key"] == "generator.params.p"
    assert "falls into" in issue.message and "raise p or try another seed" in issue.message
    assert refused("random_graph", model="barabasi_albert", n=3, m=3).to_dict()["key"] == \
        "generator.params.m"


def test_edge_hierarchy_tiers_and_sites():
    plan = generate("edge_hierarchy", near_edges=2, far_per_near=3, hosts_per_far=2)
    assert kinds(plan) == {"router": 1 + 2 + 6, "host": 1 + 2 + 12}
    assert walk(plan, "fe1-1-h1", "fe1-2-h1")[0] == ["fe1-1-h1", "fe1-1", "ne1", "fe1-2",
                                                     "fe1-2-h1"]
    assert walk(plan, "fe1-1-h1", "fe2-1-h1")[0][2:5] == ["ne1", "cloud", "ne2"]
    assert plan.node("fe2-3-h2").labels["site"] == "fe2-3"
    walk_all(plan)


@pytest.mark.parametrize("shape,pairs", [("ring", 4), ("hub", 3), ("mesh", 6), ("chain", 3)])
def test_multi_dc_dci_shapes(shape, pairs):
    plan = generate("multi_dc_leaf_spine", n_dcs=4, spines=1, leaves=1, hosts_per_leaf=1,
                    dci_topology=shape)
    dci = {frozenset((lk.a.node, lk.b.node)) for lk in plan.links
           if lk.a.ifname.startswith("dci-")}
    assert len(dci) == pairs
    if shape == "hub":
        assert all("dc1-b1" in p for p in dci)
    walk_all(plan)


def test_more_hosts_than_the_address_pool_holds_is_refused(tmp_path):
    from topo_helpers import issues
    found = issues(tmp_path, """
        name: big
        addressing: {ipv4_pool: 198.18.0.0/24}
        generator: {name: fat_tree, params: {k: 8}}
    """)
    assert any(i.to_dict()["key"] == "addressing.ipv4_pool" and "needs" in i.message
               for i in found)
