"""Time-varying links: trace files -> steps of (time, rate, delay, loss). Pure; reads one file.

Two file formats (docs/dynamics.md, "Time-varying links: traces"):

``aitb`` -- comma-separated rows under a header line naming the columns; ``t`` first, then any
of ``rate``, ``delay``, ``loss``. Every value carries its unit (read by :mod:`models.units`); an
empty or missing field keeps the value before it (at the first row: the link's own shaping).
``#`` starts a comment. Times strictly increase from 0 or more. The trace lasts until its
last row's time; looped, it starts again there (so a last row with only a time sets the
length of a loop)::

    t,    rate,    delay, loss
    0s,   20Mbit,  20ms,  0%
    5s,   5Mbit
    10s

``mahimahi`` -- mm-link(1)'s packet-delivery trace (mahimahi 0.98, the format cellular and
Wi-Fi measurement studies publish): one integer millisecond timestamp per line, each line one
opportunity to deliver 1500 bytes, timestamps never decreasing; mm-link wraps around to the
start after the last line, shifted by the last timestamp ``T``. aitb turns it into one rate
step per window of ``W`` (default 100 ms)::

    rate_bps(k) = 1500 * 8 * N_k / len_k

where ``N_k`` counts the opportunities whose timestamp (modulo ``T``: an opportunity at ``T``
is the next pass's time 0) lies in ``[k*W, min((k+1)*W, T))`` and ``len_k`` is that interval's
length in seconds. A window with no opportunity (an outage) gets :data:`FLOOR_RATE_BPS`,
because an HTB class needs a rate above zero. Adjacent windows of one rate are one step.
"""

from __future__ import annotations

import bisect
import heapq
import math
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from models.errors import SpecError, SpecIssue
from models.shaping import Shaping
from models.units import UnitError, parse_duration_s, parse_pct, parse_rate_bps

__all__ = ["TraceFormat", "TRACE_FORMATS", "TraceStep", "LinkTrace", "read_trace",
           "parse_aitb_trace", "parse_mahimahi_trace", "MAX_TRACE_BYTES", "MAX_STEPS",
           "MIN_WINDOW_S", "DEFAULT_WINDOW_S", "FLOOR_RATE_BPS", "MAHIMAHI_BYTES",
           "PlannedChange", "planned_changes"]

TraceFormat = Literal["aitb", "mahimahi"]
TRACE_FORMATS: tuple[str, ...] = ("aitb", "mahimahi")
MAX_TRACE_BYTES = 16 * 2**20  # the largest published mahimahi cellular traces are a few MiB
MAX_STEPS = 10_000  # steps are kept in plan.json; 10 000 is 16 min of 100 ms windows
MIN_WINDOW_S = 0.010  # one step costs a netlink change and a read-back (bench/trace_timing.py)
DEFAULT_WINDOW_S = 0.100
MAHIMAHI_BYTES = 1500  # mm-link(1): "each delivery opportunity represents ... 1500 bytes"
FLOOR_RATE_BPS = MAHIMAHI_BYTES * 8  # one opportunity a second: an outage HTB can hold
_COLUMNS = ("rate", "delay", "loss")
_INT = re.compile(r"[0-9]+")


@dataclass(frozen=True, slots=True)
class TraceStep:
    """From ``t_s`` seconds after the trace's start: these values (None: keep the one
    before). rate_bps in bit/s (above 0), delay_s in seconds, loss_pct in percent."""

    t_s: float
    rate_bps: int | None = None
    delay_s: float | None = None
    loss_pct: float | None = None


@dataclass(frozen=True, slots=True)
class LinkTrace:
    """One direction (``a_to_b``/``b_to_a``) of link ``link`` follows ``steps``.

    file: the trace file as read; format: ``aitb`` or ``mahimahi``; loop: start again after
    ``period_s`` seconds (else the last step's values stay); window_s: mahimahi's window.
    """

    link: str
    direction: Literal["a_to_b", "b_to_a"]
    file: str
    format: TraceFormat
    loop: bool
    period_s: float
    steps: tuple[TraceStep, ...]
    window_s: float | None = None


def _issue(file: str, line: int | None, message: str) -> SpecError:
    return SpecError(SpecIssue(message, file=file, line=line))


def _read_text(path: Path) -> str:
    """The text of ``path``: a regular file of at most MAX_TRACE_BYTES, UTF-8."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the loader
    except FileNotFoundError:
        raise _issue(name, None, "trace file not found") from None
    except ValueError:  # os.open refuses a path with a NUL character in it
        raise _issue(name, None, "trace file name contains a NUL character") from None
    except OSError as exc:
        raise _issue(name, None, f"cannot read the trace file: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _issue(name, None, "a trace must be a regular file")
        if st.st_size > MAX_TRACE_BYTES:
            raise _issue(name, None, f"trace file is {st.st_size} bytes; at most "
                         f"{MAX_TRACE_BYTES} ({MAX_TRACE_BYTES // 2**20} MiB)")
        chunks: list[bytes] = []
        while chunk := os.read(fd, MAX_TRACE_BYTES + 1 - sum(map(len, chunks))):
            chunks.append(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _issue(name, None, f"trace file is not UTF-8 text: {exc.reason} at byte "
                     f"{exc.start}") from None


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, content without comment) of every line that has content."""
    for n, raw in enumerate(text.splitlines(), start=1):
        content = raw.split("#", 1)[0].strip()
        if content:
            yield n, content


