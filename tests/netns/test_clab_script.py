"""The exported containerlab script, run for real: namespaces named and wired as containerlab
would (``<prefix><node>``, one veth per link with the file's interface names and MTU), then
the script; read back the qdiscs, ping across switch and router, and count packets in the
shaped classes. Needs root; rate and buffer only (no netem on the host kernel)."""

from __future__ import annotations

import os
import secrets
import subprocess
import textwrap
from pathlib import Path

import pytest
from pyroute2 import NetNS, netns
from ruamel.yaml import YAML

from orchestration.cli.commands.clab import export_files
from topologies import load_topology

pytestmark = pytest.mark.netns

TOPOLOGY = """\
    name: clabtest
    nodes:
      h1: {kind: host}
      h2: {kind: host}
      s1: {kind: switch}
      r1: {kind: router}
      h3: {kind: host}
    links:
      - {endpoints: [h1, s1], rate: 100Mbit, buffer: 50p}
      - {endpoints: [h2, s1]}
      - {endpoints: [s1, r1], rate: 1Gbit}
      - {endpoints: [r1, h3], rate: 200Mbit, mtu: 9000}
"""


def _ns_of(prefix: str) -> list[str]:
    return [n for n in netns.listnetns() if n.startswith(prefix)]


def _wire(prefix: str, clab: dict) -> None:
    """What containerlab does for brief links: a veth per link, ends named as in the file."""
    for node in clab["topology"]["nodes"]:
        netns.create(prefix + node)
    for link in clab["topology"]["links"]:
        (a, a_if), (b, b_if) = (e.split(":") for e in link["endpoints"])
        with NetNS(prefix + a) as ns:
            ns.link("add", ifname=a_if, kind="veth", mtu=link["mtu"],
                    peer={"ifname": b_if, "net_ns_fd": prefix + b, "mtu": link["mtu"]})


def _qdiscs(prefix: str, node: str) -> set[tuple[str, str]]:
    with NetNS(prefix + node) as ns:
        names = {m["index"]: m.get_attr("IFLA_IFNAME") for m in ns.get_links()}
        return {(names[q["index"]], q.get_attr("TCA_KIND")) for q in ns.get_qdiscs()
                if q.get_attr("TCA_KIND") in ("htb", "pfifo", "bfifo")}


def _class_packets(prefix: str, node: str, dev: str) -> int:
    with NetNS(prefix + node) as ns:
        index = ns.link_lookup(ifname=dev)[0]
        classes = [c for c in ns.get_classes(index=index) if c["handle"] == 0x10001]
        return classes[0].get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")["packets"]


@pytest.fixture
def prefix():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    value = f"aitbclab-{secrets.token_hex(3)}-"  # this test's own mark, like a run id
    yield value
    for name in _ns_of(value):
        netns.remove(name)
    assert _ns_of(value) == []


def test_script_builds_the_lab_inside_containerlab_namespaces(tmp_path: Path, prefix: str):
    src = tmp_path / "lab.yaml"
    src.write_text(textwrap.dedent(TOPOLOGY))
    plan = load_topology(src)
    topo, script = export_files(plan, tmp_path / "out", "img", keep_kinds=False)
    clab = YAML(typ="safe").load(topo.read_text())
    _wire(prefix, clab)
    env = {**os.environ, "CLAB_NETNS_PREFIX": prefix}
    done = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    # h1's only link was eth0 in aitb; containerlab keeps eth0 for management -> eth1
    assert _qdiscs(prefix, "h1") == {("eth1", "htb"), ("eth1", "pfifo")}
    assert ("eth1", "htb") in _qdiscs(prefix, "h3") and ("eth2", "htb") in _qdiscs(prefix, "r1")
    assert _qdiscs(prefix, "h2") == set()  # the unshaped link has no qdisc of aitb's
    h3 = next(lk.b for lk in plan.links if lk.b.node == "h3").ipv4.ip
    before = _class_packets(prefix, "h1", "eth1")
    ping = subprocess.run(["ip", "netns", "exec", prefix + "h1", "ping", "-c", "3", "-i", "0.2",
                           "-W", "2", str(h3)], capture_output=True, text=True, timeout=30)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    # the echo requests crossed h1's shaped class (HTB 1:1), so shaping is on the path
    assert _class_packets(prefix, "h1", "eth1") - before >= 3
    with NetNS(prefix + "h3") as ns:
        assert ns.get_links(ns.link_lookup(ifname="eth1")[0])[0].get_attr("IFLA_MTU") == 9000
