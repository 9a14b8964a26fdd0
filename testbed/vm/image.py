"""A read-only ext4 image of this Python installation, mounted in the VM over the same paths.

The guest sees the host's root over 9p without caching (virtme-ng fixes the mount options), and
under software emulation every stat/open of an import is a slow round trip:
``import orchestration.cli.app``
took 31-38 s in the guest against 0.3 s on the host. So the interpreter's standard library and
the virtual environment (with their ``.pyc`` files) are copied once into an ext4 image under
``.vm/`` of the checkout, attached to the guest as a virtio disk and bind-mounted over the very
same absolute paths (:func:`guest_mount_lines`): every path still works, lookups stay in the
guest's page cache. The image is rebuilt only when its inputs change (:func:`ensure_image`).
Where it cannot be built or mounted the VM still runs, reading Python over 9p (slower).
"""

from __future__ import annotations

import compileall
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from models.errors import LabError
from testbed.vm.kernel import CHECKOUT

__all__ = ["ImageTree", "python_trees", "ensure_image", "guest_mount_lines", "IMAGE",
           "GUEST_DEVICE"]

IMAGE = CHECKOUT / ".vm" / "python.ext4"
GUEST_DEVICE = "/dev/vda"             # the only virtio-blk disk of the guest (vm_boot.vng_argv)
GUEST_MOUNT = "/run/aitb-python"      # guest-only tmpfs; nothing of it reaches the host
FORMAT = "1"                          # bump when the image layout changes
# Our own packages, precompiled on the host: read-only in `aitb --vm`, so the guest cannot
# write their .pyc files itself and would recompile each module in every process.
CHECKOUT_PACKAGES = ("aitb", "testbed", "topologies", "workloads", "traffic_gen", "analysis")


@dataclass(frozen=True)
class ImageTree:
    """One host directory copied into the image (as ``<index>/``) and mounted over itself.

    ``excluded`` are subdirectory names left out of the image (empty there); in the guest the
    host's own 9p directories are bind-mounted back over them, so they stay reachable.
    """

    path: Path
    excluded: tuple[str, ...] = ()


def python_trees() -> list[ImageTree]:
    """The trees the running interpreter imports from: its stdlib (without the base
    installation's site-packages and test suite, which a venv does not use) and the venv."""
    stdlib = Path(sysconfig.get_path("stdlib"))
    left_out = tuple(d for d in ("site-packages", "test") if (stdlib / d).is_dir())
    trees = [ImageTree(stdlib, left_out)]
    if sys.prefix != sys.base_prefix:
        trees.append(ImageTree(Path(sys.prefix)))
    return trees


def _walk(tree: ImageTree) -> list[os.DirEntry[str]]:
    entries, stack = [], [tree.path]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                top_excluded = Path(entry.path).parent == tree.path and entry.name in tree.excluded
                if entry.is_dir(follow_symlinks=False) and not top_excluded:
                    stack.append(Path(entry.path))
                entries.append(entry)
    return entries