def _header(file: str, n: int, content: str) -> list[str]:
    cols = [c.strip() for c in content.split(",")]
    if cols[0] != "t":
        raise _issue(file, n, f"the first line must be a header starting with 't' "
                     f"(like 't, rate, delay, loss'); got {content!r}")
    for c in cols[1:]:
        if c not in _COLUMNS:
            raise _issue(file, n, f"unknown column {c!r}; known: t, {', '.join(_COLUMNS)}")
    dup = sorted({c for c in cols if cols.count(c) > 1})
    if dup:
        raise _issue(file, n, f"column {dup[0]!r} appears twice in the header")
    return cols


def _value(col: str, text: str) -> int | float:
    if col == "rate":
        rate = parse_rate_bps(text)
        if rate <= 0:
            raise UnitError(f"rate {text!r} must be above 0 (an HTB class needs a rate)")
        return rate
    return parse_duration_s(text) if col == "delay" else parse_pct(text)


def _row(file: str, n: int, cols: list[str], content: str, prev_t: float | None) -> TraceStep:
    fields = [f.strip() for f in content.split(",")]
    if len(fields) > len(cols):
        raise _issue(file, n, f"{len(fields)} fields but the header names {len(cols)} "
                     f"columns ({', '.join(cols)})")
    values: dict[str, int | float] = {}
    for col, text in zip(cols, fields, strict=False):
        if not text:
            if col == "t":
                raise _issue(file, n, "column t: every row needs a time, like '5s'")
            continue
        try:
            values[col] = parse_duration_s(text) if col == "t" else _value(col, text)
        except UnitError as exc:
            raise _issue(file, n, f"column {col}: {exc}") from None
    t = float(values.pop("t"))
    if prev_t is not None and t <= prev_t:
        raise _issue(file, n, f"column t: {fields[0]!r} is not after the row before "
                     f"({prev_t:g} s); times must strictly increase")
    return TraceStep(t_s=t, rate_bps=values.get("rate"),  # type: ignore[arg-type]
                     delay_s=values.get("delay"), loss_pct=values.get("loss"))


def parse_aitb_trace(text: str, file: str) -> tuple[tuple[TraceStep, ...], float]:
    """Read the ``aitb`` trace format (see the module docstring) from ``text``.

    Returns (steps, period_s): the steps in time order and the last row's time in seconds.
    Raises :class:`SpecError` naming ``file``, the line and what is wrong (no header, unknown
    column, a value without unit, negative, rate 0, times not strictly increasing, too many
    rows, no rows).
    """
    lines = _lines(text)
    first = next(lines, None)
    if first is None:
        raise _issue(file, None, "the trace is empty; expected a header like "
                     "'t, rate, delay, loss' and rows")
    cols = _header(file, *first)
    steps: list[TraceStep] = []
    for n, content in lines:
        if len(steps) == MAX_STEPS:
            raise _issue(file, n, f"more than {MAX_STEPS} rows")
        steps.append(_row(file, n, cols, content, steps[-1].t_s if steps else None))
    if not steps:
        raise _issue(file, first[0], "the trace has a header but no rows")
    return tuple(steps), steps[-1].t_s


def _fast_timestamps(text: str) -> list[int] | None:
    """The timestamps of a well-formed trace with built-ins only (a published trace has
    millions of lines); None when some line needs :func:`_timestamps` to say what is wrong."""
    lines = [x for x in (raw.strip() for raw in text.splitlines()) if x]
    if not all(x.isascii() and x.isdigit() for x in lines):
        return None
    out = list(map(int, lines))
    if not out or not all(a <= b for a, b in zip(out, out[1:], strict=False)) or out[-1] == 0:
        return None
    return out


def _timestamps(text: str, file: str) -> list[int]:
    fast = _fast_timestamps(text)
    if fast is not None:
        return fast
    out: list[int] = []
    for n, content in _lines(text):
        if not _INT.fullmatch(content):
            raise _issue(file, n, f"{content!r} is not a whole number of milliseconds "
                         "(mahimahi traces have one integer timestamp per line)")
        ms = int(content)
        if out and ms < out[-1]:
            raise _issue(file, n, f"timestamp {ms} ms is before the line before ({out[-1]} "
                         "ms); mahimahi timestamps never decrease")
        out.append(ms)
    if not out:
        raise _issue(file, None, "the trace has no timestamps")
    if out[-1] == 0:
        raise _issue(file, None, "the last timestamp is 0 ms: the trace has no length "
                     "(mm-link repeats a trace every last-timestamp milliseconds)")
    return out


