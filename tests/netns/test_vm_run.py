"""run_in_vm against a real VM boot (about 20-60 s under TCG), and the vm tier's refusal to skip.

Only one full boot here: the rest of the VM path is covered by the vm tier itself.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from models.errors import CommandError
from testbed.host.capabilities import needs_vm
from testbed.vm.run import run_in_vm

pytestmark = pytest.mark.netns

GUEST = """
import os, pathlib, sys
print("cwd", os.getcwd())
print("in_vm", os.environ["AITB_IN_VM"])
pathlib.Path(sys.argv[1], "from-guest").write_text("written in the guest")
pathlib.Path("/etc/aitb-guest-only").write_text("discarded")
print("to stderr", file=sys.stderr)
sys.exit(3)
"""


def _processes_mentioning(text):
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.timeout(900)  # one boot under TCG on a loaded 2-core host: up to ~2 min seen
def test_run_in_vm_returns_status_and_output_and_writes_back_rwdirs(tmp_path):
    result = run_in_vm([sys.executable, "-c", GUEST, str(tmp_path)], rwdirs=[tmp_path],
                       cwd=tmp_path, timeout_s=600)
    assert result.returncode == 3
    assert result.stdout.splitlines() == [f"cwd {tmp_path}", f"in_vm {result.accel}"]
    assert result.stderr == "to stderr\n"
    assert result.accel in ("kvm", "tcg")
    assert (tmp_path / "from-guest").read_text() == "written in the guest"
    assert not Path("/etc/aitb-guest-only").exists()  # the guest's root is read-only overlays
    assert _processes_mentioning(str(tmp_path)) == []


def test_a_hung_vm_is_killed_and_the_error_names_the_command(tmp_path):
    # 10 s is less than a boot under TCG here (15-30 s): the VM is still booting, qemu (or the
    # virtme-run about to become qemu, under heavy load) is running when the timeout strikes.
    with pytest.raises(CommandError,
                       match=r"sleep 600.*timed out after 10 s.*killed vng.*(qemu|virtme-run)"):
        run_in_vm(["sleep", "600"], rwdirs=[tmp_path], timeout_s=10, accel="tcg")
    assert _processes_mentioning(str(tmp_path)) == []  # qemu got tmp_path as --rwdir


def test_vm_tests_fail_rather_than_skip_on_a_host_without_netem():
    env = {k: v for k, v in os.environ.items() if k != "AITB_IN_VM"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "vm",
                          "tests/vm/test_vm_smoke.py"], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).resolve().parents[2], timeout=120)
    if needs_vm({"netem"}):
        assert res.returncode == 1, res.stdout
        assert "must run inside the stock-kernel VM" in res.stdout
        assert "skipped" not in res.stdout.splitlines()[-1]
    else:
        assert res.returncode == 0, res.stdout
