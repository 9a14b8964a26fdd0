"""The VM's Python image: built from the trees (mtimes kept, .pyc inside, exclusions empty),
rebuilt only when an input changes, and guest mount lines that are valid sh. No root: mke2fs
writes an image file; debugfs (e2fsprogs, like mke2fs) reads it back without mounting."""

import os
import subprocess
from pathlib import Path

import pytest

from models.errors import LabError
from testbed.vm.boot import vng_argv
from testbed.vm.image import ImageTree, ensure_image, guest_mount_lines
from testbed.vm.kernel import StockKernel


def _debugfs(image: Path, request: str) -> str:
    return subprocess.run(["debugfs", "-R", request, str(image)], capture_output=True,
                          text=True, check=True).stdout


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "prefix"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("VALUE = 42\n")
    os.utime(root / "pkg" / "mod.py", (1_000_000_000, 1_000_000_000))
    (root / "big").mkdir()
    (root / "big" / "huge.bin").write_bytes(b"x" * 1000)
    return ImageTree(root, excluded=("big",))


def test_image_holds_the_tree_with_its_mtimes_and_pyc_and_leaves_exclusions_empty(tree, tmp_path):
    image = tmp_path / "vm" / "python.ext4"
    ensure_image([tree], image=image)
    listing = _debugfs(image, "ls -l /0/pkg/__pycache__")
    assert "mod.cpython-" in listing  # precompiled on the host, before the copy
    # Python accepts a .pyc only if the source's mtime matches: the image must keep it.
    assert "mtime: 0x3b9aca00" in _debugfs(image, "stat /0/pkg/mod.py")  # 1e9 s in hex
    assert "VALUE = 42" in _debugfs(image, "cat /0/pkg/mod.py")
    assert "huge.bin" not in _debugfs(image, "ls /0/big")


def test_image_is_rebuilt_only_when_an_input_changes(tree, tmp_path):
    image = tmp_path / "python.ext4"
    ensure_image([tree], image=image)
    first = image.stat().st_ino
    ensure_image([tree], image=image)
    assert image.stat().st_ino == first  # nothing changed: same file
    (tree.path / "pkg" / "mod.py").write_text("VALUE = 43\n")
    ensure_image([tree], image=image)
    assert image.stat().st_ino != first
    assert "VALUE = 43" in _debugfs(image, "cat /0/pkg/mod.py")
    # The excluded tree is not an input: changing it does not rebuild.
    second = image.stat().st_ino
    (tree.path / "big" / "huge.bin").write_bytes(b"y")
    ensure_image([tree], image=image)
    assert image.stat().st_ino == second


def test_paths_that_vng_cannot_carry_are_refused(tree, tmp_path):
    with pytest.raises(LabError, match="blanks or commas"):
        ensure_image([tree], image=tmp_path / "a,b" / "python.ext4")


def test_guest_mount_lines_are_valid_sh_and_quote_paths(tree):
    lines = guest_mount_lines([tree, ImageTree(Path("/v/it's"))], "/r/image.log")
    script = "\n".join(lines) + "\n"
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)
    assert "_m --bind /run/aitb-python/fs/1 '/v/it'\"'\"'s'" in script
    # the excluded directory is set aside before the tree is covered, then put back over it
    aside = script.index(f"_m --bind {tree.path}/big /run/aitb-python/keep/0/big")
    cover = script.index(f"_m --bind /run/aitb-python/fs/0 {tree.path}")
    back = script.index(f"_m --bind /run/aitb-python/keep/0/big {tree.path}/big")
    assert aside < cover < back


def test_vng_argv_attaches_the_image_read_only():
    kernel = StockKernel(Path("/k/vmlinuz-1"), "1")
    argv = vng_argv(Path("/v/vng"), kernel, accel="tcg", rwdirs=[], script=Path("/s"),
                    disk=Path("/c/.vm/python.ext4"))
    assert "--qemu-opts=-drive file=/c/.vm/python.ext4,if=virtio,format=raw,readonly=on" in argv
    assert argv.index("--exec") > argv.index(
        "--qemu-opts=-drive file=/c/.vm/python.ext4,if=virtio,format=raw,readonly=on")


def test_missing_mke2fs_is_named_only_when_a_build_is_needed(tree, tmp_path, monkeypatch):
    image = tmp_path / "python.ext4"
    ensure_image([tree], image=image)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    ensure_image([tree], image=image)  # up to date: mke2fs is not needed
    (tree.path / "pkg" / "mod.py").write_text("VALUE = 44\n")
    with pytest.raises(LabError, match="mke2fs not found"):
        ensure_image([tree], image=image)
