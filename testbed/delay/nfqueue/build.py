"""Compile the delay-line helper (aitb_delayline.c) with the system C compiler.

``python -m testbed.delay.nfqueue.build`` builds ``<repo>/build/aitb-delayline`` when it is missing
or older than its source; scripts/setup.sh calls it.  Needs the Debian packages
libnetfilter-queue-dev and libmnl-dev (headers and the linker's .so names).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("aitb_delayline.c")
REPO = Path(__file__).resolve().parents[3]
BINARY = REPO / "build" / "aitb-delayline"
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-pthread"]
LIBS = ["-lnetfilter_queue", "-lmnl", "-lm"]
HEADERS = {  # header the source includes -> Debian package that ships it
    "libnetfilter_queue/libnetfilter_queue.h": "libnetfilter-queue-dev",
    "libmnl/libmnl.h": "libmnl-dev",
}
LIBPKG = {"netfilter_queue": "libnetfilter-queue-dev", "mnl": "libmnl-dev"}


class BuildError(RuntimeError):
    """The helper could not be compiled; the message names what to install."""


def needs_build(binary: Path = BINARY, source: Path = SOURCE) -> bool:
    """True when ``binary`` is missing or older than ``source``."""
    try:
        return binary.stat().st_mtime < source.stat().st_mtime
    except FileNotFoundError:
        return True


def compile_argv(cc: str, out: Path, source: Path = SOURCE) -> list[str]:
    """The compiler command line (pure)."""
    return [cc, *CFLAGS, "-o", str(out), str(source), *LIBS]


def explain(stderr: str) -> str:
    """A message naming the missing Debian package when the compiler says so, else ''."""
    for header, pkg in HEADERS.items():
        if header in stderr and ("No such file" in stderr or "not found" in stderr):
            return (f"missing header {header}: install the Debian package {pkg} "
                    f"(apt-get install {pkg})")
    for lib, pkg in LIBPKG.items():
        if f"cannot find -l{lib}" in stderr:
            return (f"missing library lib{lib}.so: install the Debian package {pkg} "
                    f"(apt-get install {pkg})")
    return ""


def build(force: bool = False, binary: Path = BINARY) -> Path:
    """Build the helper if needed and return its path; raises BuildError."""
    if not force and not needs_build(binary):
        return binary
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BuildError("no C compiler (cc): install the Debian package gcc")
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_name(binary.name + f".tmp{os.getpid()}")
    res = subprocess.run(compile_argv(cc, tmp), capture_output=True, text=True)
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        hint = explain(res.stderr)
        raise BuildError((hint + "\n" if hint else "") + f"{cc} failed:\n{res.stderr.strip()}")
    os.replace(tmp, binary)  # atomic: a running lab never sees a half-written binary
    return binary


def helper_path(build_if_needed: bool = True) -> Path:
    """Path of an up-to-date helper binary."""
    return build() if build_if_needed else BINARY


def main(argv: list[str] | None = None) -> int:
    """CLI: build (``--force`` rebuilds), print the path."""
    args = sys.argv[1:] if argv is None else argv
    try:
        path = build(force="--force" in args)
    except BuildError as e:
        print(f"testbed.delay.nfqueue.build: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
