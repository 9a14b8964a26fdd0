"""`make test-vm`: the vm test tier, on the host if its kernel has netem, else in ONE VM boot.

Usage: .venv/bin/python scripts/run_vm_tier.py [PYTEST ARGS...]  (default: tests)

In the VM the checkout is shared read-write, so the junit file (results/junit-vm.xml) and
pytest's cache come back. A VM that cannot boot is a failure, never a skip.

Where the VM is needed, tests marked ``native_twin(nodeid)`` stay out of it: their checks run
in the netns tier on the host's native delay line (the twin: "the vm tier's
delay/loss/buffer/DCI tests also run on the host against the native line ...; CI no longer
needs the VM for them (keep one VM test of netem itself)"). On a host with netem the whole vm
tier runs, twins included.
"""

from __future__ import annotations

import os
import sys
import time

from models.errors import AitbError
from orchestration.cli.app import report_error
from testbed.host.capabilities import needs_vm
from testbed.vm.kernel import CHECKOUT
from testbed.vm.run import run_in_vm

VM_TIER_TIMEOUT_S = 1800.0  # boot plus the whole tier under TCG (software emulation)


class _Files:
    """A pytest plugin that keeps the paths of the collected (selected) items."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def pytest_collection_finish(self, session) -> None:  # noqa: ANN001 - pytest's Session
        for item in session.items:
            rel = os.path.relpath(item.path, CHECKOUT)
            if rel not in self.paths:
                self.paths.append(rel)


def vm_test_files(marks: str, *paths: str) -> list[str]:
    """The test files under ``paths`` (relative to the checkout) holding a test selected by
    the mark expression ``marks``, collected here on the host (nothing runs; pytest's output
    is discarded). Raises SystemExit when collection fails, with pytest's exit status."""
    import contextlib
    import io

    import pytest

    files = _Files()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        status = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-m", marks,
                              *paths], plugins=[files])
    if status not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        sys.stdout.write(out.getvalue())
        raise SystemExit(f"test-vm: collecting the vm tier on the host failed (pytest exit "
                         f"{int(status)})")
    return files.paths or list(paths)


def main(args: list[str]) -> int:
    """Run ``pytest -m vm ARGS`` where netem exists; return pytest's exit status."""
    junit = CHECKOUT / "results" / "junit-vm.xml"
    junit.parent.mkdir(exist_ok=True)
    pytest = [sys.executable, "-m", "pytest", f"--junitxml={junit}"]
    paths = args or ["tests"]
    if not needs_vm({"netem"}):
        print("test-vm: host kernel has netem: running the vm tier on the host", flush=True)
        os.execv(sys.executable, [*pytest, "-m", "vm", *paths])
    print("test-vm: host kernel lacks netem: running the vm tier in the stock-kernel VM; "
          "tests marked native_twin run in the netns tier on the native delay line instead",
          flush=True)
    marks = "vm and not native_twin"
    if paths == ["tests"]:
        # the whole tree collected under TCG (2500 tests, imports of every module) took about
        # 2 of the tier's 6 minutes; the host collects it in seconds and names the few files
        paths = vm_test_files(marks, "tests")
    argv = [*pytest, "-m", marks, *paths]
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
