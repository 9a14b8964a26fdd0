"""Capture and counter sampling around a run's workloads (experiment keys ``capture:`` and
``counters:``, testbed/capture/tcpdump.py, models/counter_columns.py).

    observe = observe_config(spec, source, doc, plan)        # at prepare time: pure, checked
    with observing(observe, lab, run_dir, manifest, progress):
        replay every workload                                # capture and sampling run

Both start after the lab is up and before the first workload (tcpdumps listening, first
counter sample taken) and stop after the last one, also when it fails; the manifest records
what ran (``capture``, ``counters``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.errors import LabError, SpecError, SpecIssue
from models.plan import LabPlan
from models.specfile import with_lines
from testbed.capture.points import CapturePoint, select_interfaces
from testbed.capture.tcpdump import Capture, CaptureConfig
from testbed.counters import CounterSampler, SamplerConfig

__all__ = ["ObserveConfig", "observe_config", "observing", "warn_incomplete"]


@dataclass(frozen=True)
class ObserveConfig:
    """What to capture (``points`` empty: no capture) and sample (``counters`` None: none)."""

    points: tuple[CapturePoint, ...] = ()
    capture: CaptureConfig = CaptureConfig()
    counters: SamplerConfig | None = None


def observe_config(spec: Any, source: str, doc: Any, plan: LabPlan) -> ObserveConfig:
    """The capture points and sampler settings of ``spec`` (an ExperimentSpec) on ``plan``.
    Raises SpecError naming ``source``, the key (``capture.interfaces[i]``) and its line for
    an interface the lab does not have."""
    c, k = spec.capture, spec.counters
    points: list[CapturePoint] = []
    if c.enabled:
        try:
            points = select_interfaces(plan, c.interfaces)
        except SpecError as exc:
            raise with_lines(SpecError([SpecIssue(i.message, file=source, key_path=i.key_path)
                                        for i in exc.issues]), doc, source) from None
    cap = CaptureConfig(snaplen_bytes=c.snaplen,
                        rotate_size_bytes=int(c.rotate_size), files=c.files)
    live = spec.alto.live
    if live and not k.enabled:
        raise with_lines(SpecError(SpecIssue(
            "live cost maps are computed from the counters: enable counters (counters: "
            "{enabled: true}) or drop alto.live", file=source, key_path=("alto", "live"))),
            doc, source)
    counters = SamplerConfig(interval_s=float(k.interval), tcp=k.tcp,
                             live_every_s=float(spec.alto.refresh) if live
                             else None) if k.enabled else None
    return ObserveConfig(tuple(points), cap, counters)


@contextmanager
def observing(cfg: ObserveConfig, lab: Any, run_dir: Path, manifest: dict[str, Any],
              progress: Callable[[str], None]) -> Iterator[None]:
    """Run capture and sampling of ``lab`` around the body; write ``run_dir/captures/`` and
    ``run_dir/counters/`` and the manifest's ``capture``/``counters`` entries. A failure to
    stop either is raised as LabError after both were stopped (or added as a note to the
    body's own exception)."""
    sampler = capture = None
    manifest["capture"] = {"enabled": bool(cfg.points)}
    manifest["counters"] = {"enabled": cfg.counters is not None}
    try:
        if cfg.counters is not None:
            sampler = CounterSampler(lab, run_dir / "counters", cfg.counters)
            sampler.start()
            progress(f"sampling counters every {cfg.counters.interval_s * 1e3:g} ms")
        if cfg.points:
            capture = Capture(lab, run_dir / "captures", list(cfg.points), cfg.capture)
            capture.start()
            progress(f"capturing on {len(cfg.points)} interface(s)")
        yield
    except BaseException as exc:
        for problem in _stop(capture, sampler, manifest):
            exc.add_note(problem)
        raise
    problems = _stop(capture, sampler, manifest)
    if problems:
        raise LabError("; ".join(problems))


def _stop(capture: Capture | None, sampler: CounterSampler | None,
          manifest: dict[str, Any]) -> list[str]:
    problems = []
    if capture is not None:
        try:
            index = capture.stop()
            manifest["capture"].update(_capture_summary(index))
            warn_incomplete(index)
        except LabError as exc:
            problems.append(str(exc))
            manifest["capture"].update(_capture_summary(capture.index()), error=str(exc))
    if sampler is not None:
        try:
            manifest["counters"].update(sampler.stop(), dir="counters")
        except LabError as exc:
            problems.append(str(exc))
            manifest["counters"].update(error=str(exc))
    return problems


def warn_incomplete(index: dict[str, Any]) -> None:
    """Log (run.log, stderr) the interfaces whose tcpdump's kernel ring overflowed: their
    pcaps lack those packets, and what is computed from the pcaps undercounts."""
    lost = [f"{i['node']}:{i['ifname']} {i['packets_dropped_by_kernel']} "
            f"(ring {i['kernel_buffer_kib']} KiB)"
            for i in index["interfaces"] if i["packets_dropped_by_kernel"]]
    if lost:
        logging.getLogger("aitb.run").warning(
            "capture incomplete: the kernel dropped packets before tcpdump read them: %s; the "
            "pcaps miss them, and retransmissions or flows counted from the captures undercount",
            ", ".join(lost))


def _capture_summary(index: dict[str, Any]) -> dict[str, Any]:
    def total(key: str) -> int | None:
        values = [i[key] for i in index["interfaces"]]
        return None if None in values else sum(values)
    return {"index": "captures/index.json", "snaplen": index["snaplen"],
            "interfaces": [f"{i['node']}:{i['ifname']}" for i in index["interfaces"]],
            "packets_captured": total("packets_captured"),
            "packets_dropped_by_kernel": total("packets_dropped_by_kernel")}
