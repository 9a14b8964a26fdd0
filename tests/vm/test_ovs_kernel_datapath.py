"""Open vSwitch switches on the kernel's openvswitch datapath (the stock kernel in
the VM has it): an L2 leaf-spine of OVS switches with ``ovs_datapath: system`` forwards over
netem-delayed, rate-limited links, its select groups spread TCP flows over both spines, the
datapath each switch got is recorded as ``system``, and after teardown no datapath, port,
process or namespace of it remains (and nothing appeared in the host's namespace)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from models.errors import LabError
from testbed.lab.backends import make_lab
from testbed.lab.registry import pid_alive
from testbed.lab.state import describe
from testbed.ns import netns
from testbed.ovs.datapath import datapaths_here, kernel_datapath
from testbed.ovs.lab import seen_datapath
from topologies import load_topology

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]
DELAY_S = 0.010  # one way, on each host link: h1 -> h3 crosses two of them each way
SWITCHES = ("leaf1", "leaf2", "spine1", "spine2")
FLOWS = 16


def _spine_bytes(lab, dst_leaf: str) -> dict[str, int]:
    """Bytes each spine sent towards ``dst_leaf`` (HTB class counters of that port), as in
    tests/netns/test_ovs.py."""
    info = describe(lab)["nodes"]
    out = {}
    for spine in ("spine1", "spine2"):
        (lk,) = [lk for lk in lab.plan.links if {lk.a.node, lk.b.node} == {spine, dst_leaf}]
        ifname = lk.endpoint(spine).ifname
        (iface,) = [i for i in info[spine]["interfaces"] if i["ifname"] == ifname]
        out[spine] = sum(c["bytes"] for c in iface.get("classes", []))
    return out


def run_namespaces(run_id: str) -> list[str]:
    """Namespaces of ``run_id`` that are mounted."""
    try:
        return [n for n in os.listdir(netns.NETNS_DIR) if n.startswith(f"aitb-{run_id}-")]
    except FileNotFoundError:
        return []


def _topology(tmp_path: Path) -> Path:
    text = (ROOT / "topologies/examples/ovs_leaf_spine.yaml").read_text()
    for old, new in (("switch: {datapath: ovs}", "switch: {datapath: ovs, ovs_datapath: system}"),
                     ("host: {rate: 100Mbit, buffer: 100p}",
                      f"host: {{rate: 100Mbit, buffer: 100p, delay: {DELAY_S * 1000:g}ms}}")):
        assert old in text, old  # the example changed: this test must follow it
        text = text.replace(old, new)
    path = tmp_path / "ovs_kernel.yaml"
    path.write_text(text)
    return path


def _host_ovs_links() -> list[str]:
    """Interfaces of kind openvswitch in this (the VM's root) namespace, e.g. ovs-system."""
    with IPRoute() as ipr:
        return [m.get_attr("IFLA_IFNAME") for m in ipr.get_links()
                if (m.get_attr("IFLA_LINKINFO") is not None and
                    m.get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_KIND") == "openvswitch")]


def _rtts_s(lab, src: str, dst: str) -> list[float]:
    out = lab.run(src, ["ping", "-n", "-c", "5", "-i", "0.2", dst], timeout_s=60).stdout
    return [float(ms) / 1e3 for ms in re.findall(r"time=([\d.]+) ms", out)]


@pytest.mark.parametrize("backend", ["native", "mininet"])
def test_kernel_datapath_forwards_spreads_and_leaves_nothing(backend, tmp_path):
    if not kernel_datapath().present:
        pytest.skip(f"this kernel has no openvswitch datapath ({kernel_datapath().detail})")
    if backend == "mininet":
        pytest.importorskip("mininet.net", reason="Mininet is installed by scripts/setup.sh")
    plan = load_topology(_topology(tmp_path))
    assert _host_ovs_links() == [] and datapaths_here() == []
    lab = make_lab(plan, backend, state_dir=tmp_path)
    with lab:
        assert lab.ovs_datapaths == dict.fromkeys(SWITCHES, "system")
        info = describe(lab)["nodes"]
        assert {s: info[s]["ovs_datapath"] for s in SWITCHES} == lab.ovs_datapaths
        for s in SWITCHES:  # the kernel's own answer, per switch namespace
            assert seen_datapath(lab, s) == "system"
            assert netns.run_in(lab.node_io(s).fd, datapaths_here) == ["ovs-system"]
        assert datapaths_here() == [] and _host_ovs_links() == []  # none in the VM's own
        procs = [(r["pid"], r["start"]) for r in lab.registry.records()
                 if r["kind"] == "process"]
        rtts = _rtts_s(lab, "h1", str(plan.address_of("h3")))
        before = _spine_bytes(lab, "leaf2")
        server = lab.popen("h3", ["iperf3", "-s", "-1"])
        time.sleep(0.5)
        lab.run("h1", ["iperf3", "-c", str(plan.address_of("h3")), "-P", str(FLOWS), "-t",
                       "3"], timeout_s=60)
        server.wait(timeout=20)
        sent = {s: b - before[s] for s, b in _spine_bytes(lab, "leaf2").items()}
    print(f"{backend}: ping h1->h3 RTTs {rtts}, bytes towards leaf2 per spine {sent}, "
          f"ingress qdiscs restored after vswitchd removed them {lab.ovs_restored}")
    assert len(rtts) >= 4, rtts  # 5 sent; one may miss while the neighbour is resolved
    # four delayed host-link crossings per round trip: netem never delivers early
    assert min(rtts) >= 4 * DELAY_S, rtts
    # TCG adds 0-20 ms per delayed packet (KERNEL.md: 21-31 ms RTT for 10 ms on loopback),
    # four delayed crossings here: 80 ms above the 40 ms floor bounds the median
    assert sorted(rtts)[len(rtts) // 2] <= 4 * DELAY_S + 0.080, rtts
    # 16 flows hashed over two buckets: all on one spine has probability 2 * 2**-16; under
    # TCG a 40 ms RTT flow still moves far more than 100 kB in 3 s (its initial window alone
    # is 14.5 kB per RTT, 75 RTTs)
    assert all(b > 100_000 for b in sent.values()), sent
    assert run_namespaces(lab.run_id) == []  # the datapaths lived (and died) in these
    assert datapaths_here() == [] and _host_ovs_links() == []
    assert not any(pid_alive(p, s) for p, s in procs)
    assert not (tmp_path / lab.run_id).exists()


def test_forced_netdev_next_to_auto_switches_in_one_lab(tmp_path):
    """``ovs_datapath: netdev`` on leaf1 forces OVS's user-space datapath there (in the VM:
    after ``modprobe tun``), the ``auto`` others get the kernel's. With a delay line into
    leaf1 the lab is refused before anything exists (the user-space datapath would bypass
    it); with the delay on leaf2's host links only, the mixed fabric forwards over them and
    each switch's recorded datapath is the one it has."""
    if not kernel_datapath().present:
        pytest.skip(f"this kernel has no openvswitch datapath ({kernel_datapath().detail})")
    base = _topology(tmp_path).read_text().replace("ovs_datapath: system", "ovs_datapath: auto")
    text = base.replace("leaf1: {group: fabric}", "leaf1: {group: fabric, ovs_datapath: netdev}")
    assert text != base  # the example's leaf1 line (a silent miss here forced nothing)
    refused = make_lab(load_topology(_write(tmp_path, "refused.yaml", text)), "native",
                       state_dir=tmp_path / "refused")
    with pytest.raises(LabError, match=r"node leaf1: link\(s\) h1-leaf1, h2-leaf1 need a"):
        refused.up()
    assert run_namespaces(refused.run_id) == []
    text = text.replace("profiles:", "profiles:\n  slow: {rate: 100Mbit, buffer: 100p, "
                        f"delay: {DELAY_S * 1000:g}ms}}").replace(
        f"host: {{rate: 100Mbit, buffer: 100p, delay: {DELAY_S * 1000:g}ms}}",
        "host: {rate: 100Mbit, buffer: 100p}").replace(
        "- {endpoints: [h3, leaf2], profile: host}", "- {endpoints: [h3, leaf2], profile: slow}")
    plan = load_topology(_write(tmp_path, "mixed.yaml", text))
    want = {"leaf1": "netdev", "leaf2": "system", "spine1": "system", "spine2": "system"}
    with make_lab(plan, "native", state_dir=tmp_path) as lab:
        assert lab.ovs_datapaths == want
        assert {s: seen_datapath(lab, s) for s in SWITCHES} == want
        assert {s: describe(lab)["nodes"][s]["ovs_datapath"] for s in SWITCHES} == want
        assert netns.run_in(lab.node_io("leaf1").fd, datapaths_here) == []  # user space
        rtts = _rtts_s(lab, "h1", str(plan.address_of("h3")))
    print(f"mixed datapaths: ping h1->h3 RTTs {rtts}")
    # the h3-leaf2 link is delayed both ways: two crossings per round trip
    assert len(rtts) >= 4 and min(rtts) >= 2 * DELAY_S, rtts
    assert run_namespaces(lab.run_id) == []
    assert datapaths_here() == [] and _host_ovs_links() == []


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path
