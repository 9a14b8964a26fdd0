"""The real ``aitb topo validate`` command: exit codes, messages, JSON, no tracebacks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import topologies

AITB = Path(sys.executable).parent / "aitb"
EXAMPLE = Path(topologies.__file__).parent / "examples" / "two_dc.yaml"

BAD = {
    "unknown_key.yaml": ("name: t\nnodes:\n  h1: {kind: host, colour: red}\n", "nodes.h1.colour"),
    "dangling.yaml": ("name: t\nnodes:\n  h1: {kind: host}\nlinks:\n  - endpoints: [h1, x]\n",
                      "links[0].endpoints[1]"),
    "no_unit.yaml": ("name: t\nnodes:\n  a: {kind: host}\n  b: {kind: host}\nlinks:\n"
                     "  - endpoints: [a, b]\n    rate: 100\n", "links[0].rate"),
    "syntax.yaml": ("name: t\nnodes: [\n", "syntax.yaml:"),
    "bad_name.yaml": ("name: t\nnodes:\n  'a@b': {kind: host}\n  b: {kind: host}\nlinks:\n"
                      "  - endpoints: ['a@b', b]\n", "nodes.a@b"),
    # the expected pattern is printed literally, not eaten as rich markup
    "lab_name.yaml": ("name: Bad_Lab\nnodes: {}\n", "^[a-z0-9][a-z0-9-]*$"),
    "unreachable.yaml": ("name: t\nnodes:\n  a: {kind: host}\n  b: {kind: host}\n"
                         "  c: {kind: host}\n  d: {kind: host}\nlinks:\n"
                         "  - endpoints: [a, b]\n  - endpoints: [c, d]\n", "cannot reach"),
}


def run(*args):
    return subprocess.run([str(AITB), "topo", "validate", *map(str, args)], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_file_exits_2_with_location_and_no_traceback(tmp_path, name):
    text, key = BAD[name]
    path = tmp_path / name
    path.write_text(text)
    res = run(path)
    assert res.returncode == 2, res.stderr
    assert name in res.stderr and key in res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    res = run(path, "--json")
    assert res.returncode == 2 and "Traceback" not in res.stderr + res.stdout
    out = json.loads(res.stdout)
    assert out["ok"] is False and out["errors"]
    assert all(set(e) == {"file", "key", "line", "message"} for e in out["errors"])
    assert any(e["file"] == str(path) for e in out["errors"])


def test_missing_file(tmp_path):
    res = run(tmp_path / "absent.yaml")
    assert res.returncode == 2 and "absent.yaml" in res.stderr and "not found" in res.stderr
    assert "Traceback" not in res.stderr


def test_valid_file_summary_and_json():
    res = run(EXAMPLE)
    assert res.returncode == 0, res.stderr
    assert "8 hosts, 10 routers" in res.stdout and "netem:   needed" in res.stdout
    out = json.loads(run(EXAMPLE, "--json").stdout)
    assert out["ok"] is True and out["name"] == "two-dc" and out["needs_netem"] is True
    assert out["nodes"] == {"host": 8, "router": 10} and out["links"] == 21


def test_schema_command_prints_the_committed_schema():
    res = subprocess.run([str(AITB), "topo", "schema"], capture_output=True, text=True,
                         timeout=60, check=True)
    from topologies.schema_gen import SCHEMA_PATH

    assert res.stdout == SCHEMA_PATH.read_text()
