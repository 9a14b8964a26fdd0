"""Turn a parsed AICB file into an aitb Schedule over Megatron's rank layout (pure).

Each AICB row is written from one rank's point of view and runs on every group instance of
its kind, so a TP row becomes one :class:`Collective` per TP group and a computation row one
:class:`Compute` on every rank. Pipeline rows: AICB writes them from stage 0's point of view
(generate_megatron_workload.py ``with_pipeline_forward_backward`` uses rank 0 when generating
without GPUs), so only ``send_next`` (activations) and ``recv_next`` (gradients) appear. aitb
turns ``send_next`` into one :class:`SendRecv` from stage i to i+1 and ``recv_next`` into one
from stage i+1 to i, for every stage boundary of every pipeline; ``*_prev`` rows (the other end
of the same transfers, seen from later stages) are skipped so that nothing is counted twice.
Files with one section per stage (AICB's layout for pipeline-parallel jobs) are merged stage
by stage instead (workloads/aicb/pipeline.py).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from models.errors import SpecError, SpecIssue
from models.schedule import Collective, Compute, Group, Op, Schedule, SendRecv
from models.specfile import MAX_ITERATIONS, MAX_RANKS
from models.unit_fields import SpecModel
from workloads.aicb.pipeline import merge_stages
from workloads.aicb.rows import AicbFile, AicbRow, AicbStage
from workloads.layout import Layout, LayoutError

__all__ = ["AicbOptions", "build_schedule", "scale_size"]


class AicbOptions(SpecModel):
    """How to import an AICB file (all optional).

    ``world_size``/``tp``/``pp``/``ep``: needed when the file does not state them (micro-
    benchmark CSVs have no rank line; SimAI files without ``all_gpus:``); when the file states
    them they must agree. ``dp_replicas``: keep only the first k data-parallel replicas (all
    their TP and PP ranks), a smaller world that still has TP and DP traffic; DP collectives
    keep their sizes and run among k ranks. ``scale``: divide every size by this factor
    (at least 1 byte stays), recorded in ``Schedule.meta``. ``iterations``: default, as many as
    the file holds. ``setup``: also replay the rows before the first ``epoch_end`` (``init``,
    ``warmup``), prepended to every iteration. ``exclude_stages``: drop rows whose stage starts
    with one of these prefixes (e.g. ``forward_step`` to drop AICB's data broadcasts).
    """

    model_config = ConfigDict(extra="forbid")

    world_size: int | None = Field(None, ge=1, le=MAX_RANKS)
    tp: int | None = Field(None, ge=1, le=MAX_RANKS)
    pp: int | None = Field(None, ge=1, le=MAX_RANKS)
    ep: int | None = Field(None, ge=1, le=MAX_RANKS)
    dp_replicas: int | None = Field(None, ge=1, le=MAX_RANKS)
    scale: float = Field(1.0, ge=1.0)
    iterations: int | None = Field(None, ge=1, le=MAX_ITERATIONS)
    setup: bool = False
    exclude_stages: list[str] = Field(default_factory=list)


def scale_size(size_bytes: int, scale: float) -> int:
    """``size_bytes / scale`` rounded, at least 1 byte unless the size is 0."""
    return 0 if size_bytes == 0 else max(1, round(size_bytes / scale))


def build_schedule(f: AicbFile, opts: AicbOptions | None = None) -> Schedule:
    """The Schedule of ``f`` under ``opts``.

    Raises :class:`SpecError` naming the file (and line) when the layout cannot be determined
    or contradicts a row's group size, or an option contradicts the file.
    """
    opts = opts or AicbOptions()
    full = _layout(f, opts)
    layout = full
    if opts.dp_replicas is not None:
        layout = _subset(f, full, opts.dp_replicas)
    sections = f.stages or (AicbStage(0, (), f.setup, f.iteration),)
    rows_of = {st.index: _select(st, opts) for st in sections}
    wanted: dict[str, int] = {}
    for rows in rows_of.values():
        for r in rows:
            _check_group_size(f, full, r, wanted)
    kinds = sorted({r.group for rows in rows_of.values() for r in rows if r.group})
    groups: dict[str, Group] = {}
    for k in kinds:
        groups.update(layout.groups(k))
    if f.stages:
        ops = tuple(merge_stages(f, full, layout, rows_of, groups,
                                 lambda r: scale_size(r.size_bytes, opts.scale)))
    else:
        ops = tuple(op for r in rows_of[0] for op in _ops(r, layout, groups, opts.scale))
    meta = {"format": f.fmt, "per_stage_sections": bool(f.stages), "tp": layout.tp,
            "dp": layout.dp, "pp": layout.pp, "ep": layout.ep, "scale": opts.scale,
            "file_world_size": full.world_size,
            "file_iterations": f.file_iterations, "setup_included": opts.setup}
    return Schedule(name=_name(f.path), world_size=layout.world_size, groups=groups, ops=ops,
                    iterations=opts.iterations or f.file_iterations, source=f.path, meta=meta)


def _select(st: AicbStage, opts: AicbOptions) -> list[AicbRow]:
    return [r for r in (*(st.setup if opts.setup else ()), *st.iteration)
            if not any(r.stage.startswith(p) for p in opts.exclude_stages)]


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def _err(f: AicbFile, msg: str, line: int | None = None) -> SpecError:
    return SpecError(SpecIssue(msg, file=f.path, line=line))


def _agree(f: AicbFile, key: str, from_file: int | None, option: int | None) -> int | None:
    if from_file is not None and option is not None and from_file != option:
        raise _err(f, f"option {key}={option} contradicts the file's {key}={from_file}")
    return option if option is not None else from_file


def _sizes(f: AicbFile, kind: str) -> set[int]:
    sections = f.stages or (AicbStage(0, (), f.setup, f.iteration),)
    return {r.group_size for st in sections for r in (*st.setup, *st.iteration)
            if r.group == kind and r.group_size is not None}


def _one(f: AicbFile, kind: str) -> int | None:
    sizes = _sizes(f, kind)
    if len(sizes) > 1:
        raise _err(f, f"rows give {kind} group sizes {sorted(sizes)}; expected one size")
    return sizes.pop() if sizes else None


def _layout(f: AicbFile, o: AicbOptions) -> Layout:
    world = _agree(f, "world_size", f.world_size, o.world_size)
    tp = _agree(f, "tp", f.tp if f.tp is not None else _one(f, "tp"), o.tp) or 1
    pp = _agree(f, "pp", f.pp, o.pp)
    ep = _agree(f, "ep", f.ep if f.ep is not None else _one(f, "ep"), o.ep) or 1
    dp = _one(f, "dp")
    if world is None:
        if dp is None:
            raise _err(f, "the file states no world size (no 'rank0 ~ rankN' first line, no "
                          "all_gpus:) and no DP group size; give the option world_size "
                          "(--world-size)")
        world = tp * (pp or 1) * dp
    if pp is None:
        if dp is not None and world % (tp * dp):
            raise _err(f, f"the rows' group sizes tp={tp}, dp={dp} do not divide "
                          f"world_size {world}")
        pp = world // (tp * dp) if dp else 1
    if world % (tp * pp):
        raise _err(f, f"world_size {world} is not a multiple of tp*pp = {tp}*{pp}")
    if dp is not None and dp * tp * pp != world:
        raise _err(f, f"dp*tp*pp = {dp}*{tp}*{pp} != world_size {world}")
    try:
        return Layout(tp=tp, dp=world // (tp * pp), pp=pp, ep=ep)
    except LayoutError as exc:
        raise _err(f, str(exc)) from None


def _subset(f: AicbFile, full: Layout, k: int) -> Layout:
    if k > full.dp:
        raise _err(f, f"dp_replicas={k} exceeds the file's dp={full.dp}")
    try:
        return Layout(tp=full.tp, dp=k, pp=full.pp, ep=full.ep)
    except LayoutError as exc:
        raise _err(f, f"dp_replicas={k}: {exc}") from None


def _check_group_size(f: AicbFile, layout: Layout, r: AicbRow, wanted: dict[str, int]) -> None:
    """``wanted``: group size per kind, filled as kinds are met (a cache)."""
    if r.group_size is None or r.group in (None, "pp"):  # AICB writes 1 for p2p rows
        return
    if r.group not in wanted:
        wanted[r.group] = len(layout.groups(r.group)[f"{r.group}0"].ranks)
    want = wanted[r.group]
    if r.group_size != want:
        raise _err(f, f"{r.group} group of size {r.group_size}, but the layout "
                      f"(tp={layout.tp}, dp={layout.dp}, pp={layout.pp}, ep={layout.ep}) "
                      f"gives {want}", r.line)


def _ops(r: AicbRow, layout: Layout, groups: dict[str, Group], scale: float) -> list[Op]:
    size = scale_size(r.size_bytes, scale)
    if r.op == "compute":
        return [Compute(r.compute_s, label=r.stage)] if r.compute_s > 0 else []
    if r.op in ("send", "recv"):
        if r.direction != "next":
            return []
        fwd = r.op == "send"
        return [SendRecv(g.ranks[i] if fwd else g.ranks[i + 1],
                         g.ranks[i + 1] if fwd else g.ranks[i], size, g.name, r.stage)
                for g in groups.values() if g.kind == "pp" for i in range(len(g.ranks) - 1)]
    return [Collective(r.op, g.name, size, label=r.stage)  # type: ignore[arg-type]
            for g in groups.values() if g.kind == r.group]
