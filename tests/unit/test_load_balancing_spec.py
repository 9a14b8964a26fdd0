"""load_balancing / flowlet_gap: parsed from topology files (node, group, defaults, top level,
generators), checked with file, key and line, carried into the plan and plan.json, and the
rules and refusals of testbed/routing/load_balance.py (pure builders, no root)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from topo_helpers import find_issue, issues, load

from models.plan import PlanError, plan_from_dict, plan_to_dict
from testbed.routing import load_balance

sys.path.insert(0, str(Path(__file__).parents[1] / "netns"))
from plans import ecmp_diamond  # noqa: E402

BODY = ("links:\n  - endpoints: [x, r]\n  - endpoints: [h, r]\n  - endpoints: [h2, x]\n")


def topo(node: str, top: str = "") -> str:
    return (f"name: t\n{top}nodes:\n  x: {node}\n  h: {{kind: host}}\n  h2: {{kind: host}}\n"
            "  r: {kind: router}\n" + BODY)


@pytest.mark.parametrize("node,top,key,needle", [
    ("{kind: router, load_balancing: spray}", "", "nodes.x.load_balancing",
     "'flow', 'packet' or 'flowlet'"),
    ("{kind: switch, load_balancing: packet}", "", "nodes.x.load_balancing",
     "not to a Linux-bridge switch"),
    ("{kind: switch, ecmp_hash: l4}", "", "nodes.x.ecmp_hash", "not to a Linux-bridge switch"),
    ("{kind: switch, datapath: ovs, load_balancing: packet}", "", "nodes.x.load_balancing",
     "load_balancing packet cannot be realised on an OVS switch: its select groups pick a port "
     "by a hash"),
    ("{kind: switch, datapath: ovs, load_balancing: flowlet, flowlet_gap: 1s}", "",
     "nodes.x.load_balancing", "OVS has no per-packet or round-robin choice"),
    ("{kind: router, load_balancing: flowlet}", "", "nodes.x.load_balancing",
     "needs flowlet_gap"),
    ("{kind: router, flowlet_gap: 1s}", "", "nodes.x.flowlet_gap",
     "needs load_balancing: flowlet"),
    ("{kind: router, flowlet_gap: 1s}", "load_balancing: packet\n", "nodes.x.flowlet_gap",
     "(it is packet)"),
    ("{kind: router, load_balancing: flowlet, flowlet_gap: 0s}", "", "nodes.x.flowlet_gap",
     "must be a duration > 0"),
    ("{kind: router, load_balancing: flowlet, flowlet_gap: 5}", "", "nodes.x.flowlet_gap",
     "no unit"),
    ("{kind: router, load_balancing: flowlet, flowlet_gap: 500us}", "", "nodes.x.flowlet_gap",
     "flowlet_gap 0.0005s cannot be realised: flowlets time out in nftables sets"),
    ("{kind: router, load_balancing: flowlet, flowlet_gap: 1500us}", "", "nodes.x.flowlet_gap",
     "whole milliseconds"),
    ("{kind: router, load_balancing: flowlet}", "flowlet_gap: 500us\n", "flowlet_gap",
     "cannot be realised"),
    ("{kind: router, load_balancing: flowlet, flowlet_gap: 5 parsecs}", "",
     "nodes.x.flowlet_gap", ""),
    ("{kind: router}", "load_balancing: hash\n", "load_balancing", "'flow', 'packet'"),
])
def test_bad_values_name_file_key_and_line(tmp_path, node, top, key, needle):
    found = find_issue(issues(tmp_path, topo(node, top)), key, needle)
    line = 2 if key in ("load_balancing", "flowlet_gap") else 3 + top.count("\n")
    assert found.line == line and found.file.endswith("lab.yaml"), str(found)
    assert f"lab.yaml:{line}" in str(found)


def test_an_ovs_switch_takes_flow_and_its_ecmp_hash(tmp_path):
    plan = load(tmp_path, topo("{kind: switch, datapath: ovs, load_balancing: flow, "
                               "ecmp_hash: l4}"))
    assert (plan.node("x").load_balancing, plan.node("x").ecmp_hash) == ("flow", "l4")


def test_precedence_node_group_defaults_top_level(tmp_path):
    plan = load(tmp_path, """\
        name: t
        load_balancing: packet
        flowlet_gap: 2s
        defaults: {router: {}}
        groups: {g: {kind: router, load_balancing: flowlet}}
        nodes:
          r1: {kind: router}
          r2: {group: g}
          r3: {group: g, load_balancing: flow}
          r4: {kind: router, load_balancing: flowlet, flowlet_gap: 1500ms}
          h1: {kind: host}
          h2: {kind: host}
        links:
          - endpoints: [h1, r1]
          - endpoints: [r1, r2]
          - endpoints: [r2, r3]
          - endpoints: [r3, r4]
          - endpoints: [r4, h2]
        """)
    got = {n.name: (n.load_balancing, n.flowlet_gap_s) for n in plan.nodes}
    assert got == {"r1": ("packet", None), "r2": ("flowlet", 2.0), "r3": ("flow", None),
                   "r4": ("flowlet", 1.5), "h1": ("flow", None), "h2": ("flow", None)}
    again = plan_from_dict(plan_to_dict(plan))  # plan.json
    assert again == plan


def test_top_level_key_reaches_generated_routers(tmp_path):
    plan = load(tmp_path, "name: t\nload_balancing: packet\ngenerator:\n  name: leaf_spine\n"
                          "  params: {spines: 4, leaves: 2, hosts_per_leaf: 1}\n")
    assert {n.name: n.load_balancing for n in plan.nodes if n.kind == "router"} == {
        "s1": "packet", "s2": "packet", "s3": "packet", "s4": "packet", "l1": "packet",
        "l2": "packet"}
    assert {n.load_balancing for n in plan.hosts()} == {"flow"}


def test_plan_refuses_bad_values():
    plan = ecmp_diamond()
    r1 = plan.node("r1")
    for bad, needle in [(dict(load_balancing="spray"), "load_balancing 'spray' is not one of"),
                        (dict(load_balancing="flowlet"), "flowlet_gap_s None must be"),
                        (dict(flowlet_gap_s=1.0), "flowlet_gap_s 1.0 must be")]:
        nodes = tuple(dataclasses.replace(r1, **bad) if n is r1 else n for n in plan.nodes)
        with pytest.raises(PlanError, match=needle):
            dataclasses.replace(plan, nodes=nodes)


def test_packet_rules_one_nth_rule_per_next_hop_owner_marked():
    r1 = ecmp_diamond("packet").node("r1")
    assert load_balance.next_hops(r1, 4) == [("e1", "198.18.3.2"), ("e2", "198.18.4.2")]
    assert [(t, str(r.dst), r.nexthops[0].ifname) for t, r in load_balance.hop_routes(r1, 4)
            ] == [(101, "198.18.9.0/30", "e1"), (102, "198.18.9.0/30", "e2")]
    text = load_balance.restore_text(r1, 4, "run1")
    assert text.splitlines() == [
        "*mangle", ":aitb-lb4-0 - [0:0]",
        "-A PREROUTING -d 198.18.9.0/30 -m comment --comment aitb:run1 -j aitb-lb4-0",
        "-A OUTPUT -d 198.18.9.0/30 -m comment --comment aitb:run1 -j aitb-lb4-0",
        "-A aitb-lb4-0 -m statistic --mode nth --every 2 --packet 0 -m comment --comment "
        "aitb:run1 -j MARK --set-xmark 0x10000/0xff0000",
        "-A aitb-lb4-0 -m statistic --mode nth --every 2 --packet 1 -m comment --comment "
        "aitb:run1 -j MARK --set-xmark 0x20000/0xff0000",
        "COMMIT"]
    assert load_balance.restore_text(r1, 6, "run1") == ""  # no IPv6 routes
    assert load_balance.restore_text(ecmp_diamond().node("r1"), 4, "run1") == ""  # flow
    assert load_balance.restore_text(ecmp_diamond("packet").node("r2"), 4, "run1") == ""
    m = load_balance.rule_msg(4, 2)
    assert (m.get_attr("FRA_FWMARK"), m.get_attr("FRA_FWMASK"), m.get_attr("FRA_TABLE")) == (
        0x20000, 0xFF0000, 102)


def test_flowlet_rules_keep_each_next_hops_flows_in_a_set_timing_out_after_the_gap():
    r1 = ecmp_diamond("flowlet", 0.05).node("r1")
    assert load_balance.restore_text(r1, 4, "r") == ""  # no iptables rules for flowlets
    text = load_balance.nft_text(r1, "r")
    lines = [x.strip() for x in text.splitlines()]
    assert lines[:2] == ["table inet aitb_lb {", 'comment "aitb:r"']
    key = "ip saddr . ip daddr . meta l4proto . th sport . th dport"
    for k, mark in ((0, "0x10000"), (1, "0x20000")):  # one set per next hop, gap 50 ms
        assert (f"set fl4_0_{k} {{ type ipv4_addr . ipv4_addr . inet_proto . inet_service . "
                "inet_service; flags dynamic,timeout; timeout 50ms; }") in lines
        # a flow found in next hop k's set keeps k and restarts its timeout
        assert f"{key} @fl4_0_{k} meta mark set {mark} update @fl4_0_{k} {{ {key} }} return" \
            in lines
        # a new flowlet's pick joins k's set
        assert f"meta mark set {mark} update @fl4_0_{k} {{ {key} }}" in lines
    assert "numgen inc mod 2 vmap { 0 : jump lb4_0_0, 1 : jump lb4_0_1 }" in lines
    assert lines.count("ip daddr 198.18.9.0/30 meta l4proto { tcp, udp } jump lb4_0") == 2
    assert load_balance.nft_text(ecmp_diamond("packet").node("r1"), "r") == ""
    assert load_balance.nft_text(ecmp_diamond("flowlet", 0.05).node("r2"), "r") == ""


@pytest.mark.parametrize("gap_s,refused", [(0.0005, True), (0.0015, True), (0.0, True),
                                           (0.001, False), (0.05, False), (2.0, False)])
def test_gaps_nftables_cannot_time_are_refused_naming_node_and_key(gap_s, refused):
    plan = ecmp_diamond("flowlet", gap_s or 1.0)
    if not gap_s:  # 0 cannot even be planned (PlanError); problems() sees a tiny gap instead
        plan = ecmp_diamond("flowlet", 1e-7)
        gap_s = 1e-7
    found = load_balance.problems(plan)
    if refused:
        assert len(found) == 2 and found[0].startswith(f"node r1: flowlet_gap {gap_s:g}s "
                                                       "cannot be realised")
        assert found[1].startswith("node r4: flowlet_gap")
    else:
        assert found == []


def test_flowlets_without_nft_are_refused_naming_node(monkeypatch):
    monkeypatch.setattr(load_balance.shutil, "which", lambda _name: None)
    found = load_balance.problems(ecmp_diamond("flowlet", 0.05))
    assert found[0] == ("node r1: load_balancing flowlet needs nftables' nft program, which is "
                        "not installed (sudo make setup installs it)")
    assert load_balance.problems(ecmp_diamond("packet")) == []


def test_transfer_records_carry_the_reordering_events_of_their_transfer():
    """tcpi_reord_seen is a counter: a record holds its difference, like the retransmissions;
    records written before the field existed read as 0."""
    from models.records import TcpInfo
    from traffic_gen.tcpinfo import TCP_INFO_FIELDS, tcp_info_delta
    before = dict.fromkeys(TCP_INFO_FIELDS, 0) | {"reord_seen": 4, "total_retrans": 1}
    after = before | {"reord_seen": 11, "total_retrans": 9, "bytes_sent": 100}
    got = tcp_info_delta(before, after)
    assert (got.reord_seen, got.total_retrans) == (7, 8)
    old = {k: v for k, v in got.to_dict().items() if k != "reord_seen"}
    assert TcpInfo.from_dict(old).reord_seen == 0
