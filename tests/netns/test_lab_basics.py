"""Bring-up, reachability, ECMP, readback and lifecycle of real labs on the host kernel."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import time

import pytest
from plans import ecmp_diamond, two_hosts_router, two_hosts_switch
from pyroute2 import IPRoute

from models.errors import CommandError, LabError
from models.shaping import Shaping
from models.units import BufferSize
from testbed.ns import netns, sysctl

pytestmark = pytest.mark.netns


def test_two_hosts_via_switch_ping(labs):
    with labs(two_hosts_switch()) as lab:
        out = lab.run("h1", ["ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.0.2"]).stdout
        assert " 0% packet loss" in out
        assert netns.exists(lab.netns_name("s1"))


def test_two_hosts_via_router_ping_and_forwarding(labs):
    with labs(two_hosts_router()) as lab:
        out = lab.run("h1", ["ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.2.1"]).stdout
        assert " 0% packet loss" in out
        assert sysctl.read(lab.node_io("r1").fd, "net.ipv4.ip_forward") == "1"
        assert sysctl.read(lab.node_io("h1").fd, "net.ipv4.ip_forward") == "0"


def test_ecmp_route_has_both_next_hops(labs):
    with labs(ecmp_diamond()) as lab:
        with IPRoute(netns=lab.netns_name("r1")) as ipr:  # independent read through pyroute2
            routes = ipr.get_routes(family=socket.AF_INET)  # a dump, not a lookup
            hops = [r for r in routes if r.get_attr("RTA_DST") == "198.18.9.0"]
            assert len(hops) == 1
            gws = sorted(h.get_attr("RTA_GATEWAY") for h in hops[0].get_attr("RTA_MULTIPATH"))
        assert gws == ["198.18.3.2", "198.18.4.2"]
        assert sysctl.read(lab.node_io("r1").fd, "net.ipv4.fib_multipath_hash_policy") == "1"
        assert " 0% packet loss" in lab.run("h1", ["ping", "-c", "2", "-i", "0.2", "-W", "2",
                                                   "198.18.9.1"]).stdout


def test_readback_detects_a_tampered_qdisc(labs):
    plan = two_hosts_router(Shaping(rate_bps=10**8, buffer=BufferSize(packets=100)))
    with labs(plan) as lab:
        lab.verify()  # untouched: no difference
        subprocess.run(["ip", "netns", "exec", lab.netns_name("h1"), "tc", "qdisc", "change",
                        "dev", "eth0", "parent", "9:1", "handle", "10:", "pfifo", "limit", "7"],
                       check=True)
        with pytest.raises(LabError, match=r"node h1: eth0 qdisc 10: pfifo: limit 7, planned 100"):
            lab.verify()


def test_run_raises_command_error_naming_node_and_argv(labs):
    with labs(two_hosts_switch()) as lab:
        with pytest.raises(CommandError, match=r"node h1: ping -c 1 -W 1 198.18.0.99"):
            lab.run("h1", ["ping", "-c", "1", "-W", "1", "198.18.0.99"])
        with pytest.raises(LabError, match="unknown node 'h9'; known: h1, h2, s1"):
            lab.run("h9", ["true"])


def test_popen_processes_are_ended_by_down(labs):
    lab = labs(two_hosts_switch())
    with lab:
        proc = lab.popen("h2", ["sleep", "300"])
    assert proc.poll() is not None  # ended (SIGTERM) and reaped by down()


def test_two_labs_side_by_side_do_not_interfere(labs):
    shaped = two_hosts_router(Shaping(rate_bps=10**7))
    with labs(shaped) as one, labs(two_hosts_router()) as two:
        assert one.run_id != two.run_id
        for lab in (one, two):  # same addresses, separate namespaces
            lab.run("h1", ["ping", "-c", "1", "-W", "2", "198.18.2.1"])
        one.set_shaping("h1-r1", "a_to_b", Shaping(rate_bps=5 * 10**6))
        two.verify()  # the other lab still has exactly its own (unshaped) state
        with IPRoute(netns=two.netns_name("h1")) as ipr:
            assert not [q for q in ipr.get_qdiscs() if q.get_attr("TCA_KIND") == "htb"]


def test_missing_netem_is_a_clear_error_and_nothing_is_created(labs):
    from testbed.host.kernel import missing_features

    if "netem" not in missing_features({"netem"}):
        pytest.skip("this kernel has netem")
    plan = two_hosts_router(Shaping(delay_s=0.01))  # asked for netem: auto would go native
    plan = dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, delay_line="netem")
                                                 for lk in plan.links))
    lab = labs(plan)
    with pytest.raises(LabError, match=r"lacks netem .*link\(s\) h1-r1.*aitb --vm"):
        lab.up()
    assert not lab.registry.dir.exists()


def _tentative_ipv6() -> list[str]:
    IFA_F_TENTATIVE = 0x40  # linux/if_addr.h
    with IPRoute() as ipr:
        return [a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(family=socket.AF_INET6)
                if (a.get_attr("IFA_FLAGS") or a["flags"]) & IFA_F_TENTATIVE]


def _ipv6_addresses() -> list[str]:
    with IPRoute() as ipr:
        return [a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(family=socket.AF_INET6)]


def test_an_ipv4_lab_has_ipv6_off_and_sends_none_unless_a_node_asks(labs, tmp_path):
    """An IPv4-only lab's namespaces have IPv6 off (testbed.ns.sysctl.node_sysctls), so no
    link-local start-up packet (DAD, MLD, router solicitation) shares the shaped queues with
    the experiment; a node's own sysctls turn it back on."""
    import dataclasses

    from scapy.all import IPv6, rdpcap

    on = {"net.ipv6.conf.all.disable_ipv6": "0", "net.ipv6.conf.default.disable_ipv6": "0"}
    plan = two_hosts_router()
    plan = dataclasses.replace(plan, nodes=tuple(
        dataclasses.replace(n, sysctls=on) if n.name == "h2" else n for n in plan.nodes))
    pcap = tmp_path / "r1-e1.pcap"
    with labs(plan) as lab:
        cap = lab.popen("r1", ["tcpdump", "-i", "e1", "-n", "-U", "-w", str(pcap)],
                        stderr=subprocess.PIPE, text=True)
        assert "listening" in cap.stderr.readline()
        for node in ("h1", "r1"):
            assert netns.run_in(lab.node_io(node).fd, _ipv6_addresses) == [], node
        assert any(a.startswith("fe80:") for a in
                   netns.run_in(lab.node_io("h2").fd, _ipv6_addresses))  # h2 asked for it
        # the link-local start-up packets come in a link's first seconds (a host's router
        # solicitations every 4 s after): 5 s of h1-r1 with both ends' IPv6 off carry none
        lab.run("h1", ["ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.2.1"])
        time.sleep(5)
        cap.terminate()
        cap.wait(timeout=10)
    packets = rdpcap(str(pcap))
    assert len(packets) >= 6  # the pings and their replies were captured
    assert [p.summary() for p in packets if IPv6 in p] == []


