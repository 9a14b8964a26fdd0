"""Packet capture during a run: one tcpdump per chosen interface, inside its node's namespace.

    cap = Capture(lab, run_dir / "captures", points, CaptureConfig(snaplen_bytes=128))
    cap.start()     # returns once every tcpdump says it is listening
    ...             # traffic
    index = cap.stop()   # SIGTERM to each pid we started, wait, write captures/index.json

Each tcpdump runs as ``tcpdump -i IF -s SNAPLEN -U -w captures/<node>__<ifname>.pcap -C MB
-W FILES -Z root --immediate-mode --time-stamp-precision=nano -B KIB``:

- ``-B``: the kernel ring that holds packets until tcpdump reads them (:func:`kernel_buffer_kib`):
  a share of a 256 MiB budget over the run's captured interfaces, 2 to 32 MiB each, so that a
  few interfaces' rings hold a whole small run's headers even when tcpdump is not scheduled for
  a while (a loaded 2-core machine), and hundreds of interfaces stay at libpcap's 2 MiB.

- ``-s``: headers only (default 128 bytes: Ethernet + IPv4/IPv6 + TCP with options).
- ``-C``/``-W``: size-bounded ring of ``FILES`` files of about ``rotate_size`` each (tcpdump's
  unit for ``-C`` is 10^6 bytes, so the size is rounded up to whole MB); tcpdump names them
  ``.pcap0``, ``.pcap1``, ...; once it has stopped they are renamed ``<node>__<ifname>-0.pcap``,
  ``-1.pcap``, ... oldest first, so that Wireshark's file dialog and file associations
  (``*.pcap``) find them.
- ``-U``: every packet is written through at once, so a normal stop (SIGTERM, then wait) leaves
  no cut record, and even a killed tcpdump loses at most the packet being written.
- ``--immediate-mode``: packets reach tcpdump as they arrive, not in kernel blocks, so stopping
  right after the traffic loses none of the last ones.
- ``--time-stamp-precision=nano``: nanosecond pcap; the host clock (CLOCK_REALTIME) like the
  records and counter samples.
- ``-Z root``: keep root, so rotated files can still be created in the run directory.

tcpdump reports its counters only as text on stderr at exit ("N packets captured", "N packets
dropped by kernel"); those two lines are read from it (there is no other interface to them).
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.errors import LabError
from testbed.capture.points import CapturePoint

__all__ = ["CaptureConfig", "Capture", "tcpdump_argv", "pcap_base", "kernel_buffer_kib"]

LISTEN_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
SETTLE_S = 0.1  # after the traffic, before the stop: packets still on a delay line or a queue
# kernel ring per tcpdump (KiB): a share of the budget, at least libpcap's default (2 MiB, about
# 8000 headers-only packets in immediate mode's 256-byte slots), at most 32 MiB
KERNEL_BUFFER_BUDGET_KIB = 256 * 1024
KERNEL_BUFFER_MIN_KIB, KERNEL_BUFFER_MAX_KIB = 2048, 32 * 1024
_STATS = re.compile(r"^(\d+) packets? (captured|received by filter|dropped by kernel)$")


@dataclass(frozen=True)
class CaptureConfig:
    """snaplen_bytes: bytes kept per packet; rotate_size_bytes: size of one file before the next
    (rounded up to whole 10^6 bytes); files: files in the ring (older ones are overwritten);
    engine: ``tcpdump`` (one process per interface, this module) or ``shared`` (one capturer
    per CPU for all interfaces, :mod:`testbed.capture.shared`), see :func:`make_capture`."""

    snaplen_bytes: int = 128
    rotate_size_bytes: int = 100 * 10**6
    files: int = 4
    engine: str = "tcpdump"


def pcap_base(point: CapturePoint) -> str:
    """File name (without tcpdump's ring number) of ``point``: ``<node>__<ifname>.pcap``."""
    return f"{point.node}__{point.ifname}.pcap"


def kernel_buffer_kib(interfaces: int) -> int:
    """Kernel ring of each tcpdump (KiB, tcpdump's ``-B``) when ``interfaces`` are captured at
    once: the 256 MiB budget shared out, clamped to 2..32 MiB."""
    share = KERNEL_BUFFER_BUDGET_KIB // max(1, interfaces)
    return max(KERNEL_BUFFER_MIN_KIB, min(KERNEL_BUFFER_MAX_KIB, share))


def tcpdump_argv(point: CapturePoint, path: Path, cfg: CaptureConfig,
                 buffer_kib: int = KERNEL_BUFFER_MIN_KIB) -> list[str]:
    """The tcpdump command for ``point`` writing to ``path`` with a kernel ring of
    ``buffer_kib`` KiB (see the module docstring)."""
    mb = max(1, math.ceil(cfg.rotate_size_bytes / 10**6))
    return ["tcpdump", "-i", point.ifname, "-s", str(cfg.snaplen_bytes), "-U", "-w", str(path),
            "-C", str(mb), "-W", str(cfg.files), "-Z", "root", "--immediate-mode",
            "--time-stamp-precision=nano", "-B", str(buffer_kib)]


@dataclass
class _Running:
    point: CapturePoint
    argv: list[str]
    proc: subprocess.Popen[bytes]
    lines: list[str] = field(default_factory=list)
    listening: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None

    def read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").strip()
            self.lines.append(line)
            if "listening on" in line:
                self.listening.set()

    def stats(self) -> dict[str, int | None]:
        found: dict[str, int] = {}
        for line in self.lines:
            m = _STATS.match(line)
            if m:
                found[m.group(2)] = int(m.group(1))
        return {"packets_captured": found.get("captured"),
                "packets_dropped_by_kernel": found.get("dropped by kernel")}


class Capture:
    """tcpdumps of one run on ``points`` of ``lab``, files under ``out_dir``.

    Side effects: one tcpdump process per point inside its node's namespace (registered with
    the lab, so :meth:`Lab.down` ends any left over), files ``out_dir/<node>__<ifname>-<k>.pcap``
    and ``out_dir/index.json``. Needs root and tcpdump.
    """

    def __init__(self, lab: Any, out_dir: Path, points: list[CapturePoint],
                 config: CaptureConfig) -> None:
        self.lab, self.out_dir, self.points, self.config = lab, Path(out_dir), points, config
        self.running: list[_Running] = []

    def start(self) -> None:
        """Start every tcpdump and wait until each reports that it is listening. Raises
        LabError naming node, interface and tcpdump's message if one fails (the ones already
        started are stopped first)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        try:
            for p in self.points:
                self._start_one(p)
            deadline = time.monotonic() + LISTEN_TIMEOUT_S
            for r in self.running:
                self._wait_listening(r, deadline)
        except BaseException:
            self._stop_all()
            raise

    def _start_one(self, point: CapturePoint) -> None:
        argv = tcpdump_argv(point, self.out_dir / pcap_base(point), self.config,
                            kernel_buffer_kib(len(self.points)))
        proc = self.lab.popen(point.node, argv, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        r = _Running(point, argv, proc)
        r.reader = threading.Thread(target=r.read_stderr, name="aitb-tcpdump-stderr",
                                    daemon=True)
        r.reader.start()
        self.running.append(r)

    def _wait_listening(self, r: _Running, deadline: float) -> None:
        while not r.listening.wait(0.05):
            if r.proc.poll() is not None or time.monotonic() > deadline:
                time.sleep(0.05)  # let the reader take tcpdump's last words
                what = "exited" if r.proc.poll() is not None else "is not listening"
                raise LabError(f"capture on node {r.point.node} interface {r.point.ifname}: "
                               f"tcpdump {what} (argv: {' '.join(r.argv)}): "
                               + ("; ".join(r.lines[-5:]) or "no output"))

    def stop(self, settle_s: float = SETTLE_S) -> dict[str, Any]:
        """Wait ``settle_s``, stop every tcpdump (SIGTERM to its pid, then wait), write and
        return index.json. Raises LabError naming the interfaces whose tcpdump had to be
        killed or failed (index.json is written first)."""
        if self.running:
            time.sleep(settle_s)
        problems = self._stop_all()
        self._rename_rings()
        index = self.index()
        (self.out_dir / "index.json").write_text(json.dumps(index, indent=1))
        if problems:
            raise LabError("capture: " + "; ".join(problems))
        return index

    def _stop_all(self) -> list[str]:
        for r in self.running:
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGTERM)
        problems = []
        for r in self.running:
            problems += self._reap(r)
        return problems

    def _reap(self, r: _Running) -> list[str]:
        where = f"node {r.point.node} interface {r.point.ifname}"
        try:
            r.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            r.proc.kill()
            r.proc.wait()
            return [f"{where}: tcpdump did not stop within {STOP_TIMEOUT_S:g} s (killed; "
                    "its last record may be cut)"]
        finally:
            if r.reader is not None:
                r.reader.join(timeout=5)
        if r.proc.returncode not in (0, -signal.SIGTERM):
            return [f"{where}: tcpdump exited with status {r.proc.returncode}: "
                    + "; ".join(r.lines[-3:])]
        return []

    def _ring(self, point: CapturePoint) -> list[Path]:
        """This interface's files, oldest first: renamed ones by their number, else tcpdump's
        ring by modification time (a wrapped ring's lowest number is not its oldest)."""
        base = pcap_base(point)
        stem = re.escape(base.removesuffix(".pcap"))
        renamed = [(int(m[1]), f) for f in self.out_dir.iterdir()
                   if (m := re.fullmatch(stem + r"-(\d+)\.pcap", f.name))]
        if renamed:
            return [f for _k, f in sorted(renamed)]
        ring = [f for f in self.out_dir.iterdir() if re.fullmatch(re.escape(base) + r"\d*", f.name)]
        return sorted(ring, key=lambda f: (f.stat().st_mtime_ns, len(f.name), f.name))

    def _rename_rings(self) -> None:
        """``<base>N`` -> ``<stem>-K.pcap``, K = 0 for the oldest (tcpdump has stopped)."""
        for r in self.running:
            stem = pcap_base(r.point).removesuffix(".pcap")
            for k, f in enumerate(self._ring(r.point)):
                f.rename(f.with_name(f"{stem}-{k}.pcap"))

    def index(self) -> dict[str, Any]:
        """index.json (contract section 1): snaplen and, per interface, node, ifname, link,
        files (paths relative to the run directory, oldest first) and tcpdump's counters
        (packets captured counts every packet written, also to files the ring overwrote) with
        its kernel ring (``kernel_buffer_kib``)."""
        out = []
        for r in self.running:
            files = self._ring(r.point)
            out.append({"node": r.point.node, "ifname": r.point.ifname, "link": r.point.link,
                        "files": [f"{self.out_dir.name}/{f.name}" for f in files],
                        **r.stats(), "kernel_buffer_kib": kernel_buffer_kib(len(self.points))})
        return {"snaplen": self.config.snaplen_bytes, "engine": "tcpdump", "interfaces": out}
