"""The capability probe against the real kernel, and `aitb doctor --json`."""

import json
import os
import secrets
import subprocess
import sys

import pytest
from pyroute2 import netns

from models.errors import LabError
from testbed.host.capabilities import needs_vm, probe, require_kernel

pytestmark = pytest.mark.netns

REQUIRED = {"root", "netns", "veth", "bridge", "htb", "tbf", "netem", "ifb", "fq_codel", "red",
            "openvswitch", "ovs_system", "ovs_netdev", "tcpdump", "iperf3", "tshark", "vm"}


def _tc_accepts(kind_args):
    """Independent check with the tc program (exit status only): can `kind` be a root qdisc?"""
    name = f"aitbt-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        return subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo",
                               "root", *kind_args], capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=True)


def test_probe_agrees_with_tc_and_leaves_no_namespace():
    before = set(netns.listnetns())
    caps = probe().capabilities
    assert set(netns.listnetns()) == before
    assert caps["netem"].present == _tc_accepts(["netem", "delay", "1ms"])
    assert caps["htb"].present == _tc_accepts(["htb", "default", "10"])
    assert caps["fq_codel"].present == _tc_accepts(["fq_codel"])
    assert caps["red"].present == _tc_accepts(["red", "limit", "400000", "min", "30000", "max",
                                               "90000", "avpkt", "1000", "burst", "55",
                                               "bandwidth", "10mbit"])


def test_needs_vm_follows_the_probe_and_rejects_unknown_names():
    caps = probe().capabilities
    if os.environ.get("AITB_IN_VM"):
        assert needs_vm({"netem"}) is False
    else:
        assert needs_vm({"netem"}) is (not caps["netem"].present)
    assert needs_vm({"htb"}) is False  # every supported host kernel has HTB
    with pytest.raises(ValueError, match="nosuchqdisc"):
        needs_vm({"nosuchqdisc"})


def test_doctor_json_names_every_capability_with_a_remedy_for_each_missing():
    res = subprocess.run([sys.executable, "-m", "orchestration.cli", "doctor", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert REQUIRED <= report["capabilities"].keys()
    assert all(isinstance(v, bool) for v in report["capabilities"].values())
    missing = {k for k, v in report["capabilities"].items() if not v}
    assert set(report["remedies"]) == missing
    assert all(report["remedies"][k] for k in missing)
    assert report["kernel_release"] == os.uname().release
    # the delay lines on offer: netem where the kernel has it, native where NFQUEUE works
    want = [n for n in ("netem", "native") if report["capabilities"][f"delay_line_{n}"]]
    assert report["delay_lines"] == want
    if not report["capabilities"]["netem"]:
        assert "native" in want  # this project's machines: no netem, NFQUEUE built in


def test_require_kernel_names_what_is_missing_and_offers_the_vm():
    if not needs_vm({"netem"}):
        require_kernel({"netem", "htb"})  # present here (or inside the VM): no error
        return
    with pytest.raises(LabError, match=r"lab x needs netem, which .* lacks: .*aitb --vm"):
        require_kernel({"netem", "htb"}, what="lab x")
