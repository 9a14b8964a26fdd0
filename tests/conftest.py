"""Test tiers: a `vm` test run directly on a host kernel without netem fails (never skips).

`make test-vm` runs the vm tier on the host when its kernel has netem, otherwise inside the
stock-kernel VM (scripts/run_vm_tier.py). Run directly on a host that lacks netem, each vm test
errors with the reason, so that a missing VM can never look like a pass.
"""

import os

import pytest
from serial_lock import pytest_runtest_protocol  # noqa: F401  (the hook: `serial` under xdist)

VM_TIER_MESSAGE = ("this test needs sch_netem, which this host kernel lacks: it must run inside "
                   "the stock-kernel VM (`make test-vm`, or `aitb --vm` for commands)")


def pytest_runtest_setup(item):
    if item.get_closest_marker("vm") is None:
        return
    from testbed.host.capabilities import needs_vm

    if os.geteuid() != 0:
        pytest.fail("vm tests need root (namespaces, tc); run `sudo make test-vm`", pytrace=False)
    if needs_vm({"netem"}):
        pytest.fail(VM_TIER_MESSAGE, pytrace=False)
