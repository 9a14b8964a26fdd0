"""``kind: app`` on multi-NIC hosts: each rank's placeholders name the peer's NIC nearest to
the rank's own node and the rank's NIC towards it (models.paths.peer_addresses, as replay uses),
not the peer's first address; checked before a lab exists."""

from __future__ import annotations

import pytest

from models.errors import SpecError
from models.paths import host_addresses, peer_addresses
from orchestration.apps.argv import build_app
from orchestration.apps.entries import AppEntry
from topologies import generate


def _addr(plan, node: str, peer: str) -> str:
    (lk,) = [lk for lk in plan.links_of(node) if peer in (lk.a.node, lk.b.node)]
    return str(lk.endpoint(node).ipv4.ip)


def _app(nodes, command, env=None):
    return AppEntry(kind="app", nodes=nodes, command=command, env=env or {})


def test_a_gpu_reaches_its_server_peer_over_nvlink_and_another_server_over_its_rail():
    plan = generate("rail_optimized", servers=2, rails=2, spines=1)
    e = _app(["s1g1", "s1g2", "s2g1"], ["run", "{master_addr}", "{addr:s1g1}",
                                        "{src_addr:s1g1}", "{addrs:s1g1}"],
             {"PEER": "{addr:s2g1}"})
    app = build_app(e, 0, plan, "exp.yaml")
    by_node = {r.node: r for r in app.ranks}
    nv1, rail1 = _addr(plan, "s1g1", "s1nv"), _addr(plan, "s1g1", "rail1")
    # s1g2 -> s1g1: over their NVSwitch (before: s1g1's rail address, over rail 2 and a spine)
    assert by_node["s1g2"].argv[1:4] == (nv1, nv1, _addr(plan, "s1g2", "s1nv"))
    # s2g1 -> s1g1: over rail 1, from s2g1's rail NIC
    assert by_node["s2g1"].argv[1:4] == (rail1, rail1, _addr(plan, "s2g1", "rail1"))
    assert by_node["s1g1"].argv[4] == ",".join(host_addresses(plan, "s1g1"))
    assert by_node["s1g2"].env["PEER"] == peer_addresses(plan, ["s1g2", "s2g1"])[
        ("s1g2", "s2g1")][1]
    # a node's own address: its first (the placeholder of itself is not a pair)
    assert by_node["s1g1"].argv[2] == str(plan.address_of("s1g1"))


def test_single_nic_hosts_keep_their_one_address():
    plan = generate("single_switch", hosts=3)
    app = build_app(_app(["h1", "h2"], ["x", "{addr:h3}", "{src_addr:h3}"]), 0, plan, "e.yaml")
    assert [r.argv[1:] for r in app.ranks] == [
        (str(plan.address_of("h3")), str(plan.address_of("h1"))),
        (str(plan.address_of("h3")), str(plan.address_of("h2")))]


def test_an_unknown_node_in_a_src_addr_placeholder_is_named():
    plan = generate("single_switch", hosts=2)
    with pytest.raises(SpecError) as info:
        build_app(_app(["h1"], ["x", "{src_addr:nope}"]), 3, plan, "e.yaml")
    (issue,) = info.value.issues
    assert tuple(issue.key_path) == ("workloads", 3, "command", 1)
    assert "{src_addr:nope}" in issue.message and "node h1" in issue.message
