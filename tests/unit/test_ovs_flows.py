"""aitb's OpenFlow rules for OVS switches (testbed.ovs.flows), against hand-derived tables."""

from __future__ import annotations

from pathlib import Path

from testbed.ovs.flows import MULTICAST, ovs_rules, port_numbers
from topologies import load_topology

TOPO = Path(__file__).resolve().parents[2] / "topologies/examples/ovs_leaf_spine.yaml"
MACS = {f"h{i}:eth0": f"02:00:00:00:00:0{i}" for i in range(1, 5)}


def _out(flows: tuple[str, ...], match: str) -> str:
    (flow,) = [f for f in flows if match in f]
    return flow.split("actions=")[1]


def test_leaf_reaches_remote_hosts_through_one_select_group_over_both_uplinks():
    plan = load_topology(TOPO)
    rules = ovs_rules(plan, MACS)
    ports = port_numbers(plan, "leaf1")  # eth0 -> spine1, eth1 -> spine2, eth2/3 -> h1/h2
    l4 = ("selection_method=hash,fields(ip_src,ip_dst,ipv6_src,ipv6_dst,nw_proto,tcp_src,"
          "tcp_dst,udp_src,udp_dst)")  # the example's ecmp_hash: l4
    assert rules["leaf1"].groups == (
        f"group_id=1,type=select,{l4},bucket=output:{ports['eth0']},"
        f"bucket=output:{ports['eth1']}",)
    assert _out(rules["leaf1"].flows, "dl_dst=02:00:00:00:00:03") == "group:1"
    assert _out(rules["leaf1"].flows, "dl_dst=02:00:00:00:00:01") == f"output:{ports['eth2']}"
    assert rules["spine1"].groups == ()  # one shortest path from a spine to any host
    assert _out(rules["spine2"].flows, "dl_dst=02:00:00:00:00:04") == "output:2"


def test_ecmp_hash_l3_hashes_the_addresses_only_and_is_the_default(tmp_path):
    text = TOPO.read_text().replace("fabric: {kind: switch, ecmp_hash: l4}",
                                    "fabric: {kind: switch}")
    assert text != TOPO.read_text()
    (tmp_path / "t.yaml").write_text(text)
    rules = ovs_rules(load_topology(tmp_path / "t.yaml"), MACS)
    assert rules["leaf1"].groups[0].startswith(
        "group_id=1,type=select,selection_method=hash,fields(ip_src,ip_dst,ipv6_src,ipv6_dst),"
        "bucket=")


def test_floods_follow_one_spanning_tree_so_the_fabric_loop_carries_no_storm():
    rules = ovs_rules(load_topology(TOPO), MACS)
    # BFS tree from leaf1: leaf1-spine1, leaf1-spine2, spine1-leaf2; leaf2-spine2 is cut
    assert _out(rules["leaf2"].flows, f"in_port=2,dl_dst={MULTICAST}") == "drop"
    assert _out(rules["leaf2"].flows, f"in_port=3,dl_dst={MULTICAST}") == "output:1,output:4"
    assert _out(rules["spine2"].flows, f"in_port=1,dl_dst={MULTICAST}") == "drop"
    tree_edges = sum(_out(r.flows, f"in_port=1,dl_dst={MULTICAST}") != "drop"
                     for r in rules.values())
    assert tree_edges == 3  # leaf1, leaf2 and spine1 forward floods from their port 1


def test_plan_flows_come_after_aitbs_and_unknown_unicast_is_dropped():
    plan = load_topology(TOPO)
    rules = ovs_rules(plan, MACS)
    assert rules["leaf1"].flows[-1] == "priority=0,actions=drop"
