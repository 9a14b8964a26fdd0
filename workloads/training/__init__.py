"""Training iterations from model parameters: one iteration's Schedule in Megatron order.

``training_schedule(model, parallelism, accelerator)`` builds the per-stage steps
(workloads.training.megatron), orders them with 1F1B (workloads.training.pipeline) and expands
each step over the group instances of its stage in Megatron's rank layout (workloads.layout).
``ideal_iteration`` reports the numbers a perfect network would give.
"""

from __future__ import annotations

from typing import Any

from models.errors import SpecError
from models.schedule import Collective, Compute, Group, Op, Schedule, SendRecv
from workloads.layout import Layout
from workloads.summary import collective_table, compute_per_rank_s
from workloads.training.flops import (
    iteration_model_flops,
    params_per_tp_rank,
    split_params,
    stage_params,
)
from workloads.training.megatron import StageBuilder, Step
from workloads.training.params import (
    Accelerator,
    Parallelism,
    Recompute,
    TransformerModel,
    check_recompute,
    check_training,
)
from workloads.training.pipeline import bubble_fraction, merge_stages, stage_sequence

__all__ = ["TransformerModel", "Parallelism", "Accelerator", "Recompute", "training_schedule",
           "ideal_iteration", "check_training", "check_recompute"]

_KINDS = ("tp", "dp", "pp", "ep", "etp", "ep_tp", "ep_dp", "embedding")


def training_schedule(m: TransformerModel, p: Parallelism, a: Accelerator | None = None, *,
                      recompute: Recompute | None = None, iterations: int = 1,
                      file: str | None = None, name: str | None = None,
                      prefix: tuple[str | int, ...] = ()) -> Schedule:
    """One training iteration of ``m`` under ``p`` with activation ``recompute`` (default
    none; repeated ``iterations`` times), named ``name`` (default: the model's name).

    Raises :class:`SpecError` listing every inconsistency (see check_training and
    check_recompute), each naming ``file`` and its key under ``prefix`` (the key path of the
    spec in ``file``). ``meta`` records the layout, micro-batches, recomputation, per-rank
    parameter counts, each stage's parameters per TP rank (``stage_params_per_tp_rank``), the
    job's model FLOPs per iteration (``model_flops``, flops.iteration_model_flops) and the
    accelerator's peak (``flops_per_s``), for MFU in analysis.
    """
    r = recompute or Recompute()
    issues = check_training(m, p, file=file, prefix=prefix)
    issues += check_recompute(r, m, p, file=file, prefix=prefix)
    if issues:
        raise SpecError(issues)
    a = a or Accelerator()
    layout = Layout(tp=p.tp, dp=p.data_parallel, pp=p.pp, ep=p.ep, etp=p.etp)
    b = StageBuilder(m, p, a, r)
    steps = merge_stages([stage_sequence(b, s) for s in range(p.pp)])
    groups = {n: g for k in _KINDS if _used(k, m, p) for n, g in layout.groups(k).items()}
    by_stage = _groups_by_stage(layout, groups)
    ops = tuple(op for s, st in steps for op in _expand(layout, by_stage, s, st, b))
    dense, expert = split_params(m, p.tp, p.ep, p.expert_tp)
    meta = {"model": m.name, "tp": p.tp, "dp": layout.dp, "pp": p.pp, "ep": p.ep,
            "etp": p.expert_tp, "zero_stage": p.zero,
            "sequence_parallel": p.sequence_parallel,
            "microbatches": p.microbatches, "params_per_tp_rank": params_per_tp_rank(m, p.tp),
            "dense_params_per_rank": dense, "expert_params_per_rank": expert,
            "stage_params_per_tp_rank": [stage_params(m, p.tp, p.pp, i) for i in range(p.pp)],
            "recompute": r.granularity, "untie_embeddings": m.untie_embeddings,
            "scatter_gather_pp": p.scatter_gather_pp,
            "virtual_pipeline_stages": p.virtual_pipeline_stages,
            "pipeline_bubble_fraction": _bubble(p),
            "model_flops": iteration_model_flops(m, p), "flops_per_s": a.flops_per_s,
            "scale": 1.0}
    return Schedule(name=name or m.name, world_size=layout.world_size, groups=groups, ops=ops,
                    iterations=iterations, source=file or "<training>", meta=meta)


def _bubble(p: Parallelism) -> float:
    return bubble_fraction(p.pp, p.microbatches, p.virtual_pipeline_stages)


def _used(kind: str, m: TransformerModel, p: Parallelism) -> bool:
    moe, x = m.num_experts > 0, p.expert_tp
    return {"tp": p.tp > 1, "dp": p.data_parallel > 1, "pp": p.pp > 1, "ep": p.ep > 1,
            "etp": moe and x > 1 and x != p.tp, "ep_tp": moe and x * p.ep > 1,
            "ep_dp": moe and p.tp * p.data_parallel // (x * p.ep) > 1,
            "embedding": p.pp > 1 and not m.untie_embeddings}[kind]


def _groups_by_stage(layout: Layout, groups: dict[str, Group]) -> dict[tuple[int, str], list]:
    out: dict[tuple[int, str], list[Group]] = {}
    for s in range(layout.pp):
        stage = set(layout.stage_ranks(s))
        for g in groups.values():
            if g.kind == "embedding" or stage.issuperset(g.ranks):
                out.setdefault((s, g.kind), []).append(g)
    return out


def _expand(layout: Layout, by_stage: dict, s: int, st: Step, b: StageBuilder) -> list[Op]:
    if st.kind == "compute":
        ranks = None if layout.pp == 1 else layout.stage_ranks(s)
        return [Compute(st.duration_s, ranks, st.label)]
    if st.kind == "xfer":
        label = f"{st.op}.mb{st.mb}" + (f".v{st.vsrc}" if b.v > 1 else "")
        return [SendRecv(layout.rank(t, d, s), layout.rank(t, d, st.peer), b.handoff_bytes(),
                         f"pp{d * layout.tp + t}", label)
                for d in range(layout.dp) for t in range(layout.tp)]
    return [Collective(st.op, g.name, st.size_bytes, label=st.label)  # type: ignore[arg-type]
            for g in by_stage.get((s, st.group), [])]


def ideal_iteration(s: Schedule, m: TransformerModel, p: Parallelism,
                    a: Accelerator | None = None) -> dict[str, Any]:
    """What a perfect network would give for schedule ``s`` of ``m`` under ``p``.

    Returns compute seconds per iteration of the busiest rank (pipeline bubbles not counted;
    ``bubble_fraction``: the 1F1B bubble, (pp - 1) / (v m) of that time with v virtual
    stages, Narayanan et al. 2021),
    bytes per group kind moved by one communicator of that kind per iteration, the job's
    model FLOPs per iteration (forward + backward, Narayanan et al. 2021) and the MFU a
    compute-only iteration would reach, ``flops / (world * flops_per_s * compute_s)``.
    """
    a = a or Accelerator()
    compute_s = max(compute_per_rank_s(s))
    volume: dict[str, int] = {}
    for row in collective_table(s):
        volume[row["group"]] = volume.get(row["group"], 0) + row["total_bytes"]
    flops = iteration_model_flops(m, p)
    return {"compute_s": compute_s, "bubble_fraction": _bubble(p),
            "bytes_per_group_kind": volume, "model_flops": flops,
            "mfu_compute_only": flops / (s.world_size * a.flops_per_s * compute_s)}
