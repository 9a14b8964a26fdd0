"""The ``trace:`` key of a link direction: read and check its file at load time, so a bad trace
stops the topology before anything is created. The file formats are in :mod:`models.trace`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from models.errors import SpecError, SpecIssue
from models.shaping import Shaping
from models.trace import LinkTrace, TraceStep, read_trace
from models.units import UnitError
from topologies.graph import Edge
from topologies.shaping import link_trace_specs, trace_key_path
from topologies.spec import ProfileSpec, TopologySpec, TraceSpec

__all__ = ["link_traces"]


def _check_steps(base: Shaping, steps: tuple[TraceStep, ...]) -> None:
    """Every step's values over ``base`` (and the steps before) make a valid Shaping; raises
    UnitError naming the step's time otherwise (jitter above a traced delay, ...)."""
    current = base
    for step in steps:
        changes = {k: v for k, v in (("rate_bps", step.rate_bps), ("delay_s", step.delay_s),
                                     ("loss_pct", step.loss_pct)) if v is not None}
        if step.loss_pct is not None:
            changes["loss_gemodel"] = None  # a traced random loss replaces a burst model
        try:
            current = current.with_changes(**changes)
        except UnitError as exc:
            raise UnitError(f"the step at {step.t_s:g} s: {exc}") from None


def _one(spec: TraceSpec, edge: Edge, direction: str, base_dir: Path, where: tuple,
         source: str) -> LinkTrace:
    """The trace ``spec`` (set at key path ``where`` of ``source``) of ``direction`` of
    ``edge``, read and checked. Raises SpecError: at the trace file and its line when a line
    of it is wrong, at ``where`` + ``file`` (a line of ``source``) when the file cannot be
    read at all (not found, not a regular file, too large, not UTF-8)."""
    path = Path(spec.file) if Path(spec.file).is_absolute() else base_dir / spec.file
    window = float(spec.window) if spec.window is not None else None  # DurationS
    if window is not None and spec.format != "mahimahi":
        raise SpecError(SpecIssue("window applies to format: mahimahi only",
                                  key_path=(*where, "window")))
    try:
        steps, period = read_trace(path, spec.format, window)
    except SpecError as exc:  # one issue: the trace file, its line, what is wrong
        i = exc.issues[0]
        if i.line is None:  # the file as a whole: the key that names it is at fault
            raise SpecError(SpecIssue(f"{i.message}: {i.file}", key_path=(*where, "file"))
                            ) from None
        raise SpecError(SpecIssue(f"{i.message} (a trace named in {source})", file=i.file,
                                  line=i.line, key_path=where)) from None
    if spec.loop and period <= 0:
        raise SpecError(SpecIssue(f"{path}: loop needs a trace whose last time is above 0 s",
                                  key_path=(*where, "loop")))
    try:
        _check_steps(getattr(edge, direction), steps)
    except UnitError as exc:
        raise SpecError(SpecIssue(f"{path}: {direction}: {exc}", key_path=where)) from None
    return LinkTrace(link=edge.name, direction=direction,  # type: ignore[arg-type]
                     file=str(path), format=spec.format, loop=spec.loop, period_s=period,
                     steps=steps, window_s=window)


def link_traces(spec: TopologySpec, profiles: Mapping[str, ProfileSpec], edges: list[Edge],
                base_dir: Path, source: str) -> tuple[tuple[LinkTrace, ...], list[SpecIssue]]:
    """The traces of every link direction that names one, read from their files (paths
    relative to ``base_dir``), and the issues found: each names the trace file and line when
    the file is at fault, and the link's key path (``links[i].a_to_b.trace``). Reads files;
    creates nothing. A trace shared by several links (a profile's, ``defaults.link``'s) is
    reported once, at the key that sets it."""
    traces, issues = [], []
    for edge in edges:
        link = spec.links[edge.index]
        for direction, tspec in zip(("a_to_b", "b_to_a"),
                                    link_trace_specs(link, profiles, spec.defaults.link),
                                    strict=True):
            if tspec is None:
                continue
            where = trace_key_path(link, edge.index, profiles, spec.defaults.link, direction)
            try:
                traces.append(_one(tspec, edge, direction, base_dir, where, source))
            except SpecError as exc:
                issues += [i for i in exc.issues if str(i) not in {str(j) for j in issues}]
    return tuple(traces), issues
