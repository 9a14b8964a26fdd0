"""Open vSwitch switches on both backends: an L2 leaf-spine of OVS switches
spreads TCP flows over both spines through aitb's select groups (ecmp_hash l4), keeps every
flow of one host pair on one spine with ecmp_hash l3, and its daemons, shells and namespaces
are gone after teardown."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import run_namespaces

from testbed.lab.backends import make_lab
from testbed.lab.registry import pid_alive
from testbed.lab.state import describe
from topologies import load_topology

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "topologies/examples/ovs_leaf_spine.yaml"
FLOWS = 16


@pytest.fixture(autouse=True)
def _root():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


def _spine_bytes(lab, dst_leaf: str) -> dict[str, int]:
    """Bytes each spine sent towards ``dst_leaf`` (HTB class counters of that port)."""
    info = describe(lab)["nodes"]
    out = {}
    for spine in ("spine1", "spine2"):
        (lk,) = [lk for lk in lab.plan.links if {lk.a.node, lk.b.node} == {spine, dst_leaf}]
        ifname = lk.endpoint(spine).ifname
        (iface,) = [i for i in info[spine]["interfaces"] if i["ifname"] == ifname]
        out[spine] = sum(c["bytes"] for c in iface.get("classes", []))
    return out


def _flows_towards_leaf2(lab) -> dict[str, int]:
    """Bytes per spine towards leaf2 while FLOWS TCP flows h1 -> h3 run for 2 s."""
    before = _spine_bytes(lab, "leaf2")
    server = lab.popen("h3", ["iperf3", "-s", "-1"])
    time.sleep(0.3)
    lab.run("h1", ["iperf3", "-c", str(lab.plan.address_of("h3")), "-P", str(FLOWS), "-t", "2"],
            timeout_s=30)
    server.wait(timeout=10)
    after = _spine_bytes(lab, "leaf2")
    return {s: after[s] - before[s] for s in after}


@pytest.mark.parametrize("backend", ["native", "mininet"])
def test_ovs_leaf_spine_spreads_flows_over_both_spines(backend, tmp_path):
    if backend == "mininet":
        pytest.importorskip("mininet.net", reason="Mininet is installed by scripts/setup.sh")
    plan = load_topology(TOPO)
    lab = make_lab(plan, backend, state_dir=tmp_path)
    with lab:
        procs = [(r["pid"], r["start"]) for r in lab.registry.records()
                 if r["kind"] == "process"]
        assert sum("ovs-vswitchd" in " ".join(r["argv"]) for r in lab.registry.records()
                   if r["kind"] == "process") == 4
        sent = _flows_towards_leaf2(lab)
    print(f"{backend}: bytes towards leaf2 per spine {sent}")
    # 16 TCP flows of one 100 Mbit/s host link for 2 s (~25 MB): every flow hashes (ports
    # included: ecmp_hash l4) to one of two buckets; all 16 on one spine has probability
    # 2 * 2**-16 = 3e-5, and one flow alone gets well over 0.5 MB in 2 s. Kernel ECMP is not
    # involved (one subnet, no routers).
    assert all(b > 500_000 for b in sent.values()), sent
    assert run_namespaces(lab.run_id) == []
    assert not any(pid_alive(p, s) for p, s in procs)
    assert not (tmp_path / lab.run_id).exists()


def test_ecmp_hash_l3_keeps_every_flow_of_a_host_pair_on_one_spine(tmp_path):
    text = TOPO.read_text().replace("fabric: {kind: switch, ecmp_hash: l4}",
                                    "fabric: {kind: switch, ecmp_hash: l3}")
    assert text != TOPO.read_text()
    (tmp_path / "l3.yaml").write_text(text)
    with make_lab(load_topology(tmp_path / "l3.yaml"), "native", state_dir=tmp_path) as lab:
        sent = _flows_towards_leaf2(lab)
    print(f"l3: bytes towards leaf2 per spine {sent}")
    # the same 16 flows hash by addresses only: one bucket for all (~25 MB); the other spine
    # sees at most flooded frames (ARP), nothing of the flows
    assert max(sent.values()) > 5_000_000 and min(sent.values()) < 50_000, sent


def test_mininet_ovs_switches_take_a_controller_and_keep_aitbs_rules(tmp_path):
    """--switch ovs turns the plan's Linux bridge into an OVS switch; with a controller that
    is not there (a unix socket nobody listens on), secure fail mode keeps aitb's rules."""
    pytest.importorskip("mininet.net", reason="Mininet is installed by scripts/setup.sh")
    from testbed.mininet.backend import MininetLab

    plan = load_topology(ROOT / "topologies/examples/single_switch.yaml")
    target = f"unix:{tmp_path / 'no-controller.sock'}"
    with MininetLab(plan, state_dir=tmp_path, switch="ovs", controller=target) as lab:
        assert lab.ovs["s1"].vsctl("get-controller", "ovsbr").strip() == target
        assert lab.net["s1"].dpctl("dump-flows").count("actions=") == 4 + 4 + 1
        lab.run("h1", ["ping", "-c1", "-W2", str(plan.address_of("h4"))])
    assert run_namespaces(lab.run_id) == []


