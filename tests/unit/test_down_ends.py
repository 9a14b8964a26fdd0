"""Which veth end a link down sets down (testbed.live.faults.down_ends): the node_down's node, the
node with most of the change's links, end a on a tie; the other end, or both, where the peer
node would keep using a link without carrier (its sysctls turn ignore_routes_with_linkdown
off)."""

from __future__ import annotations

from types import SimpleNamespace

from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
from testbed.live.faults import down_ends


def _lab(**sysctls: dict[str, str]) -> SimpleNamespace:
    nodes = tuple(NodePlan(n, "router" if n.startswith("r") else "switch" if n == "s" else
                           "host", sysctls=sysctls.get(n, {}))
                  for n in ("h1", "r1", "r2", "r3", "s"))
    links = (LinkPlan("h1-r1", Endpoint("h1", "eth0"), Endpoint("r1", "e0")),
             LinkPlan("r1-r2", Endpoint("r1", "e1"), Endpoint("r2", "e1")),
             LinkPlan("r3-r1", Endpoint("r3", "e1"), Endpoint("r1", "e2")),
             LinkPlan("s-r2", Endpoint("s", "p1"), Endpoint("r2", "e2")))
    return SimpleNamespace(plan=LabPlan("t", nodes=nodes, links=links))


def _ends(lab, names, node=None) -> list[tuple[str, str]]:
    by = {lk.name: lk for lk in lab.plan.links}
    return [(ep.node, ep.ifname) for ep in down_ends(lab, [by[n] for n in names], node)]


def test_one_end_per_link_end_a_on_a_tie_else_the_node_with_most_of_the_links():
    lab = _lab()
    assert _ends(lab, ["h1-r1"]) == [("h1", "eth0")]
    assert _ends(lab, ["r3-r1"]) == [("r3", "e1")]
    assert _ends(lab, ["r1-r2", "r3-r1"]) == [("r1", "e1"), ("r1", "e2")]  # one node: r1
    assert _ends(lab, ["s-r2"]) == [("s", "p1")]  # a bridge port loses carrier: disabled


def test_a_node_down_sets_the_nodes_own_ends():
    lab = _lab()
    assert _ends(lab, ["h1-r1"], node="r1") == [("r1", "e0")]
    assert _ends(lab, ["r1-r2", "s-r2"], node="r2") == [("r2", "e1"), ("r2", "e2")]


def test_a_peer_that_keeps_using_a_link_without_carrier_gets_its_own_end_set_down():
    off = {"net.ipv4.conf.all.ignore_routes_with_linkdown": "0"}
    lab = _lab(r1=off)
    assert _ends(lab, ["h1-r1"]) == [("r1", "e0")]  # r1 would route into the dead link
    lab = _lab(h1=off, r1=off)
    assert _ends(lab, ["h1-r1"]) == [("h1", "eth0"), ("r1", "e0")]  # both
