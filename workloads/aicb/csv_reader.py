"""Read AICB's "physical" CSV workload files (pure; reads one file).

Format (aliyun/aicb log_analyzer/log.py ``Workload.dump`` and ``LogItem``): an optional first
line ``[rank0 ~ rankN]`` (absent in the micro-benchmark files), a header naming the columns
(``comm_type, comm_group, comm_group_size, msg_size, stage, dst, src, additional,
_elapsed_time, algbw, busbw, count``; micro-benchmark files lack ``comm_group_size``), then one
row per operation. ``comm_type`` is ``CommType.<name>`` and ``comm_group`` ``CommGroup.<name>``
or ``None`` (utils/utils.py ``CommType``/``CommGroup``). ``CommType.epoch_end`` rows separate
the setup (``init``/``warmup``) from each training iteration.

Pipeline-parallel jobs (log_analyzer/log.py ``Workload.dump`` with ``pp > 1``): one section
per stage, each opened by ``[ pp_stageS: [rankA, rankB, ...] ]`` and its own header line,
written from that stage's point of view (its isend/irecv rows on the pp group carry
``send_next``/``recv_prev``/``send_prev``/``recv_next`` in ``additional``).
"""

from __future__ import annotations

import csv
import gzip
import re
from pathlib import Path

from models.errors import SpecError, SpecIssue
from models.specfile import read_bounded
from workloads.aicb.rows import AicbFile, AicbRow, AicbStage

__all__ = ["read_csv", "COMM_TYPES", "COMM_GROUPS", "MAX_AICB_BYTES"]

# The most bytes of CSV text read from one AICB file, after decompression: a bound for a gzip
# bomb (a few KB that expand to gigabytes). The AICB files of the AICB repository are tens of
# KB (tests/data/aicb), a 1024-layer model a few MB; 256 MiB is far above any real one.
MAX_AICB_BYTES = 256 * 2**20

COMM_TYPES: dict[str, str] = {
    "all_reduce": "all_reduce", "all_gather": "all_gather", "all_gather_into_tensor": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all": "all_to_all", "broadcast": "broadcast", "reduce": "reduce",
    "barrier": "barrier", "isend": "send", "irecv": "recv", "computation": "compute",
    "epoch_end": "epoch_end",
}
COMM_GROUPS: dict[str, str] = {
    "tp_group": "tp", "dp_group": "dp", "pp_group": "pp", "ep_group": "ep",
    "ep_dp_group": "ep_dp", "ep_tp_group": "ep_tp", "embedding_group": "embedding",
    "all": "world", "all_nodes": "world",
}
_RANK_LINE = re.compile(r"^\[rank(\d+)\s*~\s*rank(\d+)\]\s*$")
_STAGE_LINE = re.compile(r"^\[\s*pp_stage(\d+)\s*:\s*\[(.*)\]\s*\]$")
_REQUIRED = ("comm_type", "comm_group", "msg_size")


def read_csv(path: str | Path, *, limit: int = MAX_AICB_BYTES) -> AicbFile:
    """Parse the AICB CSV at ``path`` (gzip-compressed when it ends in ``.gz``), at most
    ``limit`` bytes of CSV text (after decompression, read in 1 MiB chunks, so a gzip bomb is
    never expanded beyond ``limit`` + 1 MiB in memory).

    Returns an :class:`AicbFile` whose ``world_size`` comes from the ``[rank0 ~ rankN]`` line
    (None without it), or, for a per-stage file (sections headed ``[ pp_stageS: [rank...] ]``,
    what AICB writes for pipeline-parallel jobs), from the ranks of all sections, with one
    :class:`AicbStage` per section. Raises :class:`SpecError` naming file and line for a
    missing column, a row with the wrong number of columns, an unknown comm type or group, a
    bad size, or stage headings out of order or with bad rank lists, and for text longer
    than ``limit`` bytes.
    """
    path = str(path)
    try:
        lines = read_bounded(path, limit, "of CSV text (the limit for an AICB file, "
                             "MAX_AICB_BYTES)").decode("utf-8").splitlines()
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as exc:
        raise SpecError(f"cannot read AICB CSV: {exc}", file=path) from exc
    if lines and _STAGE_LINE.match(lines[0].strip()):
        return _staged(path, lines)
    world, start = _world_line(lines)
    setup, iteration, n = _section(path, lines, start, len(lines))
    return AicbFile(path, "csv", setup, iteration, n, world)


def _staged(path: str, lines: list[str]) -> AicbFile:
    heads = [i for i, ln in enumerate(lines) if _STAGE_LINE.match(ln.strip())]
    stages = []
    for k, (i, end) in enumerate(zip(heads, [*heads[1:], len(lines)], strict=True)):
        m = _STAGE_LINE.match(lines[i].strip())
        assert m is not None  # heads holds matching lines only
        if int(m.group(1)) != k:
            raise _issue(f"pipeline stage heading pp_stage{m.group(1)} where pp_stage{k} was "
                         "expected (sections must be in stage order from 0)", path, i + 1)
        ranks = _stage_ranks(m.group(2), path, i + 1)
        setup, iteration, n = _section(path, lines, i + 1, end)
        stages.append(AicbStage(k, ranks, setup, iteration, n, line=i + 1))
    seen = [r for st in stages for r in st.ranks]
    if sorted(seen) != list(range(len(seen))):
        raise _issue(f"the stages' rank lists do not cover ranks 0..{len(seen) - 1} once each",
                     path, 1)
    first = stages[0]
    return AicbFile(path, "csv", first.setup, first.iteration, first.file_iterations,
                    len(seen), pp=len(stages), stages=tuple(stages))