def test_sigkill_of_the_owner_then_clean_removes_shells_daemons_and_namespaces(tmp_path):
    """The owner of a Mininet lab with OVS switches dies by SIGKILL (no teardown at all):
    `aitb clean RUN_ID` ends the OVS daemons by pid and removes the namespaces, by registry."""
    import json
    import signal
    import subprocess
    import sys

    pytest.importorskip("mininet.net", reason="Mininet is installed by scripts/setup.sh")
    from testbed.lab.clean import clean

    script = (f"import sys, time\nfrom pathlib import Path\n"
              f"from topologies import load_topology\nfrom testbed.lab.backends import make_lab\n"
              f"lab = make_lab(load_topology(Path({str(TOPO)!r})), 'mininet', "
              f"state_dir=Path({str(tmp_path)!r}))\nlab.up()\nprint(lab.run_id, flush=True)\n"
              f"time.sleep(600)\n")
    owner = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True)
    try:
        run_id = owner.stdout.readline().strip()
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert run_id, "the lab did not come up"
    recs = [json.loads(x) for x in (tmp_path / run_id / "registry.jsonl").read_text()
            .splitlines()]
    daemons = [(r["pid"], r["start"]) for r in recs if r["kind"] == "process"
               and r["argv"][0].startswith("ovs")]
    try:
        assert len(daemons) == 8 and all(pid_alive(p, s) for p, s in daemons)  # orphans now
    finally:  # clean is the code under test, and also what leaves nothing if a check fails
        reports, _ = clean(tmp_path, run_id)
    assert not reports[0].failures
    assert not any(pid_alive(p, s) for p, s in daemons)
    assert run_namespaces(run_id) == []
    assert not (tmp_path / run_id).exists()


def test_datapath_is_chosen_recorded_and_read_back_across_processes(tmp_path):
    """`aitb topo deploy --json` says which datapath each OVS switch got, `aitb topo inspect`
    of the live lab (another process) reads the same from the run's registry, and it is the
    one the switch's namespace shows (an openvswitch-kind device iff ``system``)."""
    import json
    import subprocess
    import sys

    from testbed.lab.lab import Lab
    from testbed.ovs.datapath import kernel_datapath
    from testbed.ovs.lab import seen_datapath

    want = "system" if kernel_datapath().present else "netdev"
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "topo", "deploy", str(TOPO),
                          "--json"], capture_output=True, text=True, env=env, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rid = json.loads(out.stdout)["run_id"]
    try:
        assert json.loads(out.stdout)["ovs_datapaths"] == dict.fromkeys(
            ["spine1", "spine2", "leaf1", "leaf2"], want)
        seen = subprocess.run([sys.executable, "-m", "orchestration.cli", "topo", "inspect", rid,
                               "--json"], capture_output=True, text=True, env=env,
                              timeout=60, check=True)
        nodes = json.loads(seen.stdout)["nodes"]
        assert {n: v.get("ovs_datapath") for n, v in nodes.items() if "leaf" in n
                or "spine" in n} == dict.fromkeys(["spine1", "spine2", "leaf1", "leaf2"], want)
        lab = Lab.attach(rid, tmp_path)
        try:
            assert seen_datapath(lab, "leaf1") == want
        finally:
            lab.release()
    finally:
        subprocess.run([sys.executable, "-m", "orchestration.cli", "topo", "destroy", rid], env=env,
                       timeout=120, check=True, capture_output=True)
    assert run_namespaces(rid) == []


def test_system_datapath_on_a_kernel_without_it_is_refused_before_anything_exists(tmp_path):
    import dataclasses

    from models.errors import LabError
    from testbed.ovs.datapath import kernel_datapath

    if kernel_datapath().present:
        pytest.skip("this kernel has the openvswitch datapath (the VM tier covers it)")
    plan = load_topology(TOPO)
    plan = dataclasses.replace(plan, nodes=tuple(
        dataclasses.replace(n, ovs_datapath="system") if n.name == "spine2" else n
        for n in plan.nodes))
    lab = make_lab(plan, "native", state_dir=tmp_path)
    with pytest.raises(LabError, match=r"node\(s\) spine2: ovs_datapath: system"):
        lab.up()
    assert run_namespaces(lab.run_id) == []
    assert list(tmp_path.iterdir()) == []
