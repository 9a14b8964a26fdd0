"""``routing: frr`` without root: the topology key and its checks (errors naming file and key,
before any lab exists), the plan's FrrRouting through plan.json, the daemons' configuration
rendered from the plan, and the refusal on a machine without the FRR daemons."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import topologies
from models.errors import LabError, SpecError
from models.plan import FrrRouting, plan_from_dict, plan_to_dict
from testbed.lab.lab import Lab
from testbed.routing import frr

TOPO = """
name: tiny-frr
{routing}
generator:
  name: multi_dc_leaf_spine
  params: {{n_dcs: 2, spines: 1, leaves: 1, hosts_per_leaf: 1, dci_links_per_pair: 2}}
"""


def _load(tmp_path: Path, routing: str, extra: str = ""):
    p = tmp_path / "topo.yaml"
    p.write_text(TOPO.format(routing=routing) + extra)
    return topologies.load_topology(p), str(p)


def test_routing_frr_word_means_every_default_and_static_means_none(tmp_path):
    plan, _ = _load(tmp_path, "routing: frr")
    assert plan.routing == FrrRouting()
    assert plan.routing.protocol == "bgp" and plan.routing.bfd is True
    assert _load(tmp_path, "routing: static")[0].routing is None
    assert _load(tmp_path, "")[0].routing is None


def test_mapping_sets_protocol_bfd_and_timers_with_units(tmp_path):
    plan, _ = _load(tmp_path, "routing: {kind: frr, protocol: ospf, bfd: false, "
                    "bfd_interval: 50ms, ospf_hello: 2s, ospf_dead: 8s, settle: 250ms}")
    r = plan.routing
    assert (r.protocol, r.bfd, r.bfd_interval_s, r.ospf_hello_s, r.ospf_dead_s, r.settle_s) == (
        "ospf", False, 0.05, 2, 8, 0.25)
    assert plan_from_dict(plan_to_dict(plan)).routing == r  # plan.json keeps it


@pytest.mark.parametrize(("routing", "key", "words"), [
    ("routing: {kind: frr, protocol: rip}", "protocol", "bgp"),
    ("routing: {kind: frr, bgp_keepalive: 1500ms}", "bgp_keepalive", "whole seconds"),
    ("routing: {kind: frr, bgp_keepalive: 3s, bgp_hold: 2s}", "bgp_hold", "RFC 4271"),
    ("routing: {kind: frr, bfd_interval: 5ms}", "bfd_interval", "[10ms, 60s]"),
    ("routing: {kind: frr, bfd_interval: 10500us}", "bfd_interval", "whole milliseconds"),
    ("routing: {kind: frr, ospf_hello: 4s, ospf_dead: 4s}", "ospf_dead", "> ospf_hello"),
    ("routing: {kind: frr, bfd_interval: fast}", "bfd_interval", "unit"),
    ("routing: {kind: frr, bfd_multiplier: 1}", "bfd_multiplier", "[2, 255]"),
    ("routing: {kind: frr, timer: 1s}", "timer", "unknown key"),
    ("routing: bird", "routing", ""),
])
def test_bad_routing_is_refused_naming_file_and_key(tmp_path, routing, key, words):
    with pytest.raises(SpecError) as err:
        _load(tmp_path, routing)
    text = str(err.value)
    assert str(tmp_path / "topo.yaml") in text and "routing" in text and key in text
    assert words.lower() in text.lower(), text


def test_frr_refuses_ipv6_addressing(tmp_path):
    with pytest.raises(SpecError, match=r"routing: frr routes IPv4 only"):
        _load(tmp_path, "routing: frr", "addressing: {ipv6: true}\n")


def test_bgp_configs_have_one_asn_per_router_and_a_session_per_router_link(tmp_path):
    plan, _ = _load(tmp_path, "routing: frr")
    configs = frr.router_configs(plan, "r0")
    routers = [n.name for n in plan.nodes if n.kind == "router"]
    assert set(configs) == set(routers)
    asns = {r: int(re.search(r"router bgp (\d+)", c["bgpd"]).group(1)) for r, c in configs.items()}
    assert len(set(asns.values())) == len(routers)
    assert all(frr.ASN_BASE <= a < frr.ASN_BASE + len(routers) for a in asns.values())
    for r, c in configs.items():
        assert set(c) == {"zebra", "bfdd", "bgpd"}
        router_links = [lk for lk in plan.links_of(r)
                        if plan.node(lk.a.node).kind == plan.node(lk.b.node).kind == "router"]
        remote = re.findall(r"neighbor (\S+) remote-as (\d+)", c["bgpd"])
        assert len(remote) == len(router_links)
        for lk in router_links:  # numbered: the other end's address, the other end's ASN
            other = lk.b if lk.a.node == r else lk.a
            assert (str(other.ipv4.ip), str(asns[other.node])) in remote
            assert f"neighbor {other.ipv4.ip} bfd profile aitb" in c["bgpd"]
        assert "maximum-paths 64" in c["bgpd"] and "redistribute connected" in c["bgpd"]
        assert "transmit-interval 100" in c["bfdd"] and "detect-multiplier 3" in c["bfdd"]
    border = configs["dc1-b1"]["bgpd"]
    assert len(re.findall(r"remote-as " + str(asns["dc2-b1"]), border)) == 2  # both DCIs


def test_ospf_without_bfd_is_passive_towards_hosts(tmp_path):
    plan, _ = _load(tmp_path, "routing: {kind: frr, protocol: ospf, bfd: false}")
    c = frr.router_configs(plan, "r0")["dc1-l1"]
    assert set(c) == {"zebra", "ospfd"} and "bfd" not in c["ospfd"]
    blocks = {b.split("\n", 1)[0]: b for b in c["ospfd"].split("interface ")[1:]}
    host_if = next(lk.endpoint("dc1-l1").ifname for lk in plan.links_of("dc1-l1")
                   if plan.node(lk.a.node).kind == "host")
    assert "ip ospf passive" in blocks[host_if]
    assert all("point-to-point" in b for i, b in blocks.items() if i != host_if)


def test_a_machine_without_the_daemons_refuses_before_anything_exists(tmp_path, monkeypatch):
    plan, source = _load(tmp_path, "routing: frr")
    monkeypatch.setattr(frr, "DAEMON_DIR", tmp_path / "no-frr")
    lab = Lab(plan, "abc123", tmp_path / "state")
    with pytest.raises(LabError) as err:
        lab.up()
    assert source in str(err.value) and "routing: frr" in str(err.value)
    assert "no-frr/bgpd" in str(err.value) and "frr package" in str(err.value)
    assert not (tmp_path / "state").exists()


def test_unnumbered_bgp_peers_by_interface(tmp_path):
    plan, _ = _load(tmp_path, "routing: {kind: frr, peering: unnumbered}")
    assert plan.routing.peering == "unnumbered"
    c = frr.router_configs(plan, "r0")["dc1-b1"]["bgpd"]
    ifs = [lk.endpoint("dc1-b1").ifname for lk in plan.links_of("dc1-b1")]
    for i in ifs:
        assert f"neighbor {i} interface remote-as external" in c
        assert f"neighbor {i} bfd profile aitb" in c
    assert "remote-as 42" not in c
    with pytest.raises(SpecError, match="peering"):
        _load(tmp_path, "routing: {kind: frr, peering: sideways}")
