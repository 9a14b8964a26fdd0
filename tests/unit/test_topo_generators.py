"""Generators: sizes, registry, parameters, generator references in files."""

from collections import Counter

import pytest
from topo_helpers import find_issue, issues, load

from models.errors import SpecError
from topologies import GENERATORS, generate


def kinds(plan):
    return Counter(n.kind for n in plan.nodes)


def test_leaf_spine_benchmark_size():
    plan = generate("leaf_spine")
    assert kinds(plan) == {"host": 256, "router": 20}
    fabric = [lk for lk in plan.links if lk.a.node.startswith("l") and "-h" not in lk.a.node
              and lk.b.node.startswith("s")]
    assert len(fabric) == 16 * 4 and len(plan.links) == 256 + 64
    routers = {n.name for n in plan.nodes if n.kind == "router"}
    assert len({n for n in routers if n.startswith("s")}) == 4
    assert len({n for n in routers if n.startswith("l")}) == 16


def test_1024_hosts_are_generable():
    plan = generate("leaf_spine", leaves=64, hosts_per_leaf=16)
    assert kinds(plan)["host"] == 1024
    assert max(len(n.name) for n in plan.nodes) <= 15


def test_multi_dc_sizes_and_no_switches():
    plan = generate("multi_dc_leaf_spine", n_dcs=3, spines=2, leaves=3, hosts_per_leaf=2,
                    borders=2, dci_topology="chain")
    assert kinds(plan) == {"host": 3 * 3 * 2, "router": 3 * (2 + 3 + 2)}
    dci = [lk for lk in plan.links if lk.a.ifname.startswith("dci-")]
    assert len(dci) == 2  # chain of 3 DCs
    assert all(lk.a_to_b.delay_s == pytest.approx(0.0005) for lk in dci)  # dci-metro


def test_edge_star_heterogeneous_access():
    plan = generate("edge_star", sites=4, access=["edge-lte", "edge-5g"])
    access = {lk.a.node: lk.a_to_b.rate_bps for lk in plan.links if lk.b.node == "agg"
              and lk.a.node.startswith("site")}
    assert access == {"site1": 10**7, "site2": 5 * 10**7, "site3": 10**7, "site4": 5 * 10**7}


def test_edge_star_with_site_routers():
    plan = generate("edge_star", sites=2, hosts_per_site=3)
    assert kinds(plan) == {"host": 7, "router": 3, "switch": 2}


def test_single_switch():
    plan = generate("single_switch", hosts=5)
    assert kinds(plan) == {"host": 5, "switch": 1} and len(plan.links) == 5


def test_unknown_generator_lists_valid_ones():
    with pytest.raises(SpecError) as info:
        generate("fat_trie")
    assert all(name in str(info.value) for name in GENERATORS)


@pytest.mark.parametrize("params,needle", [
    ({"spine": 2}, "unknown parameter 'spine'"), ({"spines": 0}, "greater than or equal"),
    ({"dci_topology": "star"}, "'mesh', 'chain', 'ring' or 'hub'"),
])
def test_bad_generator_parameters(params, needle):
    with pytest.raises(SpecError) as info:
        generate("multi_dc_leaf_spine", **params)
    assert needle in str(info.value) and "generator.params" in str(info.value)


def test_file_naming_a_generator_with_overrides_and_extra_nodes(tmp_path):
    text = """
name: mine
generator: {name: single_switch, params: {hosts: 2, link: gig}}
profiles:
  gig: {rate: 1Gbit}
defaults:
  host: {tcp_congestion_control: reno}
nodes:
  mon: {kind: host}
links:
  - endpoints: [mon, s1]
"""
    plan = load(tmp_path, text)
    assert plan.name == "mine" and len(plan.hosts()) == 3
    assert plan.links[0].a_to_b.rate_bps == 10**9
    assert all(h.tcp_congestion_control == "reno" for h in plan.hosts())


def test_a_generated_files_top_level_keys_survive_the_generator(tmp_path):
    # delay_line was dropped by the expansion: a leaf-spine file asking for the native line
    # resolved to auto
    text = """
name: mine
delay_line: native
generator: {name: single_switch, params: {hosts: 2, link: slow}}
profiles:
  slow: {rate: 1Gbit, delay: 5ms}
"""
    plan = load(tmp_path, text)
    assert [lk.delay_line for lk in plan.links] == ["native", "native"]


def test_file_generator_errors_point_at_the_generator(tmp_path):
    found = issues(tmp_path, "name: t\ngenerator: {name: single_switch, params: {hostz: 2}}\n")
    issue = find_issue(found, "generator.params.hostz", "unknown parameter")
    assert issue.line == 2
    found = issues(tmp_path, "name: t\ngenerator: {name: single_switch, params: {link: nope}}\n")
    issue = find_issue(found, "generator.params.link", "unknown profile 'nope'")
    assert issue.line == 2 and len(found) == 1  # once, at the parameter that names it


def test_multi_dc_labels_every_node_with_its_site():
    import topologies
    from workloads.placement import sites_of_plan

    plan = topologies.generate("multi_dc_leaf_spine", n_dcs=3, spines=1, leaves=1,
                               hosts_per_leaf=2)
    assert {n.name: n.labels.get("site") for n in plan.nodes if n.name.startswith("dc2-")} \
        == {n.name: "dc2" for n in plan.nodes if n.name.startswith("dc2-")}
    assert list(sites_of_plan(plan)) == ["dc1", "dc2", "dc3"]
