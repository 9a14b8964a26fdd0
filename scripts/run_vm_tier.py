"""`make test-vm`: the vm test tier, on the host if its kernel has netem, else in ONE VM boot.

Usage: .venv/bin/python scripts/run_vm_tier.py [PYTEST ARGS...]  (default: tests)

In the VM the checkout is shared read-write, so the junit file (results/junit-vm.xml) and
pytest's cache come back. A VM that cannot boot is a failure, never a skip.

Where the VM is needed, tests marked ``native_twin(nodeid)`` stay out of it: their checks run
in the netns tier on the host's native delay line (the twin, issue #12: "the vm tier's
delay/loss/buffer/DCI tests also run on the host against the native line ...; CI no longer
needs the VM for them (keep one VM test of netem itself)"). On a host with netem the whole vm
tier runs, twins included.
"""

from __future__ import annotations

import os
import sys
import time

from aitb.errors import AitbError
from orchestration.cli.app import report_error
from testbed.capabilities import needs_vm
from testbed.vm import run_in_vm
from testbed.vm_kernel import CHECKOUT

VM_TIER_TIMEOUT_S = 1800.0  # boot plus the whole tier under TCG (software emulation)


def main(args: list[str]) -> int:
    """Run ``pytest -m vm ARGS`` where netem exists; return pytest's exit status."""
    junit = CHECKOUT / "results" / "junit-vm.xml"
    junit.parent.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "pytest", "-m", "vm", f"--junitxml={junit}", *(args or ["tests"])]
    if not needs_vm({"netem"}):
        print("test-vm: host kernel has netem: running the vm tier on the host", flush=True)
        os.execv(sys.executable, argv)
    print("test-vm: host kernel lacks netem: running the vm tier in the stock-kernel VM; "
          "tests marked native_twin run in the netns tier on the native delay line instead",
          flush=True)
    argv[argv.index("vm")] = "vm and not native_twin"
    start = time.monotonic()
    try:
        result = run_in_vm(argv, rwdirs=[CHECKOUT], cwd=CHECKOUT, echo=True,
                           timeout_s=VM_TIER_TIMEOUT_S)
    except AitbError as exc:
        report_error(exc)
        return 1
    print(f"test-vm: VM ({result.accel}) exited {result.returncode} after "
          f"{time.monotonic() - start:.1f} s", flush=True)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
