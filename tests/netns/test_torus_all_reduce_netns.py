"""The 2D-torus all-reduce on a real 3x3 torus: bytes on every router-to-router link, read
from the routers' interface counters, match the closed form (traffic_gen/algorithms/torus.py)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from pyroute2 import IPRoute
from traffic import assert_torus_link_bytes, torus_direction_payload

from models.records import FlowRecord
from models.schedule import Collective, Group, Schedule
from topologies import generate
from traffic_gen import ReplayOptions, replay
from traffic_gen.algorithms.torus import link_bytes_2d
from traffic_gen.jsonl import read_records
from traffic_gen.launch import LabLauncher

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]


def _tx(lab, node: str) -> dict[str, int]:
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        return {m.get_attr("IFLA_IFNAME"): m.get_attr("IFLA_STATS64")["tx_bytes"]
                for m in ipr.get_links()}


def test_torus_2d_all_reduce_bytes_per_link_from_counters(labs, tmp_path):
    x = y = 3
    size = 9 << 20
    plan = generate("torus", dims=[y, x])
    hosts = [h.name for h in plan.hosts()]  # row-major: rank r at row r // x, index r % x
    sched = Schedule("t2d", x * y, {"g": Group("g", "dp", tuple(range(x * y)))},
                     (Collective("all_reduce", "g", size, algorithm="torus_2d"),))
    sites = {h.name: h.labels["site"] for h in plan.hosts()}
    fabric = [(lk.a.node, lk.a.ifname, lk.b.node, lk.b.ifname) for lk in plan.links
              if "-h" not in lk.a.node and "-h" not in lk.b.node]
    routers = sorted({n for a, _, b, _ in fabric for n in (a, b)})
    with labs(plan) as lab:
        before = {r: _tx(lab, r) for r in routers}
        res = replay(sched, dict(enumerate(hosts)), LabLauncher(lab), tmp_path,
                     {h: str(plan.address_of(h)) for h in hosts}, ReplayOptions(sites=sites))
        assert res.ok, res.failures
        after = {r: _tx(lab, r) for r in routers}
    resent = defaultdict(int)
    for f in read_records(res.paths["flows"], FlowRecord):
        resent[(f.src_node, f.dst_node)] += f.tcp.bytes_retrans
    row_bytes, col_bytes = link_bytes_2d(x, y, size)
    pos = {f"t{a + 1}-{b + 1}": (a, b) for a in range(y) for b in range(x)}
    for a_node, a_if, b_node, b_if in fabric:
        for src, ifname, dst in ((a_node, a_if, b_node), (b_node, b_if, a_node)):
            payload = torus_direction_payload(pos[src], pos[dst], x, y, row_bytes, col_bytes)
            assert_torus_link_bytes(after[src][ifname] - before[src][ifname], payload,
                                    resent[(f"{src}-h1", f"{dst}-h1")], row_bytes, (src, dst))
