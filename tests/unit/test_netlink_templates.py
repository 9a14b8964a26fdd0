"""Route messages built from one template per next-hop set, and readback's decoders that
decode each distinct dumped route or tc object once: byte for byte what pyroute2 gives."""

from __future__ import annotations

import ipaddress as ip
import struct

import pytest
from pyroute2.netlink.rtnl.rtmsg import rtmsg

import topologies
from testbed.lab.layout import make_layout
from testbed.lab.verify import BriefTc, _tc_brief, _tc_key
from testbed.ns import nl
from testbed.ns.nl import F_CREATE, Batch
from testbed.routing.routes import (
    RTM_NEWADDR,
    RTM_NEWROUTE,
    addr_msg,
    addr_template,
    dumped_route_key,
    dumped_routes,
    route_msg,
    route_template,
)
from testbed.tc.msgs import TcMsg


class _NoSocket:
    def setsockopt(self, *args: object) -> None:
        return None


def _leaf_spine():
    spec = topologies.parse_topology({"name": "t", "generator": {"name": "leaf_spine", "params": {
        "leaves": 4, "hosts_per_leaf": 2, "spines": 2}}}, "<t>")
    return topologies.resolve(spec, "<t>")


def _encoded(m, seq: int = 1) -> bytes:
    m["header"]["type"] = RTM_NEWROUTE
    m["header"]["flags"] = 0x5 | F_CREATE
    m["header"]["sequence_number"] = seq
    m.encode()
    return bytes(m.data)


@pytest.mark.parametrize("rto_min_s", [None, 0.05])
def test_templated_routes_are_the_messages_pyroute2_encodes(rto_min_s):
    plan = _leaf_spine()
    layout = make_layout(plan, "abc123")
    nl._CACHE.clear()
    for n in plan.nodes:
        batch = Batch(_NoSocket(), n.name)  # type: ignore[arg-type]
        for route in n.routes:
            key, build, patch = route_template(route, layout.nodes[n.name], rto_min_s)
            batch.add_cached(key, build, None, F_CREATE, "r", patch)
        want = [_encoded(route_msg(r, layout.nodes[n.name], rto_min_s), i + 1)
                for i, r in enumerate(n.routes)]
        assert [d for d, _ in batch.items] == want, n.name
    # the leaves' routes over the spines share templates: fewer encodings than routes
    assert len(nl._CACHE) < sum(len(n.routes) for n in plan.nodes)


def test_templated_ipv6_route_patches_all_sixteen_bytes():
    plan = _leaf_spine()
    layout = make_layout(plan, "abc123")
    n = next(n for n in plan.nodes if len(n.routes) > 1)
    base = n.routes[0]
    six = [type(base)(dst=ip.ip_network(f"2001:db8:{i}::/64"), nexthops=base.nexthops)
           for i in (1, 2)]
    six = [type(base)(dst=r.dst, nexthops=tuple(type(h)(ifname=h.ifname, via=None,
                                                       weight=h.weight) for h in r.nexthops))
           for r in six]
    batch = Batch(_NoSocket(), n.name)  # type: ignore[arg-type]
    for r in six:
        key, build, patch = route_template(r, layout.nodes[n.name])
        batch.add_cached(key, build, None, F_CREATE, "r", patch)
    assert [d for d, _ in batch.items] == [
        _encoded(route_msg(r, layout.nodes[n.name]), i + 1) for i, r in enumerate(six)]


def _dumped(m) -> bytes:
    """A route as the kernel dumps it: pyroute2's encoding plus attributes readback skips."""
    m["attrs"] = [*m["attrs"], ["RTA_TABLE", 254], ["RTA_PREF", 0]]
    return _encoded(m)


def test_dumped_routes_equal_pyroute2s_decoding_route_by_route():
    plan = _leaf_spine()
    layout = make_layout(plan, "abc123")
    for n in plan.nodes:
        raw = [_dumped(route_msg(r, layout.nodes[n.name], 0.2)) for r in n.routes]
        want = {}
        for data in raw:
            m = rtmsg(data)
            m.decode()
            dst, hops = dumped_route_key(m)
            want[dst] = (254, hops, 200)
        assert dumped_routes(raw) == want, n.name


