"""A lab that needs netem on a kernel without it, where the stock-kernel VM is not set up:
``aitb run`` (and ``--check``) refuse it before anything exists, naming what the VM lacks
and the remedy; they used to say "ok" and then fail with exit 1 and no run directory."""

from __future__ import annotations

import pytest

from orchestration.cli import app as cli_app
from orchestration.cli.commands import run as run_cmd

EXPERIMENT = """\
name: wantsnetem
topology:
  inline:
    name: wantsnetem
    generator: {name: single_switch, params: {hosts: 2, link: wan}}
    profiles: {wan: {rate: 100Mbit, delay: 5ms}}
    delay_line: netem
workloads:
  - {kind: incast, receiver: h1, size: 64KiB}
"""


@pytest.mark.parametrize("check", [True, False])
def test_a_netem_lab_without_the_vm_is_refused_before_anything_exists(tmp_path, monkeypatch,
                                                                     capsys, check):
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    monkeypatch.setattr(run_cmd, "missing_kernel_features", lambda plan: ["netem"])
    monkeypatch.setattr(run_cmd, "in_vm", lambda: None)
    monkeypatch.setattr(run_cmd, "vm_problems",
                        lambda: ["qemu-system-x86_64 not on PATH (Debian package qemu)"])
    results = tmp_path / "results"
    args = ["run", str(exp), "--results", str(results), *(["--check"] if check else [])]
    with pytest.raises(SystemExit) as exited:
        cli_app.main(args)
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert "the stock-kernel VM that has them is not set up" in err
    assert "qemu-system-x86_64 not on PATH" in err and "make vm" in err
    assert not results.exists()
