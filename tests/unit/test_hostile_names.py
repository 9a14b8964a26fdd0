"""Names and strings from users never reach a shell or an argv as syntax: every plan (YAML,
plan.json, containerlab import) passes models.plan.plan_problems, and the containerlab script
quotes every value it renders."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from models.plan import plan_from_dict, plan_to_dict
from orchestration.cli.commands.clab import export_files
from topologies import load_topology

EXAMPLES = Path(__file__).parent.parent.parent / "topologies" / "examples"


def _plan_dict() -> dict:
    return plan_to_dict(load_topology(EXAMPLES / "single_switch.yaml"))


@pytest.mark.parametrize("where, bad, needle", [
    (("name",), "x$(touch P)", "lab name"),
    (("nodes", 0, "name"), "h;touch P", "node name 'h;touch P'"),
    (("links", 0, "a", "ifname"), "e;touch${IFS}P", "interface 'e;touch${IFS}P'"),
    (("links", 0, "b", "ifname"), "e\nx", "interface 'e\\nx'"),
    (("links", 0, "name"), "l\n$(touch P)", "link name"),
    (("nodes", 0, "sysctls"), {"net.ipv4.tcp_rmem;touch P": "1"}, "sysctl 'net.ipv4.tcp_rmem;"),
    (("nodes", 0, "tcp_congestion_control"), "cubic;x", "tcp_congestion_control"),
])
def test_plan_json_names_are_checked(where, bad, needle):
    d = _plan_dict()
    target = d
    for part in where[:-1]:
        target = target[part]
    target[where[-1]] = bad
    with pytest.raises(ValueError) as info:
        plan_from_dict(json.loads(json.dumps(d)))
    assert needle in str(info.value)


def test_cli_refuses_plan_json_with_bad_ifname(tmp_path):
    d = _plan_dict()
    d["links"][0]["a"]["ifname"] = "e;touch${IFS}P"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(d))
    for argv in (["topo", "validate", str(path)],
                 ["topo", "export", str(path), "--format", "clab", "-o", str(tmp_path)]):
        out = subprocess.run([sys.executable, "-m", "orchestration.cli", *argv],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, (argv, out.stdout, out.stderr)
        assert "e;touch${IFS}P" in out.stderr
    assert not list(tmp_path.glob("*.sh"))


def test_clab_script_quotes_file_names(tmp_path):
    """A source path with a newline and $(...) stays a comment; the script's commands get
    exactly the planned argv (run with a stub ``ip`` that records its arguments)."""
    plan = dataclasses.replace(load_topology(EXAMPLES / "single_switch.yaml"),
                               source="a\n$(touch P1)\n`touch P2`.yaml")
    _, script = export_files(plan, tmp_path, "img", keep_kinds=False)
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "ip").write_text('#!/bin/sh\nprintf "%s|" "$@" >> "$LOG"\necho >> "$LOG"\n')
    (stub / "ip").chmod(0o755)
    env = {**os.environ, "PATH": f"{stub}:/usr/bin:/bin", "LOG": str(tmp_path / "log")}
    subprocess.run(["sh", str(script)], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=30)
    assert not (tmp_path / "P1").exists() and not (tmp_path / "P2").exists()
    lines = (tmp_path / "log").read_text().splitlines()
    assert lines and all(line.startswith(f"netns|exec|clab-{plan.name}-") for line in lines)
    text = script.read_text()
    assert "a\\x0a$(touch P1)" in text  # shown escaped, on its comment line
