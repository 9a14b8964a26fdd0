"""Links that fail and come back on the host kernel (testbed/live/faults.py): a host's static route
is gone after its link went down and up unless the lab restores it; a link goes down by one
veth end, and neither node forwards over it (the peer lost the carrier:
ignore_routes_with_linkdown); traffic over an ECMP route survives one path going down, by
set_links or by a bare far end set down; and every route is back, read back, when the path
returns.
The same as ``events:`` actions played by the scheduler (testbed/live/trace_player.py): a node
down and up and a flap, and a degrade of a native delay line that its duration undoes."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import time

import pytest
from plans import ecmp_diamond, two_hosts_router
from traffic import wait_listening

from models.events import EventAction
from models.shaping import Shaping
from testbed.live.trace_player import TracePlayer
from testbed.ns.links import IFF_UP, RTM_GETLINK, RTM_NEWLINK, updown_msg
from testbed.ns.nl import Batch, dump
from testbed.routing.routes import RTM_GETROUTE, dumped_route_key

pytestmark = pytest.mark.netns

PORT = 7000
# accept and close forever (ended by the lab's teardown, by pid)
SERVER = ("import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
          f"socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', {PORT})); s.listen(128)\n"
          "while True:\n    c, _ = s.accept(); c.close()\n")
# a connection from each of N source ports: each 5-tuple hashes onto an ECMP path
CLIENT = ("import socket, sys\nok = 0\nfor i in range(int(sys.argv[2])):\n"
          "    c = socket.socket(); c.settimeout(1.5)\n"
          "    c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "    c.bind(('0.0.0.0', 41000 + i))\n"
          f"    try:\n        c.connect((sys.argv[1], {PORT})); ok += 1\n"
          "    except OSError:\n        pass\n    c.close()\nprint(ok)\n")
N_CONNECTS = 24


def connects(lab, client: str, server_ip: str) -> int:
    """How many of N_CONNECTS TCP connections from distinct source ports got through."""
    out = lab.run(client, [sys.executable, "-c", CLIENT, server_ip, str(N_CONNECTS)],
                  timeout_s=N_CONNECTS * 2 + 20)
    return int(out.stdout.strip())


def serve(lab, node: str) -> None:
    lab.popen(node, [sys.executable, "-c", SERVER], stdout=subprocess.DEVNULL,
              stderr=subprocess.DEVNULL)
    wait_listening(lab, node, PORT)


def static_routes(lab, node: str) -> dict[str, frozenset]:
    from pyroute2.netlink.rtnl.rtmsg import rtmsg

    from testbed.ns.nl import dump
    req = rtmsg()
    req["family"], req["table"], req["proto"] = 2, 254, 4  # AF_INET, main, static
    return dict(dumped_route_key(m) for m in dump(lab.node_io(node).sock, req, RTM_GETROUTE,
                                                  node) if m["table"] == 254)


def raw_set(lab, node: str, ifname: str, up: bool) -> None:
    """One interface down or up by netlink, nothing else (what a bare `ip link set` does)."""
    batch = Batch(lab.node_io(node).sock, node)
    batch.add(updown_msg(lab.layout.node(node).ifindex(ifname), up), RTM_NEWLINK, 0, ifname)
    batch.commit()


IFF_LOWER_UP = 0x10000  # include/uapi/linux/if.h: the carrier


def link_flags(lab, node: str, ifname: str) -> tuple[bool, bool]:
    """(administratively up, carrier) of ``ifname`` of ``node``, dumped by netlink."""
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

    index = lab.layout.node(node).ifindex(ifname)
    (m,) = [m for m in dump(lab.node_io(node).sock, ifinfmsg(), RTM_GETLINK, node)
            if m["index"] == index]
    return bool(m["flags"] & IFF_UP), bool(m["flags"] & IFF_LOWER_UP)


def route_to(lab, node: str, ip: str) -> str | None:
    """The interface ``node``'s kernel would send a packet to ``ip`` through (a route
    lookup, RTM_GETROUTE), None when it has no usable route."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    with IPRoute(netns=lab.netns_name(node)) as ipr:
        try:
            (m,) = ipr.route("get", dst=ip)
        except NetlinkError:
            return None
        index = m.get_attr("RTA_OIF")
    return next(n for n, i in lab.layout.node(node).index.items() if i == index)


