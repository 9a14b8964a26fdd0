"""The zoo's example topologies deploy on the host kernel; every host answers a ping from the
first host; each router's multipath routes are in its kernel as the plan has them.

The examples carry no delay (rate and buffer only: HTB, no netem needed)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pyroute2 import IPRoute

import topologies
from topologies import load_topology

pytestmark = [pytest.mark.netns, pytest.mark.timeout(600)]

EXAMPLES = Path(topologies.__file__).parent / "examples"
ZOO = ["fat_tree_k4", "leaf_spine_oversub", "rail_optimized", "torus_4x4", "mesh_3x3x2",
       "hypercube_d3", "dragonfly", "full_mesh", "ring", "random_waxman", "edge_tiers",
       "multi_dc_hub", "torus_direct_4x4", "hypercube_direct_d3"]


def _ecmp_router(plan):
    """A router (or forwarding host) and one of its plan routes with the most next hops."""
    best = max(((n, r) for n in plan.nodes if n.kind == "router" or n.forward
                for r in n.routes),
               key=lambda nr: len(nr[1].nexthops))
    return best


def _kernel_gateways(lab, node: str, dst) -> list[str]:
    with IPRoute(netns=lab.netns_name(node)) as ipr:  # an independent dump through pyroute2
        for r in ipr.get_routes(family=socket.AF_INET):
            if r.get_attr("RTA_DST") == str(dst.network_address) and \
                    r["dst_len"] == dst.prefixlen:
                hops = r.get_attr("RTA_MULTIPATH")
                if hops:
                    return sorted(h.get_attr("RTA_GATEWAY") for h in hops)
                return [r.get_attr("RTA_GATEWAY")]
    return []


@pytest.mark.parametrize("name", ZOO)
def test_zoo_example_deploys_and_every_host_answers(labs, name):
    plan = load_topology(EXAMPLES / f"{name}.yaml")
    hosts = [h.name for h in plan.hosts()]
    targets = " ".join(str(plan.address_of(h)) for h in hosts[1:])
    script = (f"for a in {targets}; do ping -c 1 -W 2 -q $a >/dev/null || "
              "{ echo $a; exit 1; }; done")
    with labs(plan) as lab:
        lab.run(hosts[0], ["sh", "-c", script], timeout_s=300)
        router, route = _ecmp_router(plan)
        want = sorted(str(h.via) for h in route.nexthops)
        assert _kernel_gateways(lab, router.name, route.dst) == want


MAP = """<?xml version="1.0" encoding="utf-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key attr.name="LinkSpeedRaw" attr.type="double" for="edge" id="s" />
  <key attr.name="label" attr.type="string" for="node" id="l" />
  <key attr.name="Longitude" attr.type="double" for="node" id="x" />
  <key attr.name="Latitude" attr.type="double" for="node" id="y" />
  <graph edgedefault="undirected">
    <node id="0"><data key="l">Amsterdam</data>
      <data key="y">52.37</data><data key="x">4.89</data></node>
    <node id="1"><data key="l">Brussels</data>
      <data key="y">50.85</data><data key="x">4.35</data></node>
    <node id="2"><data key="l">Paris</data>
      <data key="y">48.86</data><data key="x">2.35</data></node>
    <node id="3"><data key="l">Nowhere</data></node>
    <edge source="0" target="1"><data key="s">1000000000.0</data></edge>
    <edge source="0" target="1" />
    <edge source="1" target="2" />
    <edge source="2" target="0" />
    <edge source="2" target="3" />
  </graph>
</graphml>
"""


def test_imported_wan_map_with_a_dc_deploys_and_every_host_answers(labs, tmp_path):
    from topologies.wan import Attachment, WanOptions, import_wan

    path = tmp_path / "eu.graphml"
    path.write_text(MAP)
    plan = import_wan(path, WanOptions(delays=False, attach=(
        Attachment("Paris", "fat_tree", {"k": 2}),))).plan  # no delay: no delay line needed
    hosts = [h.name for h in plan.hosts()]
    targets = " ".join(str(plan.address_of(h)) for h in hosts[1:])
    script = (f"for a in {targets}; do ping -c 1 -W 2 -q $a >/dev/null || "
              "{ echo $a; exit 1; }; done")
    with labs(plan) as lab:
        lab.run(hosts[0], ["sh", "-c", script], timeout_s=300)
        router, route = _ecmp_router(plan)  # the parallel Amsterdam-Brussels links
        want = sorted(str(h.via) for h in route.nexthops)
        assert len(want) >= 2 and _kernel_gateways(lab, router.name, route.dst) == want