def parse_mahimahi_trace(text: str, file: str, window_s: float = DEFAULT_WINDOW_S
                         ) -> tuple[tuple[TraceStep, ...], float]:
    """Convert mm-link(1)'s packet-delivery trace to rate steps, one per ``window_s`` seconds
    (formula in the module docstring). Returns (steps, period_s): period = the last timestamp.
    Raises :class:`SpecError` naming ``file`` and line for a line that is not a whole
    non-negative number, a timestamp before the one above it, an empty trace or one of length
    0, a window below :data:`MIN_WINDOW_S`, more than :data:`MAX_STEPS` steps."""
    if not window_s >= MIN_WINDOW_S:
        raise _issue(file, None, f"window {window_s:g} s is below the minimum of "
                     f"{MIN_WINDOW_S * 1000:g} ms")
    stamps = _timestamps(text, file)
    period_ms = stamps[-1]
    window_ms = window_s * 1000
    n_windows = math.ceil(period_ms / window_ms)
    if n_windows > MAX_STEPS:
        raise _issue(file, None, f"{n_windows} windows of {window_ms:g} ms; at most "
                     f"{MAX_STEPS}: use a larger window")
    # stamps are sorted: window k holds those in [k*W, (k+1)*W); the ones at T (the next
    # pass's 0 ms) belong to window 0
    edges = [bisect.bisect_left(stamps, k * window_ms) for k in range(n_windows)]
    edges.append(bisect.bisect_left(stamps, period_ms))
    counts = [edges[k + 1] - edges[k] for k in range(n_windows)]
    counts[0] += len(stamps) - edges[-1]
    steps: list[TraceStep] = []
    for k, count in enumerate(counts):
        length_s = (min((k + 1) * window_ms, period_ms) - k * window_ms) / 1000
        rate = round(MAHIMAHI_BYTES * 8 * count / length_s) or FLOOR_RATE_BPS
        if not steps or steps[-1].rate_bps != rate:
            steps.append(TraceStep(t_s=k * window_ms / 1000, rate_bps=rate))
    return tuple(steps), period_ms / 1000


def read_trace(path: str | Path, fmt: TraceFormat, window_s: float | None = None
               ) -> tuple[tuple[TraceStep, ...], float]:
    """Read trace file ``path`` in format ``fmt`` (``aitb`` or ``mahimahi``; ``window_s``
    only for mahimahi, default :data:`DEFAULT_WINDOW_S`). Returns (steps, period_s).

    Raises :class:`SpecError` naming the file (and line) when it is missing, not a regular
    file, larger than :data:`MAX_TRACE_BYTES`, not UTF-8, or not valid in its format.
    """
    name = str(path)
    if fmt not in TRACE_FORMATS:
        raise _issue(name, None, f"unknown trace format {fmt!r}; known: "
                     f"{', '.join(TRACE_FORMATS)}")
    if fmt == "aitb" and window_s is not None:
        raise _issue(name, None, "window applies to mahimahi traces only")
    text = _read_text(Path(path))
    if fmt == "aitb":
        return parse_aitb_trace(text, name)
    return parse_mahimahi_trace(text, name, DEFAULT_WINDOW_S if window_s is None else window_s)


@dataclass(frozen=True, slots=True)
class PlannedChange:
    """Set ``direction`` of ``link`` to ``shaping`` at ``t_s`` seconds after the start; the
    ``step``-th row of its trace in pass ``loop`` (0 = the first)."""

    link: str
    direction: str
    t_s: float
    step: int
    loop: int
    shaping: Shaping


def _changes(step: TraceStep) -> dict[str, Any]:
    out: dict[str, Any] = {k: v for k, v in (("rate_bps", step.rate_bps),
                                             ("delay_s", step.delay_s),
                                             ("loss_pct", step.loss_pct)) if v is not None}
    if step.loss_pct is not None:
        out["loss_gemodel"] = None  # a traced random loss replaces a burst model
    return out


def planned_changes(traces: Sequence[LinkTrace], base: Mapping[tuple[str, str], Shaping],
                    until_s: float = float("inf")) -> Iterator[PlannedChange]:
    """Every change of ``traces`` in time order (ties: plan order), up to ``until_s`` seconds;
    endless for a looped trace when ``until_s`` is infinite. ``base``: the shaping of each
    (link, direction) before its first step; a step keeps the values it does not set. A row
    that changes nothing (a trace's closing time-only row) is left out. Pure."""
    current = {(t.link, t.direction): base[(t.link, t.direction)] for t in traces}
    heap = [(t.steps[0].t_s, k, 0, 0) for k, t in enumerate(traces)]
    heapq.heapify(heap)
    while heap:
        t_s, k, i, loop = heapq.heappop(heap)
        if t_s > until_s:
            return
        tr = traces[k]
        if i + 1 < len(tr.steps):
            heapq.heappush(heap, (loop * tr.period_s + tr.steps[i + 1].t_s, k, i + 1, loop))
        elif tr.loop:
            heapq.heappush(heap, ((loop + 1) * tr.period_s + tr.steps[0].t_s, k, 0, loop + 1))
        key = (tr.link, tr.direction)
        new = current[key].with_changes(**_changes(tr.steps[i]))
        if new != current[key]:
            current[key] = new
            yield PlannedChange(tr.link, tr.direction, t_s, i, loop, new)
