"""ALTO network and cost maps of a plan (models.alto): RFC 7285 shapes and costs checked against
hand-computed values of topologies/examples/two_dc.yaml; no root, no network."""

from __future__ import annotations

from pathlib import Path

import pytest

import topologies
from models.alto import (
    COST_METRICS,
    alto_maps,
    costs_of,
    network_map,
    pid_of_address,
    pids_of_plan,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_dc():
    return topologies.load_topology(ROOT / "topologies/examples/two_dc.yaml")


def test_network_map_has_rfc7285_shape_and_every_host_address(two_dc):
    maps = alto_maps(two_dc)
    nmap = maps.network_map
    assert set(nmap["network-map"]) == {"dc1", "dc2"}
    vtag = nmap["meta"]["vtag"]
    assert vtag["resource-id"] == "networkmap" and len(vtag["tag"]) == 64
    for h in two_dc.hosts():
        addr = str(two_dc.address_of(h.name))
        assert f"{addr}/32" in nmap["network-map"][maps.pids[h.name]]["ipv4"]
        assert pid_of_address(nmap, addr) == h.name.split("-")[0]
    assert pid_of_address(nmap, "192.0.2.1") is None  # TEST-NET-1: in no PID


def test_vtag_changes_with_the_map(two_dc):
    site = network_map(two_dc, pids_of_plan(two_dc, "site"))["meta"]["vtag"]["tag"]
    rack = network_map(two_dc, pids_of_plan(two_dc, "rack"))["meta"]["vtag"]["tag"]
    again = network_map(two_dc, pids_of_plan(two_dc, "site"))["meta"]["vtag"]["tag"]
    assert site == again and site != rack


def test_cost_maps_match_hand_computed_costs(two_dc):
    maps = alto_maps(two_dc)
    assert set(maps.cost_maps) == set(COST_METRICS)
    for metric, doc in maps.cost_maps.items():
        assert doc["meta"]["cost-type"] == {"cost-mode": "numerical", "cost-metric": metric}
        assert doc["meta"]["dependent-vtags"] == [maps.network_map["meta"]["vtag"]]
    hops = costs_of(maps.cost_maps["hopcount"])
    # inside a DC, worst pair on different leaves: host, leaf, spine, leaf = 4 IP hops;
    # across: host, leaf, spine, border, border, spine, leaf = 7
    assert hops[("dc1", "dc1")] == 4 and hops[("dc1", "dc2")] == 7
    delay = costs_of(maps.cost_maps["delay-ow"])
    assert delay[("dc1", "dc2")] == pytest.approx(0.5) and delay[("dc1", "dc1")] == 0
    bw = costs_of(maps.cost_maps["bw-available"])
    assert bw[("dc1", "dc2")] == pytest.approx(10e6)  # 10 Gbit/s in kbit/s
    rc = costs_of(maps.cost_maps["routingcost"])
    # 10 Gbit/s links cost 100G/10G = 10 each: 4 links inside, 7 across
    assert rc[("dc1", "dc1")] == 40 and rc[("dc2", "dc1")] == 70


def test_rack_pids_are_the_leaves(two_dc):
    pids = pids_of_plan(two_dc, "rack")
    assert set(pids.values()) == {"dc1-l1", "dc1-l2", "dc2-l1", "dc2-l2"}
    hops = costs_of(alto_maps(two_dc, "rack").cost_maps["hopcount"])
    assert hops[("dc1-l1", "dc1-l1")] == 2 and hops[("dc1-l1", "dc1-l2")] == 4


def test_unknown_metric_and_grouping_are_refused(two_dc):
    with pytest.raises(ValueError, match="known: hopcount"):
        alto_maps(two_dc, metrics=["latency"])
    with pytest.raises(ValueError, match="known: site, rack"):
        pids_of_plan(two_dc, "row")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="numerical"):
        costs_of({"meta": {"cost-type": {"cost-mode": "ordinal"}}, "cost-map": {}})


def test_run_directory_gets_the_maps_and_an_index(two_dc, tmp_path):
    import json

    from orchestration.alto.files import write_alto

    write_alto(tmp_path, two_dc)
    names = sorted(p.name for p in (tmp_path / "alto").iterdir())
    assert names == ["costmap-bw-available.json", "costmap-delay-ow.json",
                     "costmap-hopcount.json", "costmap-routingcost.json", "index.json",
                     "networkmap.json"]
    index = json.loads((tmp_path / "alto/index.json").read_text())
    assert index["resources"]["networkmap.json"]["media-type"] == \
        "application/alto-networkmap+json"
    assert index["resources"]["costmap-hopcount.json"]["cost-type"]["cost-metric"] == "hopcount"
    assert index["pids"]["dc2-l1-h1"] == "dc2"
    doc = json.loads((tmp_path / "alto/costmap-hopcount.json").read_text())
    assert costs_of(doc)[("dc2", "dc1")] == 7


