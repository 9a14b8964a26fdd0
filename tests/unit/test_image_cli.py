"""``aitb image build``: bad input is refused (exit 2, naming the option) before any engine
is asked; the ELF closure of this interpreter holds its loader and libc."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testbed.containers.images import interpreter, package_files, shared_libraries


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestration.cli", "image", "build", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("args", "needle"), [
    (["t:1", "--file", "/nonexistent/aitb-z:/opt/z"], "is not a readable file"),
    (["t:1", "--file", "/etc/hostname:relative/z"], "absolute DEST"),
    (["t:1", "--package", "aitb-no-such-dist"], "not installed in this Python"),
    (["Bad Tag!"], "not a valid docker reference"),
    (["Upper/case:1"], "not a valid docker reference"),
    (["aitb-x:bad tag"], "not a valid docker reference"),
])
def test_bad_input_exits_2_naming_the_option(args, needle):
    out = _cli(*args)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("tag", ["aitb-gloo:1", "localhost:5000/lab/py:3.11", "a__b", "a-b.c"])
def test_valid_references_pass_the_tag_check(tag):
    from orchestration.cli.commands.image import _tag

    assert _tag(tag) == tag


def test_closure_of_the_interpreter():
    libs = {p.name for p in shared_libraries([interpreter()])}
    assert "libc.so.6" in libs and any(n.startswith("ld-linux") for n in libs)


def test_package_files_follow_requirements():
    files, sites = package_files(["pydantic"])  # requires pydantic-core, typing-extensions
    names = {f.name for f in files}
    assert "main.py" in names and "typing_extensions.py" in names
    assert any(n.startswith("_pydantic_core") and ".so" in n for n in names)
    assert all(any(str(f).startswith(str(s)) for s in sites) for f in files)