def eventually(check, within_s: float = 10.0) -> bool:
    """Whether ``check()`` holds within ``within_s`` (polled; for what the kernel does
    asynchronously)."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def ping(lab, node: str, ip: str) -> bool:
    proc = lab.popen(node, ["ping", "-c", "1", "-W", "2", ip], stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    return proc.wait(timeout=10) == 0


def test_a_host_route_lost_with_its_link_is_restored_and_read_back_on_up(labs):
    with labs(two_hosts_router()) as lab:
        assert ping(lab, "h1", "198.18.2.1")
        assert "0.0.0.0/0" in static_routes(lab, "h1")
        raw_set(lab, "h1", "eth0", False)
        raw_set(lab, "h1", "eth0", True)
        assert "0.0.0.0/0" not in static_routes(lab, "h1")  # the kernel deleted it for good
        assert not ping(lab, "h1", "198.18.2.1")  # Network is unreachable
        done = lab.set_links(["h1-r1"], False)
        assert done == {"links": ["h1-r1"]} and lab.down_links == {"h1-r1"}
        done = lab.set_links(["h1-r1"], True)
        assert done["routes"] == {"h1": ["0.0.0.0/0"], "r1": []}
        assert lab.down_links == set()
        assert "0.0.0.0/0" in static_routes(lab, "h1")
        assert ping(lab, "h1", "198.18.2.1")


@pytest.mark.parametrize("line", ["none", "native"])
def test_a_link_down_sets_one_end_down_and_neither_node_routes_over_it(labs, line):
    """r1-r2 down: r1's end (end a) set down, r2's loses the carrier; r1's routes through it
    go (the kernel's), r2's stay flagged linkdown and are skipped as soon as set_links
    returns: neither node has a usable route over the link. Up: both ends up, r2 routes over
    it again. The same with a native delay line on the link, which then runs through the wire
    namespace (two veths and a bridge): r2's end loses its carrier all the same."""
    plan = ecmp_diamond(r1_r2=Shaping(delay_s=0.002) if line == "native" else None)
    if line == "native":
        plan = dataclasses.replace(plan, links=tuple(
            dataclasses.replace(lk, delay_line="native") if lk.name == "r1-r2" else lk
            for lk in plan.links))
    with labs(plan) as lab:
        assert ("r1-r2" in lab.layout.wires) == (line == "native")
        assert route_to(lab, "r2", "198.18.8.1") == "e1"  # h1's subnet, only via r1
        done = lab.set_links(["r1-r2"], False)
        assert done == {"links": ["r1-r2"]} and lab.down_links == {"r1-r2"}
        assert link_flags(lab, "r1", "e1") == (False, False)
        assert link_flags(lab, "r2", "e1") == (True, False)  # up, without carrier
        assert len(static_routes(lab, "r1")["198.18.9.0/30"]) == 2  # multipath: hop dead
        assert route_to(lab, "r1", "198.18.3.2") is None  # r1's connected route went
        assert "198.18.8.0/30" in static_routes(lab, "r2")  # kept, flagged linkdown (the
        # carrier loss processed before set_links returned)...
        assert route_to(lab, "r2", "198.18.8.1") is None  # ...and skipped already
        assert route_to(lab, "r2", "198.18.3.1") is None
        lab.set_links(["r1-r2"], True)
        assert link_flags(lab, "r1", "e1") == (True, True)
        assert link_flags(lab, "r2", "e1") == (True, True)
        assert route_to(lab, "r2", "198.18.8.1") == "e1"


@pytest.mark.parametrize("how", ["set_links", "far_end_only"])
def test_ecmp_traffic_survives_one_path_down_and_uses_both_once_it_is_back(labs, how):
    with labs(ecmp_diamond()) as lab:
        serve(lab, "h2")
        assert connects(lab, "h1", "198.18.9.1") == N_CONNECTS
        if how == "set_links":  # node r2's links: its ends set down, r1 and r4 lose carrier
            lab.set_links(["r1-r2", "r2-r4"], False)
        else:  # only r2's ends: r1 and r4 lose the carrier (ignore_routes_with_linkdown)
            raw_set(lab, "r2", "e1", False)
            raw_set(lab, "r2", "e2", False)
            lab.down_links.update({"r1-r2", "r2-r4"})
        assert connects(lab, "h1", "198.18.9.1") == N_CONNECTS  # all over r3
        assert "198.18.9.0/30" not in static_routes(lab, "r2")  # r2's own routes are gone
        done = lab.set_links(["r1-r2", "r2-r4"], True)
        assert sorted(done["routes"]["r2"]) == ["198.18.8.0/30", "198.18.9.0/30"]
        assert len(static_routes(lab, "r1")["198.18.9.0/30"]) == 2
        assert connects(lab, "h1", "198.18.9.1") == N_CONNECTS


def test_a_prepared_link_up_sends_nothing_until_applied_and_restores_the_lab_as_it_is_then(
        labs):
    """prepare_links (what the scheduler does before an event's instant) changes nothing;
    its apply restores the routes for the links down at apply time, not at prepare time."""
    from models.errors import LabError

    with labs(ecmp_diamond()) as lab:
        dst = "198.18.9.0/30"
        with pytest.raises(LabError, match="no link 'r1-r9'"):
            lab.prepare_links(["r1-r2", "r1-r9"], False)
        lab.prepare_links(["r1-r2"], False)  # made ready, never applied
        assert lab.down_links == set() and len(static_routes(lab, "r1")[dst]) == 2
        lab.set_links(["r1-r2", "r1-r3"], False)
        assert dst not in static_routes(lab, "r1")  # no path left: the kernel deleted it
        up12 = lab.prepare_links(["r1-r2"], True)  # r1-r3 still down: one next hop
        assert dst not in static_routes(lab, "r1") and lab.down_links == {"r1-r2", "r1-r3"}
        lab.set_links(["r1-r3"], True)  # came back in between
        assert len(static_routes(lab, "r1")[dst]) == 1
        done = up12.apply()
        assert done["routes"]["r1"] == [dst] and lab.down_links == set()
        assert len(static_routes(lab, "r1")[dst]) == 2  # both paths, as the lab is now


def _records(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_events_node_down_up_and_a_flap_played_by_the_scheduler(labs, tmp_path):
    """node_down of r2, then (anchored by the test once it checked traffic over r3) node_up
    and a flap of r1-r3: every action applied and recorded, routes back, traffic on both."""
    r2_links = ("r1-r2", "r2-r4")
    events = [EventAction(0, "node_down", "down", 0.0, node="r2", links=r2_links),
              EventAction(1, "node_up", "up", 0.0, anchor="checked", node="r2",
                          links=r2_links),
              *(EventAction(2, "flap", op, t, anchor="checked", links=("r1-r3",), step=k)
                for k, (op, t) in enumerate([("down", 0.2), ("up", 0.4), ("down", 0.6),
                                             ("up", 0.8)]))]
    out = tmp_path / "events.jsonl"
    with labs(ecmp_diamond()) as lab:
        serve(lab, "h2")
        player = TracePlayer(lab, tmp_path / "link_trace.jsonl", events=events,
                             events_out=out, rt_priority=10)
        player.start()
        deadline = time.monotonic() + 30
        while not _records(out) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lab.down_links == set(r2_links)
        assert connects(lab, "h1", "198.18.9.1") == N_CONNECTS  # all over r3
        assert player.anchor("checked") == 5
        assert player.wait(30)
        player.stop()
        assert player.errors == [] and player.rt_error is None
        assert lab.down_links == set()
        assert len(static_routes(lab, "r1")["198.18.9.0/30"]) == 2
        assert connects(lab, "h1", "198.18.9.1") == N_CONNECTS
    recs = _records(out)
    assert [(r["kind"], r["op"], r["step"]) for r in recs] == [
        ("node_down", "down", 0), ("node_up", "up", 0), ("flap", "down", 0), ("flap", "up", 1),
        ("flap", "down", 2), ("flap", "up", 3)]
    assert all(r["applied_t_s"] >= r["planned_t_s"] and "error" not in r for r in recs)
    assert sorted(recs[1]["done"]["routes"]["r2"]) == ["198.18.8.0/30", "198.18.9.0/30"]
    flap_ups = [r for r in recs if r["kind"] == "flap" and r["op"] == "up"]
    # the routes through r1-r3: r1's ECMP route (whole again), r3's way back to h1
    assert all(r["done"]["routes"] == {"r1": ["198.18.9.0/30"], "r3": ["198.18.8.0/30"]}
               for r in flap_ups)


def _rtts_ms(text: str) -> list[tuple[float, float]]:
    """(arrival time, RTT ms) of every reply of ``ping -D``."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\[(\d+\.\d+)\].*time=([\d.]+) ms", line)
        if m:
            out.append((float(m.group(1)), float(m.group(2))))
    return out


def test_a_degrade_event_changes_the_native_delay_line_and_its_duration_restores_it(
        labs, tmp_path):
    plan = two_hosts_router(Shaping(rate_bps=100 * 10**6, delay_s=0.010))
    plan = dataclasses.replace(plan, links=(dataclasses.replace(plan.links[0],
                                                                delay_line="native"),
                                            *plan.links[1:]))
    pair = (("h1-r1", "a_to_b"),)
    events = [EventAction(0, "degrade", "shape", 1.0, directions=pair,
                          changes={"delay_s": 0.040}),
              EventAction(0, "degrade", "shape", 2.5, directions=pair, restore=True, step=1)]
    out = tmp_path / "events.jsonl"
    with labs(plan) as lab:
        ping = lab.popen("h1", ["ping", "-D", "-n", "-i", "0.1", "-c", "40", "198.18.2.1"],
                         stdout=subprocess.PIPE, text=True)
        player = TracePlayer(lab, tmp_path / "link_trace.jsonl", events=events,
                             events_out=out)
        player.check()
        t0 = player.start()
        replies = _rtts_ms(ping.communicate(timeout=60)[0])
        player.stop()
        assert lab.plan.links[0].a_to_b.delay_s == 0.010  # restored, plan.json too
    assert player.errors == []
    degrade, restore = _records(out)
    assert degrade["done"]["shaping"]["h1-r1 a_to_b"]["delay_s"] == 0.040
    assert restore["restore"] and restore["done"]["shaping"]["h1-r1 a_to_b"]["delay_s"] == 0.010
    # a reply arriving 50 ms after a change left after it; the line never releases early
    during = [rtt for t, rtt in replies
              if t0 + degrade["applied_t_s"] + 0.05 < t < t0 + restore["began_t_s"]]
    after = [rtt for t, rtt in replies if t > t0 + restore["applied_t_s"] + 0.05]
    before = [rtt for t, rtt in replies if t < t0 + degrade["began_t_s"]]
    assert before and during and after
    assert min(before) >= 10 and min(during) >= 40 and min(after) >= 10
    assert min(after) < 40  # back to the plan's delay


# datagrams to port 9 of argv[1] at ~argv[2] a second from 64 sockets (64 source ports: both
# DCIs get some); ended by the lab's teardown, by pid
UDP_STREAM = ("import socket, sys, time\nsocks = [socket.socket(socket.AF_INET, "
              "socket.SOCK_DGRAM) for _ in range(64)]\nk = 0\nwhile True:\n"
              "    try:\n        socks[k % 64].sendto(b'x' * 200, (sys.argv[1], 9))\n"
              "    except OSError:\n        pass\n    k += 1\n"
              "    time.sleep(1 / float(sys.argv[2]))\n")
ETH_P_ALL, SO_TIMESTAMPNS = 3, 35  # linux/if_ether.h, asm-generic/socket.h


def tap(lab, node: str, ifname: str):
    """An AF_PACKET socket on ``node``'s ``ifname``: a kernel-stamped copy of every frame the
    interface's driver is given (after the qdisc). Unlike a netlink read of its counters it
    leaves the kernel's link state alone."""
    import socket

    from testbed.ns.netns import run_in

    def make():
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind((ifname, 0))
        s.setblocking(False)
        return s
    return run_in(lab.node_io(node).fd, make)


def stream_sent(sock) -> list[float]:
    """Kernel stamps (s since the epoch) of the UDP stream's datagrams sent out since the
    last call (IPv4, UDP, destination port 9; outgoing frames only)."""
    import socket
    import struct
    out = []
    while True:
        try:
            data, anc, _, addr = sock.recvmsg(64, 256)
        except BlockingIOError:
            return out
        if (addr[2] == socket.PACKET_OUTGOING and data[12:14] == b"\x08\x00"
                and data[23] == 17 and data[36:38] == b"\x00\x09"):
            sec, nsec = struct.unpack("qq", anc[0][2][:16])
            out.append(sec + nsec * 1e-9)


def test_a_dci_down_is_sent_nothing_from_the_far_end_once_link_down_returns(labs):
    """examples/dci_failover.yaml's lab, a UDP stream from DC2 to DC1 over both DCIs: DCI 1
    goes down (DC1's end set down, DC2's losing the carrier). DC2's border router sends no
    datagram into it after set_links returned (the kernel's own down: its carrier loss was
    processed in the call, not by the linkwatch work up to a second later, for the two ends
    have the same ifindex: a non-urgent event), and the stream goes on over DCI 2."""
    from conftest import ROOT

    from orchestration.run.runner import prepare
    from testbed.live.faults import down_ends

    plan = prepare(ROOT / "examples" / "dci_failover.yaml").plan
    with labs(plan) as lab:
        dci = next(lk for lk in lab.plan.links if lk.name == "dc1-b1-dc2-b1")
        (down,) = down_ends(lab, [dci])
        far = dci.b if down is dci.a else dci.a
        other = next(lk for lk in lab.plan.links if lk.name == "dc1-b1-dc2-b1-2")
        far_other = other.endpoint(far.node)
        into, survivor = tap(lab, far.node, far.ifname), tap(lab, far.node, far_other.ifname)
        try:
            lab.popen("dc2-l1-h1", [sys.executable, "-c", UDP_STREAM,
                                    str(plan.address_of("dc1-l1-h1")), "5000"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert eventually(lambda: len(stream_sent(into)) > 10)  # the tap sees the stream
            lab.set_links([dci.name], False)
            returned = time.time()
            time.sleep(1.1)  # the linkwatch work waits up to a second for such an event
            late = [t - returned for t in stream_sent(into) if t > returned]
            assert late == [], f"{len(late)} datagrams sent into the DCI after it went down"
            assert [t for t in stream_sent(survivor) if t > returned]  # over DCI 2
            lab.set_links([dci.name], True)
            assert eventually(lambda: len(stream_sent(into)) > 10)  # used again
        finally:
            into.close()
            survivor.close()
