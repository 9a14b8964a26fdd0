"""Pure parts of the runtime (no root): layout, registry records, sysctls, tc messages."""

from __future__ import annotations

import dataclasses
import ipaddress as ip
import os
import sys
from pathlib import Path

import pytest

from models.errors import LabError
from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
from models.shaping import GilbertElliott, Shaping
from models.units import BufferSize
from testbed.lab.layout import FIRST_IFINDEX, make_layout
from testbed.lab.registry import Registry, pid_alive, pid_start_time
from testbed.ns.sysctl import RPS_DEFAULT_MASK, all_cpus_mask, lab_uses_ipv6, node_sysctls
from testbed.tc.msgs import TcMsg, handle, tc_message
from testbed.tc.qdiscs.common import pct_u32
from testbed.tc.recipe import direction_recipe

IF = ip.IPv4Interface


def _plan(shaping: Shaping | None = None):
    shaping = shaping or Shaping()
    return LabPlan("t", nodes=(NodePlan("h1", "host"), NodePlan("s1", "switch"),
                               NodePlan("h2", "host")),
                   links=(LinkPlan("a", Endpoint("h1", "eth0", IF("198.18.0.1/24")),
                                   Endpoint("s1", "p1"), b_to_a=shaping),
                          LinkPlan("b", Endpoint("h2", "eth0", IF("198.18.0.2/24")),
                                   Endpoint("s1", "p2"))))


def test_layout_indexes_and_ifb_names():
    lay = make_layout(_plan(Shaping(delay_s=0.01)), "abc123")
    assert lay.nodes["s1"].index == {"br0": FIRST_IFINDEX, "p1": 102, "p2": 103}
    assert lay.nodes["h1"].netns == "aitb-abc123-h1"
    r = lay.recipes[("a", "b_to_a")]  # s1 -> h1: delay line on h1's ingress
    assert (r.tx_node, r.rx_node, r.ifb) == ("s1", "h1", "ifb101")
    assert lay.nodes["h1"].index["ifb101"] == 10101
    with pytest.raises(LabError, match="unknown node 'x'; known: h1, h2, s1") as err:
        lay.node("x")
    assert err.value.exit_code == 2


def test_registry_records_survive_a_torn_line(tmp_path: Path):
    reg = Registry(tmp_path, "abc123")
    reg.create(_plan())
    reg.append([{"kind": "netns", "node": "h1", "name": "aitb-abc123-h1"}])
    with open(reg.path, "a") as f:
        f.write('{"kind": "netns", "no')  # crash in the middle of a write
    kinds = [r["kind"] for r in reg.records()]
    assert kinds == ["run", "netns"]
    assert reg.owner_alive()  # this process
    assert reg.plan().links[0].a.ifname == "eth0"
    reg.append([{"kind": "detached"}])
    assert not reg.owner_alive()
    with pytest.raises(LabError, match="already in use"):
        Registry(tmp_path, "abc123").create(_plan())
    with pytest.raises(LabError, match="run id"):
        Registry(tmp_path, "Bad/Id")


def test_pid_start_time_defeats_pid_reuse():
    me = pid_start_time(os.getpid())
    assert me is not None and pid_alive(os.getpid(), me)
    assert not pid_alive(os.getpid(), me + 1)


def test_node_sysctls():
    req, opt = node_sysctls(NodePlan("r", "router", ecmp_hash="l4",
                                     sysctls={"net.ipv4.tcp_ecn": "1"}), ipv6=True)
    assert req["net.ipv4.ip_forward"] == "1" and req["net.ipv6.conf.all.forwarding"] == "1"
    assert req["net.ipv4.fib_multipath_hash_policy"] == "1" and req["net.ipv4.tcp_ecn"] == "1"
    assert req["net.ipv6.conf.default.accept_dad"] == "0"
    # multipath next hops on a link without carrier are skipped; IPv6 addresses survive down
    assert req["net.ipv4.conf.all.ignore_routes_with_linkdown"] == "1"
    assert req["net.ipv6.conf.all.keep_addr_on_down"] == "1"
    req, opt = node_sysctls(NodePlan("s", "switch"), ipv6=False)
    assert not req and opt["net.bridge.bridge-nf-call-iptables"] == "0"
    assert opt[RPS_DEFAULT_MASK] == all_cpus_mask()  # every node, hosts and switches


def test_ipv4_only_labs_turn_ipv6_off_unless_a_node_turns_it_back_on():
    off = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
    for node in (NodePlan("h", "host"), NodePlan("r", "router"), NodePlan("s", "switch")):
        req, opt = node_sysctls(node, ipv6=False)
        assert off.items() <= opt.items() and not off.keys() & req.keys()  # optional
        req, opt = node_sysctls(node, ipv6=True)
        assert not off.keys() & (req.keys() | opt.keys())
    # optional ones are written first, required ones (the node's own last) win
    req, opt = node_sysctls(NodePlan("h", "host", sysctls={
        "net.ipv6.conf.all.disable_ipv6": "0"}), ipv6=False)
    assert req["net.ipv6.conf.all.disable_ipv6"] == "0"


