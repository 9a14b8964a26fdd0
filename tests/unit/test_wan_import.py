"""Internet Topology Zoo maps (GraphML/GML) as topologies: delays from great-circle distances,
rates from LinkSpeedRaw, PoPs without coordinates and parallel links reported, bad files
refused naming file, node or edge and key; fabrics attached at PoPs."""

import math

import pytest
from topo_helpers import walk, walk_all
from typer.testing import CliRunner

from models.errors import SpecError
from orchestration.cli.app import app
from topologies import load_topology
from topologies.wan import Attachment, WanOptions, import_wan

KEYS = """
  <key attr.name="LinkSpeedRaw" attr.type="double" for="edge" id="d42" />
  <key attr.name="LinkLabel" attr.type="string" for="edge" id="d35" />
  <key attr.name="key" attr.type="int" for="edge" id="d38" />
  <key attr.name="label" attr.type="string" for="node" id="d33" />
  <key attr.name="Longitude" attr.type="double" for="node" id="d32" />
  <key attr.name="Latitude" attr.type="double" for="node" id="d29" />
  <key attr.name="label" attr.type="string" for="graph" id="d12" />"""


def _node(i, label, lat=None, lon=None):
    coords = "" if lat is None else (f'<data key="d29">{lat}</data>'
                                     f'<data key="d32">{lon}</data>')
    return f'<node id="{i}"><data key="d33">{label}</data>{coords}</node>'


def _edge(a, b, rate=None, key=0):
    r = "" if rate is None else f'<data key="d42">{rate}</data>'
    return f'<edge source="{a}" target="{b}">{r}<data key="d38">{key}</data></edge>'


def graphml(tmp_path, nodes, edges, name="m.graphml"):
    p = tmp_path / name
    p.write_text('<?xml version="1.0" encoding="utf-8"?><graphml '
                 'xmlns="http://graphml.graphdrawing.org/xmlns">' + KEYS
                 + '<graph edgedefault="undirected"><data key="d12">TestNet</data>'
                 + "".join(nodes) + "".join(edges) + "</graph></graphml>")
    return p


@pytest.fixture
def small(tmp_path):
    # A (0, 0) and B (0, 1): one degree of longitude on the equator; C without coordinates
    return graphml(tmp_path, [_node(0, "Alpha", 0.0, 0.0), _node(1, "Beta", 0.0, 1.0),
                              _node(2, "Gamma City")],
                   [_edge(0, 1, 2500000000.0), _edge(0, 1, None, 1), _edge(1, 2)])


def _links(res, a, b):
    return [lk for lk in res.topology["links"]
            if {e.split(":")[0] for e in lk["endpoints"]} == {a, b}]


def test_pops_become_routers_with_hosts_and_links_get_distance_delays(small):
    res = import_wan(small, WanOptions(stretch=1.5))
    kinds = {n: v["kind"] for n, v in res.topology["nodes"].items()}
    assert kinds == {"alpha": "router", "alpha-h1": "host", "beta": "router",
                     "beta-h1": "host", "gamma-city": "router", "gamma-city-h1": "host"}
    km = 6371.0 * math.radians(1.0)  # an arc of one degree on a great circle
    ab = _links(res, "alpha", "beta")
    assert [lk["delay"] for lk in ab] == [f"{round(km * 1.5 * 5)}us"] * 2  # 834 us
    assert ab[0]["rate"] == "2500mbit" and ab[1]["profile"] == "wan-default"
    assert "delay" not in _links(res, "beta", "gamma-city")[0]
    plan = res.plan
    one_way = [lk.a_to_b.delay_s for lk in plan.links if {lk.a.node, lk.b.node} ==
               {"alpha", "beta"}]
    assert one_way == [pytest.approx(834e-6)] * 2
    assert len(walk(plan, "alpha-h1", "beta-h1")) == 2  # both parallel links (ECMP)
    walk_all(plan)


def test_report_names_pops_without_coordinates_and_parallel_links(small):
    report = [i.message for i in import_wan(small, WanOptions(missing_delay_us=300)).report]
    assert any("'Gamma City'" in m and "no coordinates" in m and "300 us" in m for m in report)
    assert any("parallel link #2" in m and "'Alpha' -- 'Beta'" in m for m in report)
    res = import_wan(small, WanOptions(missing_delay_us=300))
    assert _links(res, "beta", "gamma-city")[0]["delay"] == "300us"


def test_no_delay_and_stretch_below_one(small):
    res = import_wan(small, WanOptions(delays=False))
    assert not any("delay" in lk for lk in res.topology["links"])
    with pytest.raises(SpecError, match="stretch 0.9 must be at least 1"):
        import_wan(small, WanOptions(stretch=0.9))


@pytest.mark.parametrize("node,edge,needle", [
    (_node(1, "Beta", "north", 1.0), "", "node '1': key 'Latitude' (double) has the "
                                         "non-numeric value 'north'"),
    (_node(1, "Beta", 0, 1), '<edge source="0" target="1"><data key="d42">fast</data></edge>',
     "edge '0' -- '1': key 'LinkSpeedRaw' (double) has the non-numeric value 'fast'"),
    ('<node id="1"><data key="d99">x</data></node>', "",
     "node '1': data key 'd99' has no <key> declaration"),
    (_node(1, "Beta", 95.0, 1.0), "", "node '1': key 'Latitude' = 95.0 is outside -90..90"),
])
def test_bad_graphml_names_file_item_and_key(tmp_path, node, edge, needle):
    p = graphml(tmp_path, [_node(0, "Alpha", 0, 0), node], [edge])
    with pytest.raises(SpecError) as exc:
        import_wan(p)
    assert needle in str(exc.value) and str(p) in str(exc.value)


