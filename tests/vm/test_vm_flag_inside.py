"""Inside the VM, `aitb --vm ...` runs the command right there (no VM in the VM)."""

import json
import subprocess
import sys

import pytest

from testbed.host.capabilities import in_vm


@pytest.mark.vm
def test_vm_flag_is_ignored_inside_the_vm_and_the_guest_kernel_has_netem():
    if in_vm() is None:
        pytest.skip("checks `--vm` inside the VM; this host has netem, so the tier runs natively")
    res = subprocess.run([sys.executable, "-m", "orchestration.cli", "--vm", "doctor", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["in_vm"] == in_vm()
    missing = {k for k, v in report["capabilities"].items() if not v}
    # The stock kernel has every qdisc and link kind aitb uses; `vm` itself is present too
    # because the guest sees the host's filesystem.
    assert not missing & {"netns", "veth", "bridge", "ifb", "htb", "tbf", "netem", "fq_codel",
                          "red", "pfifo", "bfifo", "openvswitch", "ovs_system"}, report["remedies"]
