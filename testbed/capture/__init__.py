"""Packet capture during a run.

- :mod:`.points` (pure): which interfaces a run captures on
- :mod:`.tcpdump`: one tcpdump per chosen interface, inside its node's namespace
- :mod:`.shared` (with :mod:`.ring`, :mod:`.shared_main`): one capturer per CPU for all chosen
  interfaces, AF_PACKET TPACKET_V3 rings opened in each namespace; the same files
- :func:`make_capture`: the capture of a :class:`.tcpdump.CaptureConfig`'s engine
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when used: a capturer process imports only .ring from here
    from testbed.capture.points import CapturePoint
    from testbed.capture.tcpdump import Capture, CaptureConfig

__all__ = ["make_capture"]


def make_capture(lab: Any, out_dir: Path, points: list[CapturePoint], config: CaptureConfig
                 ) -> Capture:
    """The capture of ``config.engine`` (``tcpdump`` or ``shared``) on ``points`` of ``lab``;
    both have ``start()``, ``stop()`` and ``index()`` and write the same files. Raises
    ValueError for another engine (the experiment model admits only these two)."""
    from testbed.capture.shared import SharedCapture
    from testbed.capture.tcpdump import Capture

    if config.engine == "shared":
        return SharedCapture(lab, out_dir, points, config)
    if config.engine != "tcpdump":
        raise ValueError(f"unknown capture engine {config.engine!r}")
    return Capture(lab, out_dir, points, config)