def test_dumped_tc_objects_keep_their_own_kind_and_options():
    def qdisc(index: int, kind: str, options: bytes) -> bytes:
        attrs = b""
        for atype, value in ((1, kind.encode() + b"\0"), (2, options)):
            attrs += struct.pack("=HH", 4 + len(value), atype) + value
            attrs += b"\0" * (-len(value) % 4)
        body = struct.pack("=BxxxiIII", 0, index, 0x10000, 0xFFFFFFFF, 1) + attrs
        return struct.pack("=IHHII", 16 + len(body), 36, 2, 0, 0) + body

    memo: dict[bytes, object] = {}
    a, b, c = qdisc(3, "pfifo", struct.pack("=I", 100)), qdisc(4, "pfifo", struct.pack(
        "=I", 100)), qdisc(5, "pfifo", struct.pack("=I", 50))
    got = {_tc_key(d, "qdisc"): _tc_brief(d, memo) for d in (a, b, c)}
    assert set(got) == {(3, 0x10000, "qdisc"), (4, 0x10000, "qdisc"), (5, 0x10000, "qdisc")}
    assert got[(3, 0x10000, "qdisc")] is got[(4, 0x10000, "qdisc")]  # decoded once
    for d in (a, c):
        m = BriefTc(d)
        m.decode()
        mine = got[_tc_key(d, "qdisc")]
        assert (mine.get_attr("TCA_KIND"), mine.get_attr("TCA_OPTIONS")) == (
            m.get_attr("TCA_KIND"), m.get_attr("TCA_OPTIONS"))
    assert isinstance(got[(5, 0x10000, "qdisc")], TcMsg)


@pytest.mark.parametrize("iface", ["198.18.3.9/24", "198.18.3.200/24", "10.1.2.3/30",
                                   "2001:db8::7/64", "2001:db8:5::1/64"])
def test_templated_addresses_are_the_messages_pyroute2_encodes(iface):
    nl._CACHE.clear()
    batch = Batch(_NoSocket(), "n")  # type: ignore[arg-type]
    first = ip.ip_interface("198.18.3.1/24" if ":" not in iface else "2001:db8::1/64")
    for index, addr in ((4, first), (9, ip.ip_interface(iface))):
        key, build, patch = addr_template(addr)
        batch.add_cached(key, build, index, F_CREATE, "a", patch)
    m = addr_msg(9, ip.ip_interface(iface))
    m["header"]["type"], m["header"]["flags"] = RTM_NEWADDR, 0x5 | F_CREATE
    m["header"]["sequence_number"] = 2
    m.encode()
    assert batch.items[1][0] == bytes(m.data)


def test_link_states_read_what_pyroute2_decodes():
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

    from testbed.lab.verify import link_states
    from testbed.ns.links import link_state

    raw = []
    for index, name, master, alias, up in ((2, "eth0", 7, "aitb:run1", True),
                                           (3, "p12", None, None, False)):
        m = ifinfmsg()
        m["index"], m["flags"], m["change"] = index, 1 if up else 0, 1
        attrs = [["IFLA_ADDRESS", "02:00:00:00:00:01"], ["IFLA_IFNAME", name],
                 ["IFLA_TXQLEN", 1000], ["IFLA_MTU", 1500], ["IFLA_GSO_MAX_SEGS", 1],
                 ["IFLA_LINKINFO", {"attrs": [["IFLA_INFO_KIND", "veth"]]}]]
        attrs += [["IFLA_MASTER", master]] if master else []
        attrs += [["IFLA_IFALIAS", alias]] if alias else []
        m["attrs"] = attrs
        m["header"]["type"] = 16
        m.encode()
        raw.append(bytes(m.data))
    want = {}
    for data in raw:
        m = ifinfmsg(data)
        m.decode()
        want[m["index"]] = link_state(m)
    assert link_states(raw) == want
    assert want[2]["master"] == 7 and want[3]["alias"] is None and want[3]["up"] is False


def test_addresses_read_what_pyroute2_decodes():
    from testbed.lab.verify import addresses
    from testbed.routing.routes import addr_msg

    raw = []
    for index, iface in ((2, "198.18.0.1/24"), (3, "2001:db8::1/64"), (1, "10.9.0.1/32")):
        m = addr_msg(index, ip.ip_interface(iface))
        m["header"]["type"] = RTM_NEWADDR
        m.encode()
        raw.append(bytes(m.data))
    assert addresses(raw) == {(2, "198.18.0.1/24"), (3, "2001:db8::1/64"), (1, "10.9.0.1/32")}
