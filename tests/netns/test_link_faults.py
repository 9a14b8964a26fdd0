"""Links that fail and come back on the host kernel (testbed/faults.py): a host's static route
is gone after its link went down and up unless the lab restores it; traffic over an ECMP route
survives one path going down, also when only the far end went down (carrier lost:
ignore_routes_with_linkdown); and every route is back, read back, when the path returns."""

from __future__ import annotations

import subprocess
import sys

import pytest
from plans import ecmp_diamond, two_hosts_router
from traffic import wait_listening

from testbed.links import RTM_NEWLINK, updown_msg
from testbed.nl import Batch
from testbed.routes import RTM_GETROUTE, dumped_route_key

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

    from testbed.nl import dump
    req = rtmsg()
    req["family"], req["table"], req["proto"] = 2, 254, 4  # AF_INET, main, static
    return dict(dumped_route_key(m) for m in dump(lab.node_io(node).sock, req, RTM_GETROUTE,
                                                  node) if m["table"] == 254)


def raw_set(lab, node: str, ifname: str, up: bool) -> None:
    """One interface down or up by netlink, nothing else (what a bare `ip link set` does)."""
    batch = Batch(lab.node_io(node).sock, node)
    batch.add(updown_msg(lab.layout.node(node).ifindex(ifname), up), RTM_NEWLINK, 0, ifname)
    batch.commit()


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


@pytest.mark.parametrize("how", ["both_ends", "far_end_only"])
def test_ecmp_traffic_survives_one_path_down_and_uses_both_once_it_is_back(labs, how):
    with labs(ecmp_diamond()) as lab:
        serve(lab, "h2")
        assert connects(lab, "h1", "198.18.9.1") == N_CONNECTS
        if how == "both_ends":  # node r2 down: r1 and r4 see their own ends go down
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
