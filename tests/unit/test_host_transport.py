"""Experiment transport knobs per host (rto_min, ecn): parsing, their place in the plan, and
the rtnetlink messages that carry rto_min."""

from __future__ import annotations

import ipaddress as ip
import socket
from pathlib import Path

import pytest
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from models.errors import SpecError
from models.plan import (
    Endpoint,
    LabPlan,
    LinkPlan,
    NextHop,
    NodePlan,
    Route,
    plan_from_dict,
    plan_to_dict,
)
from orchestration.run.experiment import parse_experiment
from orchestration.run.runner import prepare
from orchestration.run.transport import apply_host_transport, host_transport_record
from testbed.lab.layout import make_layout
from testbed.routing.routes import connected_route_msg, dumped_rto_min_ms, route_msg

EXAMPLES = Path(__file__).parents[2] / "examples"


def _spec(transport: dict):
    return parse_experiment({"name": "t", "topology": {"generator": "single_switch"},
                             "workloads": [{"kind": "incast", "receiver": "h1", "size": "1KiB"}],
                             "transport": transport}, "exp.yaml")


def test_rto_min_and_ecn_parse():
    t = _spec({"rto_min": "50ms", "ecn": "server"}).transport
    assert (t.rto_min, str(t.rto_min), t.ecn) == (0.05, "50ms", "server")
    assert _spec({"ecn": False}).transport.ecn is False
    assert _spec({}).transport.rto_min is None


@pytest.mark.parametrize(("transport", "key", "says"), [
    ({"rto_min": "0ms"}, "transport.rto_min", "1ms..120s"),
    ({"rto_min": "500us"}, "transport.rto_min", "1ms..120s"),
    ({"rto_min": "121s"}, "transport.rto_min", "1ms..120s"),
    ({"rto_min": 50}, "transport.rto_min", "unit"),
    ({"ecn": "yes"}, "transport.ecn", ""),
    ({"ecn": 1}, "transport.ecn", ""),
])
def test_bad_knobs_name_file_and_key(transport, key, says):
    with pytest.raises(SpecError) as exc:
        _spec(transport)
    text = str(exc.value)
    assert "exp.yaml" in text and key in text and says in text


def _plan() -> LabPlan:
    gw = ip.ip_address("198.18.1.2")
    return LabPlan("p", nodes=(
        NodePlan("h1", "host", routes=(Route(ip.ip_network("0.0.0.0/0"), (NextHop("eth0", gw),)),),
                 sysctls={"net.ipv4.tcp_ecn": "0", "net.ipv4.tcp_sack": "1"}),
        NodePlan("r1", "router")),
        links=(LinkPlan("l", Endpoint("h1", "eth0", ip.IPv4Interface("198.18.1.1/30")),
                        Endpoint("r1", "e1", ip.IPv4Interface("198.18.1.2/30"))),))


def test_knobs_go_to_hosts_only_and_survive_plan_json():
    plan = apply_host_transport(_plan(), _spec({"rto_min": "50ms", "ecn": True}).transport)
    h1, r1 = plan.node("h1"), plan.node("r1")
    assert h1.rto_min_s == pytest.approx(0.05)
    assert dict(h1.sysctls) == {"net.ipv4.tcp_ecn": "1", "net.ipv4.tcp_sack": "1"}
    assert (r1.rto_min_s, dict(r1.sysctls)) == (None, {})
    assert plan_from_dict(plan_to_dict(plan)) == plan
    assert host_transport_record(plan) == {
        "h1": {"rto_min_s": pytest.approx(0.05), "rto_min_ms": 50, "net.ipv4.tcp_ecn": "1"}}


def test_no_knobs_leave_the_plan_alone():
    plan = _plan()
    assert apply_host_transport(plan, _spec({}).transport) is plan


def test_prepare_puts_the_knobs_into_the_plan(tmp_path: Path):
    text = (EXAMPLES / "incast.yaml").read_text().replace(
        "topology: {file: ../topologies/", f"topology: {{file: {EXAMPLES.parent}/topologies/")
    exp = tmp_path / "incast.yaml"
    exp.write_text(text + "transport: {rto_min: 20ms, ecn: server}\n")
    prep = prepare(exp)
    assert {h.rto_min_s for h in prep.plan.hosts()} == {0.02}
    assert {h.sysctls["net.ipv4.tcp_ecn"] for h in prep.plan.hosts()} == {"2"}
    assert all(n.rto_min_s is None for n in prep.plan.nodes if n.kind != "host")


def _decoded(m) -> rtmsg:
    m["header"]["type"] = 24
    m.encode()
    back = rtmsg(m.data)
    back.decode()
    return back


def test_route_message_carries_a_locked_rto_min():
    plan = _plan()
    node = make_layout(plan, "abc123").nodes["h1"]
    back = _decoded(route_msg(plan.node("h1").routes[0], node, 0.05))
    metrics = back.get_attr("RTA_METRICS")
    assert (metrics.get_attr("RTAX_LOCK"), metrics.get_attr("RTAX_RTO_MIN")) == (1 << 13, 50)
    assert dumped_rto_min_ms(back) == 50
    assert _decoded(route_msg(plan.node("h1").routes[0], node)).get_attr("RTA_METRICS") is None


def test_connected_route_messages_match_the_kernels_own():
    v4 = _decoded(connected_route_msg(7, ip.IPv4Interface("198.18.1.1/30"), 0.2))
    assert (v4["family"], v4["dst_len"], v4["proto"], v4["scope"]) == (socket.AF_INET, 30, 2, 253)
    assert (v4.get_attr("RTA_DST"), v4.get_attr("RTA_PREFSRC"), v4.get_attr("RTA_OIF")) == (
        "198.18.1.0", "198.18.1.1", 7)
    assert dumped_rto_min_ms(v4) == 200
    v6 = _decoded(connected_route_msg(7, ip.IPv6Interface("2001:2::1/64"), 0.2))
    assert (v6["family"], v6["scope"], v6.get_attr("RTA_PRIORITY")) == (socket.AF_INET6, 0, 256)
    assert v6.get_attr("RTA_PREFSRC") is None