@pytest.mark.parametrize("edge,end,pop", [
    (_edge(0, 7), "target", "7"),
    (_edge("ghost", 1), "source", "ghost"),
])
def test_an_edge_to_an_undefined_node_is_refused_naming_file_and_node(tmp_path, edge, end,
                                                                      pop):
    # networkx adds a bare node for it: the import used to make a PoP router of it, with no
    # name or coordinates, as if the map had one more PoP
    p = graphml(tmp_path, [_node(0, "Alpha", 0, 0), _node(1, "Beta", 0, 1)],
                [_edge(0, 1), edge])
    with pytest.raises(SpecError) as exc:
        import_wan(p)
    assert f"{end} node {pop!r} is not defined in the map" in str(exc.value)
    assert str(p) in str(exc.value)
    out = tmp_path / "never.yaml"
    res = CliRunner().invoke(app, ["topo", "import", str(p), "-o", str(out)])
    assert isinstance(res.exception, SpecError) and f"node {pop!r}" in str(res.exception)
    assert not out.exists()


def test_gml_edge_to_an_undefined_node_is_refused(tmp_path):
    p = tmp_path / "m.gml"
    p.write_text('graph [\n node [ id 0 label "Oslo" ]\n edge [ source 0 target 9 ]\n]\n')
    with pytest.raises(SpecError) as exc:
        import_wan(p)
    assert str(p) in str(exc.value) and "9" in str(exc.value)


def test_gml_map(tmp_path):
    p = tmp_path / "m.gml"
    p.write_text('graph [\n label "G"\n node [ id 0 label "Oslo" Latitude 59.91 Longitude 10.75 ]\n'
                 ' node [ id 1 label "Bergen" Latitude 60.39 Longitude 5.32 ]\n'
                 ' edge [ source 0 target 1 LinkSpeedRaw 1000000000 ]\n]\n')
    res = import_wan(p)
    (lk,) = _links(res, "oslo", "bergen")
    assert lk["rate"] == "1gbit" and 1500 <= int(lk["delay"].removesuffix("us")) <= 1550
    p.write_text('graph [\n node [ id 0 label "Oslo" Latitude "north" Longitude 10.75 ]\n]\n')
    with pytest.raises(SpecError, match="node '0': key 'Latitude' is not a number: 'north'"):
        import_wan(p)


def test_attach_a_fabric_and_edge_sites_at_pops(small):
    res = import_wan(small, WanOptions(attach=(
        Attachment("Alpha", "fat_tree", {"k": 4}), Attachment("beta", "edge_star", {"sites": 2}))))
    nodes = res.topology["nodes"]
    assert nodes["dc1-p1e1-h1"]["labels"] == {"site": "dc1", "pop": "Alpha"}
    up = {tuple(lk["endpoints"]) for lk in res.topology["links"] if lk["endpoints"][0] == "alpha"
          and lk["endpoints"][1].startswith("dc1-")}
    assert up == {("alpha", f"dc1-c{m}") for m in range(1, 5)}  # the core tier
    assert ("beta", "dc2-agg") in {tuple(lk["endpoints"]) for lk in res.topology["links"]}
    walk_all(res.plan, [("dc1-p1e1-h1", "dc2-site1"), ("dc2-site2", "gamma-city-h1")])
    with pytest.raises(SpecError, match="no PoP 'Delta'; PoPs: alpha, beta, gamma-city"):
        import_wan(small, WanOptions(attach=(Attachment("Delta", "ring"),)))
    with pytest.raises(SpecError, match="k=3 is odd"):
        import_wan(small, WanOptions(attach=(Attachment("Alpha", "fat_tree", {"k": 3}),)))


def test_a_switch_only_fabric_attaches_by_its_switch_and_pops_may_have_no_hosts(small):
    # a single-switch DC has no router: it used to be attached by nothing, so its hosts could
    # reach no other site and the import failed as unreachable
    res = import_wan(small, WanOptions(hosts_per_pop=0, attach=(
        Attachment("Alpha", "single_switch", {"hosts": 2}),
        Attachment("gamma city", "single_switch", {"hosts": 2}))))
    links = {tuple(lk["endpoints"]) for lk in res.topology["links"]}
    assert {("alpha", "dc1-s1"), ("gamma-city", "dc2-s1")} <= links
    assert [m for m, n in res.topology["nodes"].items() if n["kind"] == "host"] == \
        ["dc1-h1", "dc1-h2", "dc2-h1", "dc2-h2"]
    walk_all(res.plan, [("dc1-h1", "dc2-h2"), ("dc2-h1", "dc1-h2")])


def test_cli_import_writes_a_loadable_topology(small, tmp_path):
    out = tmp_path / "wan.yaml"
    res = CliRunner().invoke(app, ["topo", "import", str(small), "-o", str(out), "--no-delay",
                                   "--attach", "Alpha=leaf_spine:{spines: 2, leaves: 2, "
                                   "hosts_per_leaf: 1}"])
    assert res.exit_code == 0, res.output
    plan = load_topology(out)
    assert plan.node("dc1-l1-h1").kind == "host"
    walk_all(plan)


def test_cli_refuses_a_bad_map_and_writes_nothing(tmp_path):
    p = graphml(tmp_path, [_node(0, "A", "x", 0)], [])
    out = tmp_path / "never.yaml"
    res = CliRunner().invoke(app, ["topo", "import", str(p), "-o", str(out)])
    assert isinstance(res.exception, SpecError) and "key 'Latitude'" in str(res.exception)
    assert not out.exists()
    res = CliRunner().invoke(app, ["topo", "import", str(p), "--attach", "A"])
    assert isinstance(res.exception, SpecError)
    assert "use POP=GENERATOR" in str(res.exception)