def test_a_lab_uses_ipv6_for_an_address_a_loopback_or_unnumbered_bgp():
    from models.plan import Endpoint, FrrRouting, LinkPlan

    def plan(a=None, lo=None, routing=None):
        nodes = (NodePlan("r1", "host", forward=lo is not None, lo_ipv6=lo),
                 NodePlan("r2", "router"))
        link = LinkPlan("r1-r2", Endpoint("r1", "e1", ip.IPv4Interface("198.18.0.1/30"), a),
                        Endpoint("r2", "e1", ip.IPv4Interface("198.18.0.2/30")))
        return LabPlan("l", nodes=nodes, links=(link,), routing=routing)

    assert not lab_uses_ipv6(plan())
    assert not lab_uses_ipv6(plan(routing=FrrRouting(peering="numbered")))
    assert lab_uses_ipv6(plan(a=ip.IPv6Interface("2001:db8::1/64")))
    assert lab_uses_ipv6(plan(lo=ip.IPv6Interface("2001:db8:ff::1/128")))
    assert lab_uses_ipv6(plan(routing=FrrRouting(peering="unnumbered")))


def test_all_cpus_mask_in_32_bit_groups():
    assert all_cpus_mask(2) == "3"
    assert all_cpus_mask(32) == "ffffffff"
    assert all_cpus_mask(33) == "1,ffffffff"
    assert all_cpus_mask(72) == "ff,ffffffff,ffffffff"
    assert all_cpus_mask(2, without=0) == "2" and all_cpus_mask(33, without=32) == "ffffffff"


def test_a_line_cpu_takes_its_cpu_out_of_every_nodes_rps_mask_and_requires_it():
    for node in (NodePlan("s", "switch"), NodePlan("h", "host")):
        req, opt = node_sysctls(node, ipv6=False, line_cpu=1)
        # required: on a kernel without it the line's CPU would get receive work after all
        assert req[RPS_DEFAULT_MASK] == all_cpus_mask(without=1) and RPS_DEFAULT_MASK not in opt


def _roundtrip(obj, idx=7):
    msg, _ = tc_message(obj, lambda dev: idx)
    msg["header"]["type"] = 36
    msg.encode()
    back = TcMsg(msg.data)
    back.decode()
    return back


def test_htb_class_message_carries_400gbit_in_64_bits():
    r = direction_recipe(Shaping(rate_bps=400 * 10**9), 1500, ("a", "e"), ("b", "f"), "ifb1")
    opts = _roundtrip(r.egress[1]).get_attr("TCA_OPTIONS")
    assert opts.get_attr("TCA_HTB_RATE64") == 50_000_000_000  # bytes/s
    assert opts.get_attr("TCA_HTB_CEIL64") == 50_000_000_000
    assert opts.get_attr("TCA_HTB_PARMS")["buffer"] == 15625  # 1 ms in 64 ns ticks


def test_netem_message_fields():
    s = Shaping(delay_s=0.05, jitter_s=0.001, loss_gemodel=GilbertElliott(1, 20, 90, 0.5),
                duplicate_pct=2, rate_bps=10**9, buffer=BufferSize(packets=100))
    r = direction_recipe(s, 1500, ("a", "e"), ("b", "f"), "ifb1")
    opts = _roundtrip(r.ingress[0]).get_attr("TCA_OPTIONS")
    assert opts["limit"] == r.ingress[0].params["limit_packets"]
    assert opts["duplicate"] == pct_u32(2)
    assert opts.get_attr("TCA_NETEM_LATENCY64") == 50_000_000
    ge = opts.get_attr("TCA_NETEM_LOSS").get_attr("NETEM_LOSS_GE")
    assert ge["h"] == 0xFFFFFFFF - pct_u32(90) and ge["k1"] == pct_u32(0.5)


def test_handles():
    assert handle("1:") == 0x10000 and handle("1:1") == 0x10001 and handle("ffff:") == 0xFFFF0000
    assert handle("root") == 0xFFFFFFFF and handle("ingress") == 0xFFFFFFF1


if sys.platform != "linux":  # pragma: no cover
    pytest.skip("linux only", allow_module_level=True)


def test_wire_sized_packets_only_where_counts_matter():
    from testbed.lab.layout import needs_wire_packets

    assert not needs_wire_packets(_plan(Shaping(rate_bps=10**9)))
    assert not needs_wire_packets(_plan(Shaping(rate_bps=10**9, delay_s=0.01,
                                                buffer=BufferSize(size_bytes=10**6))))
    # a packet buffer counts wire-sized packets behind its segmenter, with GSO kept
    assert not needs_wire_packets(_plan(Shaping(rate_bps=10**9,
                                                buffer=BufferSize(packets=100))))
    assert needs_wire_packets(_plan(Shaping(rate_bps=10**9, aqm="fq_codel")))
    # ... except next to a smaller MTU (a few segments could fit one big frame) or spraying
    pkt = _plan(Shaping(rate_bps=10**9, buffer=BufferSize(packets=100)))
    bigger = dataclasses.replace(pkt.links[0], name="big", mtu=9000)
    assert needs_wire_packets(dataclasses.replace(pkt, links=(*pkt.links, bigger)))
    spray = (*pkt.nodes, NodePlan("r9", "router", load_balancing="packet"))
    assert needs_wire_packets(dataclasses.replace(pkt, nodes=spray))
    assert needs_wire_packets(_plan(Shaping(loss_pct=1)))
    assert make_layout(_plan(), "abc", wire_packets=True).wire_packets


def test_netem_encoding_survives_pyroute2_tcmsg_used_first():
    # pyroute2 marks a message class "compiled" with a class attribute that subclasses
    # inherit; in a fresh process, use pyroute2's own tcmsg first (as the capability probe
    # does), then check our TcMsg still encodes the 64-bit latency.
    code = """
from pyroute2.netlink.rtnl.tcmsg import tcmsg
m = tcmsg(); m['attrs'] = [['TCA_KIND', 'netem']]; m.encode()
d = tcmsg(m.data); d.decode()
import sys; sys.path.insert(0, 'tests/unit')
import test_runtime_pure as t
t.test_netem_message_fields()
print('ok')
"""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
