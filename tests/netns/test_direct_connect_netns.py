"""Direct-connect fabrics on the host kernel: hosts that forward (``forward: true``) are the
whole fabric. Every host reaches every other's node address; a flow between two hosts of a
mesh crosses exactly the hosts between them (their interface counters), and the 2D-torus
all-reduce on a torus of hosts puts its closed-form bytes on every host-to-host link."""

from __future__ import annotations

import sys
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

DATAGRAMS, PAYLOAD = 200, 1000
SEND = ("import socket, sys\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.bind((sys.argv[1], 0))\n"
        f"for _ in range({DATAGRAMS}):\n"
        f"    s.sendto(b'x' * {PAYLOAD}, (sys.argv[2], 9))\n")


def _tx(lab, node: str) -> dict[str, int]:
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        return {m.get_attr("IFLA_IFNAME"): m.get_attr("IFLA_STATS64")["tx_bytes"]
                for m in ipr.get_links()}


def _ifname_towards(plan, node: str, peer: str) -> str:
    (lk,) = [lk for lk in plan.links_of(node) if peer in (lk.a.node, lk.b.node)]
    return lk.endpoint(node).ifname


def test_direct_mesh_every_pair_reaches_and_a_flow_crosses_the_hosts_between(labs):
    plan = generate("torus", dims=[3, 3], wrap=False, direct=True)
    hosts = [h.name for h in plan.hosts()]
    addr = {h: str(plan.address_of(h)) for h in hosts}
    with labs(plan) as lab:
        for h in hosts:  # every host pings every other's node address from its own
            targets = " ".join(addr[o] for o in hosts if o != h)
            lab.run(h, ["sh", "-c", f"for a in {targets}; do ping -c 1 -W 2 -q -I {addr[h]} "
                                    "$a >/dev/null || { echo $a; exit 1; }; done"],
                    timeout_s=120)
        before = {h: _tx(lab, h) for h in hosts}
        lab.run("t1-1", [sys.executable, "-c", SEND, addr["t1-1"], addr["t1-3"]])
        after = {h: _tx(lab, h) for h in hosts}
    sent = {(h, i): after[h][i] - before[h][i] for h in hosts for i in after[h] if i != "lo"}
    flow = DATAGRAMS * PAYLOAD
    # the one shortest path t1-1 -> t1-2 -> t1-3 carries every datagram ...
    for src, dst in (("t1-1", "t1-2"), ("t1-2", "t1-3")):
        assert sent[(src, _ifname_towards(plan, src, dst))] >= flow, (src, dst, sent)
    # ... and no other interface does (at most stray neighbour/IPv6 control frames)
    path = {("t1-1", _ifname_towards(plan, "t1-1", "t1-2")),
            ("t1-2", _ifname_towards(plan, "t1-2", "t1-3"))}
    others = {k: v for k, v in sent.items() if k not in path}
    assert max(others.values()) < flow // 10, others


def test_torus_2d_all_reduce_on_a_torus_of_hosts_bytes_per_link(labs, tmp_path):
    x = y = 3
    size = 9 << 20
    plan = generate("torus", dims=[y, x], direct=True)
    hosts = [h.name for h in plan.hosts()]  # row-major: rank r at row r // x, index r % x
    sched = Schedule("t2d", x * y, {"g": Group("g", "dp", tuple(range(x * y)))},
                     (Collective("all_reduce", "g", size, algorithm="torus_2d"),))
    sites = {h.name: h.labels["site"] for h in plan.hosts()}
    with labs(plan) as lab:
        before = {h: _tx(lab, h) for h in hosts}
        res = replay(sched, dict(enumerate(hosts)), LabLauncher(lab), tmp_path,
                     {h: str(plan.address_of(h)) for h in hosts}, ReplayOptions(sites=sites))
        assert res.ok, res.failures
        after = {h: _tx(lab, h) for h in hosts}
    flows = list(read_records(res.paths["flows"], FlowRecord))
    node_ip = {str(plan.address_of(h)) for h in hosts}
    assert flows and all(f.src_ip in node_ip and f.dst_ip in node_ip for f in flows)
    resent = defaultdict(int)
    for f in flows:
        resent[(f.src_node, f.dst_node)] += f.tcp.bytes_retrans
    row_bytes, col_bytes = link_bytes_2d(x, y, size)
    pos = {f"t{a + 1}-{b + 1}": (a, b) for a in range(y) for b in range(x)}
    for lk in plan.links:
        for src, ifname, dst in ((lk.a.node, lk.a.ifname, lk.b.node),
                                 (lk.b.node, lk.b.ifname, lk.a.node)):
            payload = torus_direction_payload(pos[src], pos[dst], x, y, row_bytes, col_bytes)
            assert_torus_link_bytes(after[src][ifname] - before[src][ifname], payload,
                                    resent[(src, dst)], row_bytes, (src, dst))
