"""Per-router load balancing on ecmp_diamond (testbed/routing/load_balance.py): with ``flow``
one TCP
flow stays on one of r1's two next hops; with ``packet`` its packets cross both (the
counters of r1's e1 and e2 both grow by much of the flow); with ``flowlet`` a flow that goes
idle longer than the gap between bursts is re-picked (round robin over new flowlets, so the
second burst takes the other path) and one that pauses less keeps its path; spraying over
a slow and a fast path reorders (the receiver queues segments out of order); the rules and
tables are read back; and a sub-millisecond gap is refused before anything exists."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from plans import ecmp_diamond
from traffic import wait_listening

from models.errors import LabError
from models.shaping import Shaping
from testbed.counters import snapshot as countersnap
from testbed.routing import load_balance

pytestmark = pytest.mark.netns

PORT = 7100
SINK = ("import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
        f"socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', {PORT})); s.listen(8)\n"
        "while True:\n    c, _ = c_ = s.accept()\n    while c.recv(1 << 20):\n        pass\n"
        "    c.close()\n")
# one connection: bursts of argv[2] bytes separated by argv[3] seconds of silence; prints
# the sender's TCP_INFO (reordering, total_retrans)
SEND = ("import socket, sys, time, json\nfrom traffic_gen.tcpinfo import read_tcp_info\n"
        f"c = socket.create_connection((sys.argv[1], {PORT}))\n"
        "for i, n in enumerate(sys.argv[2].split(',')):\n"
        "    if i: time.sleep(float(sys.argv[3]))\n"
        "    c.sendall(b'x' * int(n))\n"
        "    while read_tcp_info(c)['unacked']: time.sleep(0.01)\n"
        "    print(json.dumps(read_tcp_info(c)), flush=True)\n"
        "c.close()\n")
BURST = 8_000_000


def _tx(lab) -> dict[str, int]:
    _, links = countersnap.snapshot(lab)
    return {r["ifname"]: r["tx_bytes"] for r in links if r["node"] == "r1"}


def _send(lab, bursts: list[int], gap_s: float) -> list[dict]:
    out = lab.run("h1", [sys.executable, "-c", SEND, "198.18.9.1", ",".join(map(str, bursts)),
                         str(gap_s)], timeout_s=120)
    return [json.loads(x) for x in out.stdout.splitlines()]


def _sink(lab) -> None:
    lab.popen("h2", [sys.executable, "-c", SINK], stdout=subprocess.DEVNULL,
              stderr=subprocess.DEVNULL)
    wait_listening(lab, "h2", PORT)


def _run(lab, nbytes: int) -> tuple[int, int]:
    """(bytes r1 sent on e1, on e2) while one connection to h2's sink sends ``nbytes``."""
    before = _tx(lab)
    infos = _send(lab, [nbytes], 0.0)
    after = _tx(lab)
    print("tcp_info", {k: infos[-1][k] for k in ("reordering", "reord_seen", "total_retrans")})
    return after["e1"] - before["e1"], after["e2"] - before["e2"]


OFO = ("import sys\nrows = [x.split() for x in open('/proc/self/net/netstat')]\n"
       "ext = [r for r in rows if r[0] == 'TcpExt:']\n"
       "print(dict(zip(ext[0], ext[1]))['TCPOFOQueue'])\n")


def _ofo(lab, node: str) -> int:
    """The TcpExt TCPOFOQueue counter of ``node``'s namespace: segments its TCP receivers
    queued because they arrived out of order."""
    return int(lab.run(node, [sys.executable, "-c", OFO]).stdout)


def test_spraying_over_unequal_paths_reorders_on_the_wire(labs):
    """r1 -> r2 at 20 Mbit/s, r1 -> r3 unshaped: round robin puts every other packet behind
    the slow path's queue, so h2's receiver queues segments out of order. The sender's
    counters (what the agents' records carry) are printed: the kernel takes such reordering
    as reordering (reord_seen) or as loss (retransmissions), depending on its extent."""
    with labs(ecmp_diamond("packet", r1_r2=Shaping(rate_bps=20_000_000))) as lab:
        _sink(lab)
        before = _ofo(lab, "h2")
        [info] = _send(lab, [2_000_000], 0.0)
        ofo = _ofo(lab, "h2") - before
    print("out-of-order at h2", ofo, {k: info[k] for k in ("reordering", "reord_seen",
                                                            "total_retrans")})
    assert ofo > 0