def fingerprint(trees: list[ImageTree]) -> str:
    """sha256 over every entry's path, size and mtime (ns) in ``trees``, and the format."""
    digest = hashlib.sha256(f"{FORMAT} {trees!r}".encode())
    for tree in trees:
        for entry in sorted(_walk(tree), key=lambda e: e.path):
            st = entry.stat(follow_symlinks=False)
            digest.update(f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def precompile(trees: list[ImageTree]) -> None:
    """Write missing or stale ``.pyc`` files on the host (the guest cannot write them back).

    Files that do not compile in the stdlib or the venv (templates, lib2to3 test data) are
    left as they are: Python never imports them. Our own packages must compile.

    Raises:
        LabError: a checkout package did not compile.
    """
    skip = "|".join(re.escape(f"{t.path}/{e}/") for t in trees for e in t.excluded)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarnings of old test data in the stdlib
        for tree in trees:
            compileall.compile_dir(tree.path, quiet=2, rx=re.compile(skip) if skip else None)


def precompile_checkout() -> None:
    """Write missing or stale ``.pyc`` files of our packages in the checkout (cheap when
    current): in ``aitb --vm`` the checkout is read-only to the guest.

    Raises:
        LabError: a package did not compile (a syntax error: the command would fail anyway).
    """
    for d in (CHECKOUT / p for p in CHECKOUT_PACKAGES):
        if d.is_dir() and not compileall.compile_dir(d, quiet=2):
            raise LabError(f"precompiling {d} for the VM failed (python -m compileall {d})")


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # same mtime and size by construction; no data copied
    except OSError:
        shutil.copy2(src, dst)


def _stage(trees: list[ImageTree], stage: Path) -> tuple[int, int]:
    """Hard-link (else copy) ``trees`` into ``stage/<index>``; return (bytes, entries)."""
    size, count = 0, 0
    for index, tree in enumerate(trees):
        dest = stage / str(index)
        top = lambda d, names, t=tree: [n for n in names if Path(d) == t.path and n in t.excluded]  # noqa: E731
        shutil.copytree(tree.path, dest, symlinks=True, ignore=top, copy_function=_link_or_copy)
        for name in tree.excluded:
            (dest / name).mkdir(exist_ok=True)
    for root, dirs, files in os.walk(stage):
        count += len(dirs) + len(files)
        size += sum(os.lstat(os.path.join(root, f)).st_size for f in files)
    return size, count


def _mke2fs(stage: Path, size_bytes: int, entries: int, out: Path) -> None:
    # Every file takes at least one 4 KiB block, plus directories and metadata: +25 % + 64 MiB.
    blocks = int((size_bytes + entries * 4096) * 1.25 + 64 * 2**20) // 4096
    argv = ["mke2fs", "-q", "-F", "-t", "ext4", "-b", "4096", "-O", "^has_journal", "-m", "0",
            "-N", str(entries + 1024), "-L", "aitb-python", "-d", str(stage), str(out), str(blocks)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabError(f"building the VM's Python image failed: {shlex.join(argv)} exited "
                       f"{proc.returncode}: {proc.stderr.strip()}")


def _stamp_path(image: Path) -> Path:
    """Beside the image: the fingerprint of the inputs it was built from, then the trees."""
    return image.with_suffix(".stamp")


def _build(trees: list[ImageTree], stamp: str, image: Path) -> None:
    """Stage, mke2fs, rename into place, write the stamp; the caller holds the lock."""
    for stale in image.parent.glob("python-image.*"):  # left by a build that was killed
        shutil.rmtree(stale, ignore_errors=True)
    stage = Path(tempfile.mkdtemp(prefix="python-image.", dir=image.parent))
    tmp = image.with_suffix(".ext4.tmp")
    try:
        size, count = _stage(trees, stage / "root")
        _mke2fs(stage / "root", size, count, tmp)
        os.replace(tmp, image)  # a running VM keeps the old inode
        _stamp_path(image).write_text(stamp + "\n" + "\n".join(str(t.path) for t in trees) + "\n")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        tmp.unlink(missing_ok=True)


def ensure_image(trees: list[ImageTree] | None = None, image: Path = IMAGE) -> list[ImageTree]:
    """Build ``image`` (.vm/python.ext4) unless it is up to date with ``trees``; return them.

    Precompiles our packages (:func:`precompile_checkout`), compares the inputs' fingerprint
    with the stamp beside the image and rebuilds (after :func:`precompile`) when they differ,
    under a lock so that concurrent callers build once.

    Raises:
        LabError: mke2fs (Debian e2fsprogs) is missing or failed, or precompiling failed.
    Side effects: ``.pyc`` files in the trees and the checkout; ``.vm/python.*`` files.
    """
    trees = trees or python_trees()
    precompile_checkout()
    bad = [t.path for t in trees if any(c.isspace() for c in str(t.path))]
    if bad or any(c.isspace() or c == "," for c in str(image)):
        raise LabError(f"paths with blanks or commas cannot be passed to vng: {bad or image}")
    image.parent.mkdir(parents=True, exist_ok=True)
    with open(image.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = fingerprint(trees)
        done = _stamp_path(image)
        if image.is_file() and done.is_file() and done.read_text().split()[0] == stamp:
            return trees
        if shutil.which("mke2fs") is None:
            raise LabError("mke2fs not found (Debian package e2fsprogs)")
        precompile(trees)
        _build(trees, fingerprint(trees), image)
    return trees


def guest_mount_lines(trees: list[ImageTree], log: str) -> list[str]:
    """Guest /bin/sh lines mounting the image (``GUEST_DEVICE``) over ``trees`` read-only.

    On any failure the mounts made so far are undone, the reason goes to ``log`` (a shell-quoted
    path) and the command runs on 9p as before. The mounts live in the guest only.
    """
    q = shlex.quote
    steps = ["modprobe -a virtio_blk ext4", f"mkdir -p {GUEST_MOUNT}/fs",
             f"mount -t ext4 -o ro,noload {GUEST_DEVICE} {GUEST_MOUNT}/fs"]
    for i, tree in enumerate(trees):
        keep = [(f"{GUEST_MOUNT}/keep/{i}/{e}", f"{tree.path}/{e}") for e in tree.excluded]
        steps += [f"mkdir -p {q(k)} && _m --bind {q(orig)} {q(k)}" for k, orig in keep]
        steps.append(f"_m --bind {GUEST_MOUNT}/fs/{i} {q(str(tree.path))}")
        steps += [f"_m --bind {q(k)} {q(orig)}" for k, orig in keep]
    body = "\n".join(f"  {s} || {{ _undo; return 1; }}" for s in steps)
    return [
        "_done=''",
        '_m() { mount "$@" && _done="${3} ${_done}"; }',  # most recent first
        '_undo() { for t in $_done; do umount "$t"; done; '
        f'umount {GUEST_MOUNT}/fs 2>/dev/null; }}',
        "_image() {", body, "}",
        f"_image >{log} 2>&1 || echo failed >>{log}",
    ]


if __name__ == "__main__":  # scripts/setup-vm.sh: build the image now rather than at first boot
    try:
        built = ensure_image()
    except LabError as exc:
        sys.exit(f"vm_image: {exc}")
    print(f"vm_image: {IMAGE} holds {', '.join(str(t.path) for t in built)}")
