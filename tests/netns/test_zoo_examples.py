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
       "multi_dc_hub"]


def _ecmp_router(plan):
    """A router and one of its plan routes with the most next hops."""
    best = max(((n, r) for n in plan.nodes if n.kind == "router" for r in n.routes),
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