def _stage_ranks(text: str, path: str, line: int) -> tuple[int, ...]:
    out = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*rank(\d+)\s*", item)
        if m is None:
            raise _issue(f"stage rank list item {item.strip()!r} is not rankN", path, line)
        out.append(int(m.group(1)))
    return tuple(out)


def _section(path: str, lines: list[str], start: int,
             end: int) -> tuple[tuple[AicbRow, ...], tuple[AicbRow, ...], int]:
    """Header at ``lines[start]``, rows up to ``end``: (setup, iteration, file iterations)."""
    if start >= end:
        raise SpecError(SpecIssue("no header line", file=path, line=start + 1))
    header = [c.strip() for c in next(csv.reader([lines[start]]))]
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise SpecError(SpecIssue(f"header lacks column(s) {', '.join(missing)}; found "
                                  f"{', '.join(header)}", file=path, line=start + 1))
    segments: list[list[AicbRow]] = [[]]
    for lineno, cells in enumerate(csv.reader(lines[start + 1:end]), start=start + 2):
        if not cells:
            continue
        if len(cells) != len(header):
            raise SpecError(SpecIssue(f"expected {len(header)} columns ({', '.join(header)}), "
                                      f"got {len(cells)}", file=path, line=lineno))
        row = _row(dict(zip(header, (c.strip() for c in cells), strict=True)), path, lineno)
        if row is None:
            segments.append([])
        else:
            segments[-1].extend([row] * _count(dict(zip(header, cells, strict=True)), path,
                                               lineno))
    return _split(path, segments, start + 1)


def _world_line(lines: list[str]) -> tuple[int | None, int]:
    if lines and (m := _RANK_LINE.match(lines[0].strip())):
        return int(m.group(2)) - int(m.group(1)) + 1, 1
    return None, 0


def _split(path: str, segments: list[list[AicbRow]],
           line: int) -> tuple[tuple[AicbRow, ...], tuple[AicbRow, ...], int]:
    # segments: [setup, iter1, iter2, ..., trailing (empty after the last epoch_end)]
    if len(segments) == 1:  # no epoch_end at all: the whole file is one iteration
        return (), tuple(segments[0]), 1
    iters = [s for s in segments[1:] if s]
    if not iters:  # rows, then one epoch_end: those rows are the iteration
        if not segments[0]:
            raise SpecError(SpecIssue("the file has no operation rows", file=path, line=line))
        return (), tuple(segments[0]), 1
    return tuple(segments[0]), tuple(iters[0]), len(iters)


def _issue(msg: str, path: str, line: int) -> SpecError:
    return SpecError(SpecIssue(msg, file=path, line=line))


def _row(cell: dict[str, str], path: str, line: int) -> AicbRow | None:
    op = _enum(cell["comm_type"], "CommType.", COMM_TYPES, "comm type", path, line)
    if op == "epoch_end":
        return None
    group = None
    if cell["comm_group"] not in ("", "None"):
        group = _enum(cell["comm_group"], "CommGroup.", COMM_GROUPS, "comm group", path, line)
    if op == "compute":
        return AicbRow("compute", None, 0, cell.get("stage", ""), None,
                       _elapsed_s(cell.get("_elapsed_time", ""), path, line), line=line)
    if group is None:
        raise _issue(f"{cell['comm_type']} needs a comm_group, got None", path, line)
    size = _int(cell["msg_size"], "msg_size", path, line)
    gsize = cell.get("comm_group_size", "None")
    return AicbRow(op, group, size, cell.get("stage", ""),
                   None if gsize in ("", "None") else _int(gsize, "comm_group_size", path, line),
                   direction=_direction(cell.get("additional", "")), line=line)


def _enum(text: str, prefix: str, table: dict[str, str], what: str, path: str,
          line: int) -> str:
    name = text.removeprefix(prefix)
    if name not in table:
        raise _issue(f"unknown {what} {text!r}; known: "
                     f"{', '.join(prefix + k for k in table)}", path, line)
    return table[name]


def _int(text: str, key: str, path: str, line: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _issue(f"{key} {text!r} is not a whole number", path, line) from None
    if value < 0:
        raise _issue(f"{key} {value} is negative", path, line)
    return value


def _count(cell: dict[str, str], path: str, line: int) -> int:
    text = cell.get("count", "1").strip()
    return 1 if text in ("", "None") else max(_int(text, "count", path, line), 1)


def _elapsed_s(text: str, path: str, line: int) -> float:
    if text in ("", "None"):
        return 0.0
    try:
        ns = float(text)
    except ValueError:
        raise _issue(f"_elapsed_time {text!r} is not a number (ns)", path, line) from None
    if ns < 0:
        raise _issue(f"_elapsed_time {ns} is negative", path, line)
    return ns * 1e-9


def _direction(additional: str) -> str:
    # aicb generate_megatron_workload.py writes send_next/send_prev/recv_next/recv_prev
    return additional.rsplit("_", 1)[-1] if additional.rsplit("_", 1)[-1] in ("next", "prev") \
        else ""