def test_dual_stack_router_forwards_ipv6(labs):
    import dataclasses
    import ipaddress as ip

    from models.plan import NextHop, Route

    plan = two_hosts_router()
    v6 = {("h1", "eth0"): "2001:db8:1::1/64", ("r1", "e1"): "2001:db8:1::2/64",
          ("h2", "eth0"): "2001:db8:2::1/64", ("r1", "e2"): "2001:db8:2::2/64"}
    links = tuple(dataclasses.replace(
        lk, a=dataclasses.replace(lk.a, ipv6=ip.IPv6Interface(v6[(lk.a.node, lk.a.ifname)])),
        b=dataclasses.replace(lk.b, ipv6=ip.IPv6Interface(v6[(lk.b.node, lk.b.ifname)])))
        for lk in plan.links)
    gw = {"h1": "2001:db8:1::2", "h2": "2001:db8:2::2"}
    nodes = tuple(dataclasses.replace(n, routes=n.routes + (Route(ip.ip_network("::/0"), (
        NextHop("eth0", ip.ip_address(gw[n.name])),)),)) if n.name in gw else n
        for n in plan.nodes)
    with labs(dataclasses.replace(plan, nodes=nodes, links=links)) as lab:
        assert sysctl.read(lab.node_io("r1").fd, "net.ipv6.conf.all.forwarding") == "1"
        # right after up(): no address is tentative, link-local ones included (a router whose
        # link-local address is tentative sends no neighbour solicitation for what it forwards)
        for node in ("h1", "r1", "h2"):
            assert netns.run_in(lab.node_io(node).fd, _tentative_ipv6) == [], node
        out = lab.run("h1", ["ping", "-6", "-c", "2", "-i", "0.2", "-W", "2",
                             "2001:db8:2::1"]).stdout
        assert " 0% packet loss" in out


def test_stp_switch_converges_before_up_returns(labs):
    with labs(two_hosts_switch(stp=True)) as lab:  # up() waits through listening/learning
        assert lab.timings["verify"] >= 3.5  # 2 x 2 s forward delay, the minimum with STP
        lab.run("h1", ["ping", "-c", "1", "-W", "2", "198.18.0.2"])
