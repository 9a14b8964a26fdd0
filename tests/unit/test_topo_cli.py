"""The real ``aitb topo validate`` command: exit codes, messages, JSON, no tracebacks; the
width of ``aitb topo inspect``'s table on a terminal and on a pipe."""

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
    assert "8 hosts, 10 routers" in res.stdout and "delay:   2 directions" in res.stdout
    out = json.loads(run(EXAMPLE, "--json").stdout)
    assert out["ok"] is True and out["name"] == "two-dc" and out["needs_netem"] is True
    assert out["delay_lines"] == {"auto": 2}
    assert out["nodes"] == {"host": 8, "router": 10} and out["links"] == 21


def test_schema_command_prints_the_committed_schema():
    res = subprocess.run([str(AITB), "topo", "schema"], capture_output=True, text=True,
                         timeout=60, check=True)
    from topologies.schema_gen import SCHEMA_PATH

    assert res.stdout == SCHEMA_PATH.read_text()


def _probe_console(stdout, env) -> subprocess.Popen:
    """A process that prints whether inspect's console sees a terminal, and its width."""
    probe = ("from orchestration.cli.commands.lab import _stdout_console\n"
             "c = _stdout_console()\nprint(c.is_terminal, c.width)\n")
    proc = subprocess.Popen([sys.executable, "-c", probe], stdout=stdout,
                            stderr=subprocess.PIPE, env=env, text=True)
    return proc


def test_topo_inspect_keeps_the_terminal_width_and_widens_only_a_pipe():
    """The console of `aitb topo inspect`: on a terminal rich's own width (here a pty of 100
    columns), on a pipe wider than rich's 80-column fallback (the netns test
    test_inspect_into_a_pipe_prints_whole_names runs the command on a live lab)."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    master, slave = pty.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        proc = _probe_console(slave, env)
        os.close(slave)
        slave = -1
        _, err = proc.communicate(timeout=60)
        tty_out = b""
        while True:
            try:
                chunk = os.read(master, 1024)
            except OSError:  # EIO: the child closed the pty
                break
            if not chunk:
                break
            tty_out += chunk
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert proc.returncode == 0, err
    assert tty_out.decode().split() == ["True", "100"]
    piped = _probe_console(subprocess.PIPE, env)
    out, err = piped.communicate(timeout=60)
    is_terminal, width = out.split()
    assert piped.returncode == 0 and is_terminal == "False" and int(width) > 1000, err
