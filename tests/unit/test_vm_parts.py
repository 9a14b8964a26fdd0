"""The VM path's pure parts: quoting of the guest command, vng argv, --vm flag, accel choice."""

import subprocess
from pathlib import Path

import pytest

from models.errors import LabError
from orchestration.vm_rerun import strip_vm_flag
from testbed.host.capabilities import Capability, CapabilityReport
from testbed.vm.boot import _command_words, guest_script, vng_argv
from testbed.vm.kernel import StockKernel
from testbed.vm.run import detect_accel

NASTY = ["it's", "$HOME", "a b", "*", "A=b", ";", "`id`", "-n", "\\", ""]


def test_guest_command_passes_every_argument_through_the_shell_unchanged():
    words = _command_words(["printf", "<%s>\\n", *NASTY])
    out = subprocess.run(["sh", "-c", words], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [f"<{a}>" for a in NASTY]


@pytest.mark.parametrize("first", ["if", "A=b", "!"])
def test_guest_command_name_is_never_a_keyword_or_assignment(first):
    # Quoted, these are looked up as programs: "not found" (127), not a syntax error (2).
    res = subprocess.run(["sh", "-c", _command_words([first, "x"])], capture_output=True)
    assert res.returncode == 127


def test_guest_script_is_valid_sh_with_env_and_status_file(tmp_path):
    script = guest_script(["echo", "hi"], cwd=Path("/x y"), result_dir=Path("/r"), accel="tcg",
                          env={"PATH": "/a:/b", "AITB_RUN": "it's"})
    (tmp_path / "g.sh").write_text(script)
    subprocess.run(["sh", "-n", str(tmp_path / "g.sh")], check=True)
    assert "export AITB_IN_VM=tcg\n" in script
    assert "export AITB_RUN='it'\"'\"'s'\n" in script
    assert "mv /r/status.tmp /r/status" in script


def test_guest_script_rejects_environment_names_the_shell_cannot_take():
    with pytest.raises(ValueError, match="A-B"):
        guest_script(["true"], cwd=Path("/"), result_dir=Path("/r"), accel="kvm",
                     env={"A-B": "1"})


def test_vng_argv_disables_kvm_only_for_tcg():
    kernel = StockKernel(Path("/k/vmlinuz-6.1.0-57-amd64"), "6.1.0-57-amd64")
    tcg = vng_argv(Path("/v/vng"), kernel, accel="tcg", rwdirs=[Path("/d")], script=Path("/s"))
    kvm = vng_argv(Path("/v/vng"), kernel, accel="kvm", rwdirs=[], script=Path("/s"))
    assert "--disable-kvm" in tcg and "--disable-kvm" not in kvm
    # TCG guests trust the TSC (vDSO clock reads); KVM guests keep kvm-clock.
    assert tcg[tcg.index("--append") + 1] == "clocksource=tsc tsc=reliable"
    assert "--append" not in kvm
    assert tcg[tcg.index("--rwdir") + 1] == "/d"
    assert tcg[-2:] == ["--exec", "sh /s"]
    assert tcg[tcg.index("-r") + 1] == "/k/vmlinuz-6.1.0-57-amd64"


def test_strip_vm_flag_removes_only_the_root_option():
    assert strip_vm_flag(["--vm", "topo", "deploy", "f.yaml"]) == ["topo", "deploy", "f.yaml"]
    assert strip_vm_flag(["exec", "r1", "h1", "--", "prog", "--vm"]) == [
        "exec", "r1", "h1", "--", "prog", "--vm"]


def test_accel_override_is_checked(monkeypatch):
    monkeypatch.setenv("AITB_VM_ACCEL", "tcg")
    assert detect_accel() == "tcg"
    monkeypatch.setenv("AITB_VM_ACCEL", "hvf")
    with pytest.raises(LabError, match="AITB_VM_ACCEL='hvf'"):
        detect_accel()


def test_report_dict_has_booleans_and_remedies_for_the_missing_only():
    report = CapabilityReport("6.1.0", None, {
        "htb": Capability("htb", True, "added"),
        "netem": Capability("netem", False, "ENOENT", "use the VM"),
    })
    d = report.to_dict()
    assert d["capabilities"] == {"htb": True, "netem": False}
    assert d["remedies"] == {"netem": "use the VM"}
    assert report.missing() == ["netem"]