@pytest.mark.parametrize("policy", ["flow", "packet"])
def test_one_flow_one_path_with_flow_both_paths_with_packet(labs, policy):
    with labs(ecmp_diamond(policy)) as lab:
        _sink(lab)
        e1, e2 = _run(lab, BURST)
    print(policy, "r1 e1/e2 tx bytes", e1, e2)
    small, big = sorted((e1, e2))
    assert big > BURST / 2
    if policy == "flow":
        assert small < BURST / 20  # the other path carries (almost) nothing of the flow
    else:
        assert small > BURST / 5  # round robin: both carry a large share


def _bursts(lab, pause_s: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """Two bursts of one connection ``pause_s`` apart: bytes out of r1's e1 and e2 in each."""
    _sink(lab)
    t0 = _tx(lab)
    proc = lab.popen("h1", [sys.executable, "-u", "-c", SEND, "198.18.9.1",
                            f"{BURST},{BURST}", str(pause_s)],
                     stdout=subprocess.PIPE, text=True)
    first = json.loads(proc.stdout.readline())
    t1 = _tx(lab)
    second = json.loads(proc.stdout.readline())
    proc.wait(timeout=60)
    t2 = _tx(lab)
    b1 = (t1["e1"] - t0["e1"], t1["e2"] - t0["e2"])
    b2 = (t2["e1"] - t1["e1"], t2["e2"] - t1["e2"])
    print("flowlet bursts e1/e2", b1, b2, "retrans", first["total_retrans"],
          second["total_retrans"])
    return b1, b2


def test_flowlet_moves_a_flow_after_an_idle_gap(labs):
    """Two bursts of one connection 0.6 s apart with a 50 ms gap (sub-second: nftables set
    timeouts): each burst is one flowlet on one path, and the second flowlet is picked by the
    next round-robin turn: the other path."""
    with labs(ecmp_diamond("flowlet", 0.05)) as lab:
        b1, b2 = _bursts(lab, 0.6)
    path1 = 0 if b1[0] > b1[1] else 1
    assert b1[path1] > BURST / 2 and b1[1 - path1] < BURST / 20  # one flowlet, one path
    assert b2[1 - path1] > BURST / 2 and b2[path1] < BURST / 20  # the next one moved


def test_a_pause_shorter_than_the_gap_keeps_the_flowlet_on_its_path(labs):
    """The same two bursts 0.2 s apart under a 5 s gap: one flowlet, both bursts on one path
    (a re-pick would have taken the other: round robin)."""
    with labs(ecmp_diamond("flowlet", 5.0)) as lab:
        b1, b2 = _bursts(lab, 0.2)
    path1 = 0 if b1[0] > b1[1] else 1
    assert b1[path1] > BURST / 2 and b1[1 - path1] < BURST / 20
    assert b2[path1] > BURST / 2 and b2[1 - path1] < BURST / 20  # stayed


def test_sub_millisecond_flowlet_gap_is_refused_naming_node_and_key(labs):
    with pytest.raises(LabError, match=r"node r1: flowlet_gap 0.0005s cannot be realised"):
        with labs(ecmp_diamond("flowlet", 0.0005)):
            pass


def test_packet_spraying_survives_a_path_down_and_sprays_again_once_it_is_back(labs):
    """r1-r2 down: the packets marked for its table find no route there and fall through to
    the main table's (now single) next hop; up: faults.restore_routes re-adds that table's
    route, and the flow crosses both paths again."""
    with labs(ecmp_diamond("packet")) as lab:
        _sink(lab)
        lab.set_links(["r1-r2"], False)
        e1, e2 = _run(lab, BURST)
        assert e2 > BURST and e1 == 0
        lab.set_links(["r1-r2"], True)
        e1, e2 = _run(lab, BURST)
    assert min(e1, e2) > BURST / 5


def test_readback_finds_a_per_next_hop_route_that_went_missing(labs):
    """verify() reads the rules and tables back: fine after bring-up, and it names node,
    table and route once one is deleted behind the lab's back."""
    from testbed.ns.nl import Batch
    from testbed.routing.routes import RTM_NEWROUTE, route_msg
    with labs(ecmp_diamond("packet")) as lab:
        lab.verify()
        n = lab.plan.node("r1")
        table, route = load_balance.hop_routes(n, 4)[0]
        m = route_msg(route, lab.layout.nodes["r1"])
        m["table"] = table
        batch = Batch(lab.node_io("r1").sock, "node r1")
        batch.add(m, RTM_NEWROUTE + 1, 0, "delete")  # RTM_DELROUTE
        batch.commit()
        with pytest.raises(LabError, match=r"node r1: table 101 route 198.18.9.0/30 has next "
                                           r"hops \[\], planned"):
            lab.verify()
