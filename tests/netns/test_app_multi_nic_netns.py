"""``kind: app`` on multi-NIC hosts on the host kernel: two GPUs of one rail-optimized server
(each with a rail NIC and an NVLink port to the NVSwitch) run an application whose client
connects to ``{addr:s1g1}`` from ``{src_addr:s1g1}``; the placeholders name the NVLink ports
(models.paths.peer_addresses), so the bytes cross the NVSwitch and not the rails (interface
counters), and the server sees the planned client address."""

from __future__ import annotations

import sys

import pytest
from pyroute2 import IPRoute

from models.paths import peer_addresses
from orchestration.apps.argv import build_app
from orchestration.apps.entries import AppEntry
from orchestration.apps.run import run_app
from topologies import generate

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

SIZE = 64 << 10
SERVER = ("import socket\n"
          "ls = socket.create_server(('0.0.0.0', 5601))\n"
          "s, peer = ls.accept()\n"
          "n = 0\n"
          "while (b := s.recv(65536)):\n"
          "    n += len(b)\n"
          "print(peer[0], s.getsockname()[0], n, flush=True)\n")
CLIENT = ("import socket, sys, time\n"
          "for _ in range(200):\n"
          "    try:\n"
          "        s = socket.create_connection((sys.argv[1], 5601), source_address="
          "(sys.argv[2], 0))\n"
          "        break\n"
          "    except ConnectionRefusedError:\n"
          "        time.sleep(0.05)\n"
          f"s.sendall(b'x' * {SIZE})\n"
          "s.close()\n")


def _tx(lab, node: str) -> dict[str, int]:
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        return {m.get_attr("IFLA_IFNAME"): m.get_attr("IFLA_STATS64")["tx_bytes"]
                for m in ipr.get_links()}


def _ifname(plan, node: str, peer: str) -> str:
    (lk,) = [lk for lk in plan.links_of(node) if peer in (lk.a.node, lk.b.node)]
    return lk.endpoint(node).ifname


def test_an_app_between_two_gpus_of_a_server_runs_over_the_nvswitch(labs, tmp_path):
    plan = generate("rail_optimized", servers=1, rails=2, spines=1)
    entry = AppEntry(kind="app", nodes=["s1g1", "s1g2"], timeout="60s",
                     command=["sh", "-c", f'if [ {{rank}} = 0 ]; then exec {sys.executable} '
                              f'-c "$0"; else exec {sys.executable} -c "$1" {{addr:s1g1}} '
                              '{src_addr:s1g1}; fi', SERVER, CLIENT])
    app = build_app(entry, 0, plan, "test")
    src_ip, dst_ip = peer_addresses(plan, ["s1g1", "s1g2"])[("s1g2", "s1g1")]
    with labs(plan) as lab:
        before = _tx(lab, "s1g2")
        res = run_app(lab, app, tmp_path / "w", tmp_path, lab.run_id)
        after = _tx(lab, "s1g2")
    assert res.ok, res.failures
    seen = (tmp_path / "w" / "logs" / "s1g1.log").read_text().split()
    assert seen == [src_ip, dst_ip, str(SIZE)]
    assert after[_ifname(plan, "s1g2", "s1nv")] - before[_ifname(plan, "s1g2", "s1nv")] >= SIZE
    assert after[_ifname(plan, "s1g2", "rail2")] - before[_ifname(plan, "s1g2", "rail2")] \
        < SIZE // 10
