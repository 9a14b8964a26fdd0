"""Two "machines" reached only over SSH: network namespaces m1 and m2, each running Debian's
sshd (started here by pid, its own config and host key in a temp dir) on its own underlay
address on a bridge in a third namespace, from which the driver connects
(orchestration.cluster.control). Over SSH: each machine runs commands in its own namespace,
the clock offset is estimated (same clock here, so the estimate must lie within half its
round-trip delay of 0: the NTP error bound, not a timing margin), and a cut link becomes a
VXLAN tunnel (orchestration.cluster.tunnels) between a lab namespace on each machine that
carries pings of exactly the link's MTU and refuses one byte more."""

from __future__ import annotations

import pytest
from sshd_machines import sshd_machines

pytestmark = pytest.mark.netns

DRIVER = r"""
import json, sys
from orchestration.cluster.control import Control, HostTrust
from orchestration.cluster.spec import parse_cluster
from orchestration.cluster.tunnels import Tunnel, vxlan_argvs
key, rid, tmp = sys.argv[1:4]
cluster = parse_cluster({"underlay_mtu": 1500, "machines": [
    {"name": "m1", "ssh": "10.77.0.1", "key": key},
    {"name": "m2", "ssh": "10.77.0.2", "key": key}]}, "test")
t = Tunnel("cut", 4242, "m1", "n1", "cut0", "m2", "n2", "cut0", 1450)
out = {}
ctl = {m.name: Control(m, HostTrust(tmp + "/known_hosts")) for m in cluster.machines}
for name, c in ctl.items():
    out[name] = {"links": c.check(["ip", "-o", "link"])}
    off = c.clock_offset(samples=16)
    out[name]["offset"] = [off.offset_s, off.delay_s, off.samples]
for side, name, addr in (("a", "m1", "192.168.77.1/30"), ("b", "m2", "192.168.77.2/30")):
    ns = f"aitb-{rid}-n{name[1]}"
    ctl[name].check(["ip", "netns", "add", ns])
    for argv in vxlan_argvs(t, side, cluster, ns):
        ctl[name].check(argv)
    ctl[name].check(["ip", "-n", ns, "addr", "add", addr, "dev", "cut0"])
ns1 = f"aitb-{rid}-n1"
ping = ["ip", "netns", "exec", ns1, "ping", "-c", "2", "-W", "5", "-M", "do"]
out["ping_mtu"] = ctl["m1"].run([*ping, "-s", str(1450 - 28), "192.168.77.2"])[0]
out["ping_over"] = ctl["m1"].run([*ping, "-s", str(1450 - 27), "192.168.77.2"])[0]
out["mtu"] = ctl["m1"].check(["ip", "-n", ns1, "-o", "link", "show", "cut0"])
for c in ctl.values():
    c.close()
print(json.dumps(out))
"""


@pytest.fixture
def machines(tmp_path):
    """m1 and m2 (tests/netns/sshd_machines.py); yields (run id, a function running a Python
    script inside the driver's namespace with the key and run id as arguments)."""
    with sshd_machines(tmp_path) as m:
        yield m.rid, m.drive


def test_two_machines_over_ssh_clock_offset_and_vxlan(machines):
    rid, drive = machines
    got = drive(DRIVER)
    for m in ("m1", "m2"):
        links = got[m]["links"]
        assert "eth0" in links and "br0" not in links  # the machine's own namespace
        offset, delay, samples = got[m]["offset"]
        assert samples == 16 and delay > 0
        assert abs(offset) <= delay / 2  # same clock: the true offset is 0
    assert "mtu 1450" in got["mtu"]
    assert got["ping_mtu"] == 0  # 1450-byte packets cross the tunnel unfragmented
    assert got["ping_over"] != 0  # one byte more is refused (DF): the MTU is accounted


DEPLOY = r"""
import json, sys
import topologies
from orchestration.cluster.control import Control, HostTrust
from orchestration.cluster.deploy import deploy, destroy
from orchestration.cluster.spec import parse_cluster
key, rid, tmp, python, root = sys.argv[1:6]
cluster = parse_cluster({"underlay_mtu": 1550, "machines": [
    {"name": "m1", "ssh": "10.77.0.1", "key": key},
    {"name": "m2", "ssh": "10.77.0.2", "key": key}]}, "test")
doc = {"name": "two", "generator": {"name": "single_switch", "params": {"hosts": 2, "link": "l"}},
       "profiles": {"l": {"rate": "100Mbit", "buffer": "100p"}}}
plan = topologies.resolve(topologies.parse_topology(doc, "t"), "t")
where = {"h1": "m1", "s1": "m1", "h2": "m2"}
ctl = {m.name: Control(m, HostTrust(tmp + "/known_hosts")) for m in cluster.machines}
# one state dir serves both "machines" (one file system here); their run ids differ
aitb = ["env", f"PYTHONPATH={root}", f"AITB_STATE_DIR={tmp}/state", python, "-m",
        "orchestration.cli"]
out = {}
d = None
try:
    d = deploy(plan, where, cluster, rid, ctl, aitb)
    h2 = next(str(e.ipv4.ip) for lk in plan.links for e in (lk.a, lk.b) if e.node == "h2")
    ns1 = "aitb-" + d.run_ids["m1"] + "-h1"
    out["ping"] = ctl["m1"].run(["ip", "netns", "exec", ns1, "ping", "-c", "3", "-W", "5", h2])
    out["qdisc"] = ctl["m1"].check(["tc", "-n", ns1, "qdisc", "show"])
    out["offsets"] = {k: [v.offset_s, v.delay_s] for k, v in d.offsets.items()}
    out["nodes"] = d.nodes
finally:
    if d is not None:
        out["destroy"] = destroy(d, ctl, aitb)
print(json.dumps(out))
"""


def test_a_lab_over_two_machines_deployed_over_ssh(machines):
    rid, drive = machines
    got = drive(DEPLOY)
    assert got["nodes"] == {"m1": ["h1", "s1"], "m2": ["h2"]}
    status, _, err = got["ping"]
    assert status == 0, err  # h1 on m1 reaches h2 on m2: switch, proxy, VXLAN, proxy, h2
    assert "htb" in got["qdisc"]  # h1's egress shaped on its own machine
    for offset, delay in got["offsets"].values():
        assert abs(offset) <= delay / 2
    assert got["destroy"] == {"m1": "", "m2": ""}