def test_server_directory_names_every_document(two_dc, tmp_path):
    from orchestration.alto.files import write_alto
    from testbed.apps.alto_server import directory

    write_alto(tmp_path, two_dc)
    ird = directory(tmp_path / "alto", "http://198.18.0.1:8181")
    res = ird["resources"]
    assert res["networkmap"] == {"uri": "http://198.18.0.1:8181/networkmap",
                                 "media-type": "application/alto-networkmap+json"}
    assert res["costmap-delay-ow"]["uri"] == "http://198.18.0.1:8181/costmap/delay-ow"
    assert res["costmap-delay-ow"]["uses"] == ["networkmap"]
    assert ird["meta"]["cost-types"]["num-hopcount"] == {"cost-mode": "numerical",
                                                         "cost-metric": "hopcount"}


def test_serving_from_an_unknown_node_is_refused_before_anything_exists(tmp_path):
    from models.errors import SpecError
    from orchestration.run.runner import prepare

    text = (ROOT / "examples/alto_serve.yaml").read_text().replace(
        "node: dc1-l1-h1", "node: dc9-l1-h1")
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace("examples/alto_client.py", "x.py"))
    with pytest.raises(SpecError, match="alto.node 'dc9-l1-h1' is not a node"):
        prepare(path)


def _dci_hop(plan):
    from models.paths import PathWalker

    path = PathWalker(plan).paths("dc1-l1-h1", str(plan.address_of("dc2-l1-h1")))[0]
    (hop,) = [h for h in path if h.ifname.startswith("dci")]
    return hop


def test_live_costs_take_the_measured_use_off_the_configured_ones(two_dc):
    from models.alto import LinkUse, host_paths, live_cost_map

    maps = alto_maps(two_dc)
    vtag = maps.network_map["meta"]["vtag"]
    paths = host_paths(two_dc, maps.pids)
    hop = _dci_hop(two_dc)
    rate = hop.shaping.rate_bps
    # 7 Gbit/s measured on dc1's DCI direction, and 1 MB queued in front of it
    usage = {(hop.node, hop.ifname): LinkUse(7e9, 1e6)}
    bw = costs_of(live_cost_map(two_dc, maps.pids, "bw-available", vtag, usage, paths))
    assert bw[("dc1", "dc2")] == pytest.approx((rate - 7e9) / 1e3)  # 3 Gbit/s left
    assert bw[("dc2", "dc1")] == pytest.approx(rate / 1e3)  # the other direction is idle
    delay = costs_of(live_cost_map(two_dc, maps.pids, "delay-ow", vtag, usage, paths))
    assert delay[("dc1", "dc2")] == pytest.approx(0.5 + 1e6 * 8 / rate * 1e3)  # + 0.8 ms
    assert delay[("dc2", "dc1")] == pytest.approx(0.5)
    # more than the rate measured (HTB's burst): nothing available, never negative; a
    # direction without a measurement yet keeps its configured rate
    over = {(hop.node, hop.ifname): LinkUse(rate * 1.01)}
    assert costs_of(live_cost_map(two_dc, maps.pids, "bw-available", vtag, over, paths))[
        ("dc1", "dc2")] == 0
    unmeasured = {(hop.node, hop.ifname): LinkUse(None)}
    assert costs_of(live_cost_map(two_dc, maps.pids, "bw-available", vtag, unmeasured))[
        ("dc1", "dc2")] == pytest.approx(rate / 1e3)
    with pytest.raises(ValueError, match="no live cost for 'hopcount'"):
        live_cost_map(two_dc, maps.pids, "hopcount", vtag, usage, paths)


def test_the_sampler_snapshot_gives_rates_over_its_window(tmp_path):
    import json

    from orchestration.alto.live import usage_of
    from testbed.counters.live import LiveRates

    live = LiveRates(tmp_path / "live.json", 0.5)
    link = lambda t, tx: (t, 0.0, "b1", "dci-dc2-1", 0, tx, 0, 0, 0, 0)  # noqa: E731
    qdisc = lambda t, parent, backlog: (t, 0.0, "b1", "dci-dc2-1", "htb", "1:", parent,  # noqa: E731
                                        0, 0, 0, 0, 0, backlog, 0)
    live.add([link(10.0, 1000)], [qdisc(10.0, "root", 0)])
    assert live.due(10.0)
    live.write(10.0)
    first = json.loads((tmp_path / "live.json").read_text())
    assert first["interfaces"]["b1 dci-dc2-1"]["tx_bps"] is None  # no window yet
    assert not live.due(10.2)
    # 1.25 MB in 0.5 s = 20 Mbit/s; backlog: the larger of root and leaf per sample, averaged
    live.add([link(10.25, 600_000)], [qdisc(10.25, "root", 3000), qdisc(10.25, "1:1", 1000)])
    live.add([link(10.5, 1_251_000)], [qdisc(10.5, "root", 5000)])
    assert live.due(10.5)
    live.write(10.5)
    snap = json.loads((tmp_path / "live.json").read_text())
    assert (snap["seq"], snap["t_s"], snap["window_s"]) == (1, 10.5, 0.5)
    use = usage_of(snap)[("b1", "dci-dc2-1")]
    assert use.tx_bps == pytest.approx(20e6) and use.backlog_bytes == 4000


def test_live_maps_without_counters_are_refused_naming_the_key(tmp_path):
    from models.errors import SpecError
    from orchestration.run.runner import prepare

    text = (ROOT / "examples/alto_live.yaml").read_text() + "counters: {enabled: false}\n"
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=r"alto\.live.*enable counters"):
        prepare(path)
