"""Packet capture without a process per interface: one capturer per CPU for all of a run's
captured interfaces (``capture: {engine: shared}``).

    cap = SharedCapture(lab, run_dir / "captures", points, CaptureConfig(snaplen_bytes=128))
    cap.start()     # returns once every ring is bound (packets are kept from then on)
    ...             # traffic
    index = cap.stop()   # SIGTERM to each capturer, wait, write captures/index.json

The interfaces are split into contiguous shares over ``min(CPUs, interfaces)`` capturer
processes (:mod:`testbed.capture.shared_main`); each opens one AF_PACKET TPACKET_V3 ring per
interface inside the interface's namespace and serves all of them from one epoll
(:mod:`testbed.capture.ring`). The files, their names, their rotation and index.json are
those of the tcpdump engine (:mod:`testbed.capture.tcpdump`), so ``aitb pcap`` and analysis
read either. The rings share tcpdump's 256 MiB budget (:func:`ring_kib`: up to 32 MiB each,
as tcpdump's ``-B``, but down to 256 KiB instead of libpcap's 2 MiB, so that a thousand
interfaces stay within the budget: one process drains them all in whole blocks), and the
drops the kernel counts for each (``PACKET_STATISTICS``) are index.json's
``packets_dropped_by_kernel``, as tcpdump's are.
index.json adds ``engine`` and the capturers' CPU seconds (``capture_cpu_s``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from models.errors import LabError
from testbed.capture.points import CapturePoint
from testbed.capture.tcpdump import (
    KERNEL_BUFFER_BUDGET_KIB,
    KERNEL_BUFFER_MAX_KIB,
    LISTEN_TIMEOUT_S,
    SETTLE_S,
    STOP_TIMEOUT_S,
    Capture,
    CaptureConfig,
    pcap_base,
)

__all__ = ["SharedCapture", "capturer_count", "ring_kib", "ENGINES"]

ENGINES = ("tcpdump", "shared")
RETIRE_MS = 50  # a partly filled block reaches the capturer this long after its first packet
RING_MIN_KIB = 256  # two 128 KiB blocks: ~1300 headers-only packets (48 + 128 B each, aligned)


def ring_kib(interfaces: int) -> int:
    """Kernel ring of each interface (KiB) when ``interfaces`` are captured at once: tcpdump's
    256 MiB budget shared out (:data:`testbed.capture.tcpdump.KERNEL_BUFFER_BUDGET_KIB`),
    clamped to 256 KiB..32 MiB."""
    share = KERNEL_BUFFER_BUDGET_KIB // max(1, interfaces)
    return max(RING_MIN_KIB, min(KERNEL_BUFFER_MAX_KIB, share))


def capturer_count(interfaces: int, cpus: int | None = None) -> int:
    """Capturer processes for ``interfaces``: one per CPU this process may run on, never more
    than there are interfaces."""
    cpus = cpus or len(os.sched_getaffinity(0))
    return max(1, min(cpus, interfaces))


class SharedCapture(Capture):
    """Shared capturers of one run on ``points`` of ``lab``, files under ``out_dir`` (the same
    files as :class:`testbed.capture.tcpdump.Capture`).

    Side effects: :func:`capturer_count` Python processes in the root namespace (registered
    with the lab, so :meth:`Lab.down` ends any left over), files
    ``out_dir/<node>__<ifname>-<k>.pcap``, ``out_dir/index.json`` and the capturers' own
    ``out_dir/capturer-<i>.{json,log}``. Needs root.
    """

    def __init__(self, lab: Any, out_dir: Path, points: list[CapturePoint],
                 config: CaptureConfig, capturers: int | None = None) -> None:
        super().__init__(lab, out_dir, points, config)
        self.capturers = capturers or capturer_count(len(points))
        self.procs: list[tuple[subprocess.Popen[bytes], list[CapturePoint], Path]] = []
        self.stats: dict[CapturePoint, dict[str, Any]] = {}
        self.cpu_s: float | None = None

    def _shares(self) -> list[list[CapturePoint]]:
        n = min(self.capturers, len(self.points))
        size = -(-len(self.points) // n)
        return [self.points[i:i + size] for i in range(0, len(self.points), size)]

    def start(self) -> None:
        """Start the capturers and wait until each has bound all its rings. Raises LabError
        naming the capturer's error (an interface it could not open) or a capturer that is
        not ready within the tcpdump engine's LISTEN_TIMEOUT_S (all are stopped first)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        ring = ring_kib(len(self.points))
        try:
            for i, share in enumerate(self._shares()):
                stats = self.out_dir / f"capturer-{i}.json"
                conf = {"points": [[p.node, self.lab.netns_name(p.node), p.ifname,
                                    str(self.out_dir / pcap_base(p))] for p in share],
                        "snaplen_bytes": self.config.snaplen_bytes, "ring_kib": ring,
                        "retire_ms": RETIRE_MS, "rotate_size_bytes": self.config.rotate_size_bytes,
                        "files": self.config.files, "stats": str(stats)}
                argv = [sys.executable, "-m", "testbed.capture.shared_main", json.dumps(conf)]
                with (self.out_dir / f"capturer-{i}.log").open("wb") as log:
                    proc = self.lab.popen_host(argv, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.PIPE, stderr=log,
                                               record={"argv": argv[:3]})
                self.procs.append((proc, share, stats))
            deadline = time.monotonic() + LISTEN_TIMEOUT_S
            for i, (proc, _share, stats) in enumerate(self.procs):
                self._wait_ready(i, proc, stats, deadline)
        except BaseException:
            self._stop_all()
            raise

    def _wait_ready(self, i: int, proc: subprocess.Popen[bytes], stats: Path,
                    deadline: float) -> None:
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.1)
            if ready and proc.stdout.readline().strip() == b"ready":
                return
            if proc.poll() is not None:
                break
        self._stop_all()
        error = self._read_stats(stats).get("error") or self._log_tail(i)
        raise LabError(f"capture: shared capturer {i} did not start: {error}")

    def _log_tail(self, i: int) -> str:
        path = self.out_dir / f"capturer-{i}.log"
        text = path.read_text(errors="replace").strip() if path.exists() else ""
        return text[-2000:] or "(no output)"

    @staticmethod
    def _read_stats(path: Path) -> dict[str, Any]:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    def stop(self, settle_s: float = SETTLE_S) -> dict[str, Any]:
        """Wait ``settle_s``, stop every capturer (SIGTERM, then wait: each writes its last
        blocks and its counters), write and return index.json. Raises LabError naming the
        capturers that failed or had to be killed (index.json is written first)."""
        if self.procs:
            time.sleep(settle_s)
        problems = self._stop_all()
        self._rename_rings()
        index = self.index()
        (self.out_dir / "index.json").write_text(json.dumps(index, indent=1))
        if problems:
            raise LabError("capture: " + "; ".join(problems))
        return index

    def _stop_all(self) -> list[str]:
        for proc, _, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        problems, cpu = [], 0.0
        for i, (proc, share, stats) in enumerate(self.procs):
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                problems.append(f"shared capturer {i} did not stop within "
                                f"{STOP_TIMEOUT_S:g} s (killed; its counters are lost)")
            finally:
                if proc.stdout is not None:
                    proc.stdout.close()
            got = self._read_stats(stats)
            cpu += got.get("cpu_s") or 0.0
            for p, s in zip(share, got.get("points", []), strict=False):
                self.stats[p] = s
            if proc.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL) or got.get("error"):
                problems.append(f"shared capturer {i} failed (exit {proc.returncode}): "
                                f"{got.get('error') or self._log_tail(i)}")
        self.cpu_s = cpu if self.procs else None
        self.procs = []
        return problems

    def _rename_rings(self) -> None:
        """``<base>N`` -> ``<stem>-K.pcap``, K = 0 for the oldest (the capturers have ended)."""
        for p in self.points:
            stem = pcap_base(p).removesuffix(".pcap")
            for k, f in enumerate(self._ring(p)):
                f.rename(f.with_name(f"{stem}-{k}.pcap"))

    def index(self) -> dict[str, Any]:
        """index.json of the tcpdump engine (node, ifname, link, files, packets captured and
        dropped by the kernel, kernel ring) plus ``engine`` and ``capture_cpu_s``; the
        counters of an interface whose capturer left none are null."""
        out = []
        for p in self.points:
            s = self.stats.get(p, {})
            out.append({"node": p.node, "ifname": p.ifname, "link": p.link,
                        "files": [f"{self.out_dir.name}/{f.name}" for f in self._ring(p)],
                        "packets_captured": s.get("packets_captured"),
                        "packets_dropped_by_kernel": s.get("packets_dropped_by_kernel"),
                        "kernel_buffer_kib": ring_kib(len(self.points))})
        return {"snaplen": self.config.snaplen_bytes, "engine": "shared",
                "capture_cpu_s": self.cpu_s, "interfaces": out}
