"""A tiny local image for container-host tests: ``FROM scratch`` plus Debian's static busybox
(no registry is reachable here, see KERNEL.md "Docker engine"), and a docker engine to build
it in: the running one, else a dockerd this helper starts and stops by pid."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.containers.dockerd import DOCKERD_ARGV, client
from testbed.lab.registry import pid_start_time
from testbed.ns.procs import end_process

BUSYBOX = Path("/bin/busybox")  # Debian busybox-static
TAG = "aitb-test-busybox:1"
# the Python image of testbed.containers.images (this host's interpreter) under a tag of the
# tests' own
PYTHON_TAG = f"aitb-test-python:{sys.version_info.major}.{sys.version_info.minor}"
DOCKERFILE = b'FROM scratch\nCOPY rootfs/ /\nCMD ["/bin/sleep", "3600"]\n'


def _context() -> io.BytesIO:
    """Build context as a tar: Dockerfile, rootfs/bin/busybox and a symlink per applet."""
    applets = subprocess.run([str(BUSYBOX), "--list"], check=True, capture_output=True,
                             text=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(DOCKERFILE)
        tar.addfile(info, io.BytesIO(DOCKERFILE))
        tar.add(str(BUSYBOX), arcname="rootfs/bin/busybox")
        for name in applets:
            if name != "busybox":
                link = tarfile.TarInfo(f"rootfs/bin/{name}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        tmp = tarfile.TarInfo("rootfs/tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(tmp)
    buf.seek(0)
    return buf


def build_image(cli) -> bool:
    """Build :data:`TAG` in the engine of ``cli`` unless it is there; True if built here."""
    import docker

    try:
        cli.images.get(TAG)
        return False
    except docker.errors.ImageNotFound:
        cli.images.build(fileobj=_context(), custom_context=True, tag=TAG, rm=True)
        return True


class Engine:
    """The running docker engine, or one started here (ended by pid in :meth:`stop`)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.start_ticks: int | None = None
        self.cli = client()
        if self.cli is None:
            with open(log, "ab") as out:
                self.proc = subprocess.Popen(list(DOCKERD_ARGV), stdout=out,
                                             stderr=subprocess.STDOUT, start_new_session=True)
            self.start_ticks = pid_start_time(self.proc.pid)
            self.cli = self._wait(log)

    def _wait(self, log: Path):
        deadline = time.monotonic() + 30  # dockerd answers in 1-3 s here
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited: {log.read_text()[-2000:]}")
            cli = client()
            if cli is not None:
                return cli
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"dockerd did not answer in 30 s: {log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Stop the dockerd started here (if any) by its pid; it must be gone afterwards."""
        if self.proc is not None:
            end_process(self.proc.pid, self.start_ticks, self.proc, grace_s=20)
            assert self.proc.poll() is not None, f"dockerd {self.proc.pid} still runs"
            self.proc = None



def engine_with_image(tmp_path_factory, build: Callable[[Any], bool], tag: str
                      ) -> Iterator[Engine]:
    """Body of a module-scoped ``engine`` fixture: an :class:`Engine` whose image ``tag`` is
    built by ``build(cli)`` (True if it built it); the image is removed again only if it was
    built here, and a dockerd started here is stopped by pid. Skips without root."""
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, docker engine)")
    eng = Engine(tmp_path_factory.mktemp("dockerd") / "dockerd.log")
    built = False
    try:
        built = build(eng.cli)
        yield eng
    finally:
        if built:  # leave the engine's image store as we found it
            eng.cli.images.remove(tag, force=True)
        eng.stop()
