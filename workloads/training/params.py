"""Parameters of a training workload: the model, the parallel layout, the accelerator.

Pydantic models with ``extra="forbid"`` so that a misspelt key in a workload file is an error;
the YAML workload spec (workloads.spec) embeds them unchanged. Cross-field checks that need
both the model and the layout (heads divisible by TP...) are in :func:`check_training`, which
returns every problem with its key path.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, PositiveInt

from models.errors import SpecIssue
from models.specfile import MAX_LAYERS, MAX_RANKS, MAX_TRANSFERS
from models.unit_fields import SpecModel

__all__ = ["TransformerModel", "Parallelism", "Accelerator", "Recompute", "check_training",
           "check_recompute", "GRAD_DTYPE_BYTES"]

GRAD_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
"""Bytes per gradient value of each ``grad_dtype`` (IEEE binary32, bfloat16, binary16)."""

Ranks = Annotated[int, Field(gt=0, le=MAX_RANKS)]
Layers = Annotated[int, Field(gt=0, le=MAX_LAYERS)]  # also micro-batches: one step each


class TransformerModel(SpecModel):
    """A GPT-style decoder (Megatron naming). ``ffn_hidden_size`` defaults to 4 x hidden.
    ``parameters``: the total parameter count, when known, overrides the count derived from
    the shapes (workloads.training.flops.params_per_tp_rank). ``num_experts`` > 0 makes every
    MLP a mixture of experts with ``moe_router_topk`` experts per token (Megatron-LM's
    ``--num-experts``, ``--moe-router-topk``); ``moe_capacity_factor`` (Megatron's
    ``--moe-expert-capacity-factor``) caps each expert at ceil(tokens x topk / experts x
    factor) tokens of each rank and drops the rest, and ``moe_pad_expert_input_to_capacity``
    (``--moe-pad-expert-input-to-capacity``) pads every expert to exactly that many (sizes:
    workloads.training.flops.moe_dispatch_tokens). Bytes: activations and
    parameters as exchanged (bf16: 2), gradients as reduced (AICB: fp32, 4); ``grad_dtype``
    (fp32 | bf16 | fp16) names the gradients' type instead of ``grad_bytes`` (Megatron reduces
    fp32 gradients with ``--accumulate-allreduce-grads-in-fp32``, the default under bf16,
    else the training type); giving both with different sizes is an error (check_training).
    ``untie_embeddings``: Megatron's ``--untie-embeddings-and-output-weights``; by default the
    output layer shares the input word embedding (tied), so with pipeline stages the first
    and the last stage each hold a copy, synchronised by the embedding-group all-reduce.
    Shapes beyond GPT's, as Megatron's flags: ``swiglu`` (``--swiglu``: a gated MLP of three
    ffn x h matrices), ``normalization`` (``--normalization``: LayerNorm, or RMSNorm with
    no bias), ``add_bias_linear`` (false: ``--disable-bias-linear``),
    ``position_embedding_type`` (``--position-embedding-type``: learned_absolute, or rope
    without parameters); Llama is swiglu, RMSNorm, no biases, rope, untied."""

    model_config = ConfigDict(extra="forbid")

    name: str = "transformer"
    num_layers: Layers
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    seq_length: PositiveInt
    ffn_hidden_size: PositiveInt | None = None
    vocab_size: PositiveInt = 50257
    make_vocab_size_divisible_by: PositiveInt = 128
    parameters: PositiveInt | None = None
    num_experts: int = Field(0, ge=0, le=MAX_RANKS)
    moe_router_topk: PositiveInt = 1
    moe_capacity_factor: float | None = Field(None, gt=0, le=MAX_RANKS)
    moe_pad_expert_input_to_capacity: bool = False
    activation_bytes: PositiveInt = 2
    param_bytes: PositiveInt = 2
    grad_bytes: PositiveInt = 4
    grad_dtype: Literal["fp32", "bf16", "fp16"] | None = None
    untie_embeddings: bool = False
    swiglu: bool = False
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    add_bias_linear: bool = True
    position_embedding_type: Literal["learned_absolute", "rope"] = "learned_absolute"

    @property
    def grad_value_bytes(self) -> int:
        """Bytes per reduced gradient value: from ``grad_dtype`` when given, else
        ``grad_bytes``."""
        return GRAD_DTYPE_BYTES[self.grad_dtype] if self.grad_dtype else self.grad_bytes

    @property
    def ffn(self) -> int:
        """The MLP's inner width (``ffn_hidden_size`` or 4 x ``hidden_size``)."""
        return self.ffn_hidden_size or 4 * self.hidden_size


class Parallelism(SpecModel):
    """The layout: ``tp``, ``pp``, ``ep`` sizes; ``dp`` or ``world_size`` (the other is
    derived; both given must agree). ``etp``: the experts' tensor-parallel size (Megatron's
    ``--expert-tensor-parallel-size``, default ``tp``): an MoE layer's ranks of one stage
    are regrouped as etp x ep x edp (workloads.layout), etp x ep dividing tp x dp.
    ``zero_stage`` 0: DP all-reduce of gradients once per iteration; 1:
    reduce-scatter of gradients once per iteration plus all-gather of the updated parameters
    (Megatron's distributed optimizer; the ZeRO paper's 2 Psi, Rajbhandari et al. 2020, sec.
    7.2.1); 2: the same, the gradients reduce-scattered in every micro-batch's backward
    (DeepSpeed ZeRO-2 keeps only its gradient shard); 3: parameters gathered per block in
    every pass that uses them, gradients reduce-scattered per block (ZeRO-3, sec. 7.2.2).
    DeepSpeed refuses stages 2 and 3 with pipeline stages, so aitb does; stage 3 also with
    experts, which it does not model. ``use_distributed_optimizer``: Megatron's
    ``--use-distributed-optimizer``, the same as ``zero_stage: 1``. ``sequence_parallel``:
    Megatron's ``--sequence-parallel`` (Korthikanti et al. 2022): each TP all-reduce of an
    activation becomes an all-gather and a reduce-scatter, pipeline hand-offs carry seq / tp
    of the sequence (workloads.training.megatron); needs tp dividing seq_length; required
    for experts with tp > 1. Micro-batches:
    ``num_microbatches`` or
    ``global_batch_size`` (= num_microbatches x micro_batch_size x dp); default one.
    ``scatter_gather_pp``: Megatron-LM's scatter/gather of pipeline tensors (on unless
    ``--no-scatter-gather-tensors-in-pipeline`` in Megatron's original p2p code; Narayanan et
    al. 2021, section 4.1): each TP rank sends 1/tp of the activation to the next (or
    gradient to the previous) stage, which all-gathers it in its TP group. Default off:
    every TP rank sends the whole activation, as Megatron core's p2p and AICB's files do and
    as the published GPT-3 2.7B job's 125 MB pipeline messages show; not with
    ``sequence_parallel`` (Megatron then sends the sequence shard, no gather).
    ``virtual_pipeline_stages``: model chunks per stage for Megatron's interleaved 1F1B
    (``--virtual-pipeline-model-parallel-size``; Narayanan et al. 2021, section 2.2.2): stage
    s holds chunks c = 0..v-1 of num_layers / (pp v) layers each, virtual stage c pp + s; a
    micro-batch crosses pp v - 1 hand-offs each way and the bubble shrinks to
    (pp - 1) / (v m). Needs pp >= 2, pp v dividing num_layers and pp dividing the
    micro-batches (as Megatron's interleaved schedule)."""

    model_config = ConfigDict(extra="forbid")

    tp: Ranks = 1
    pp: Ranks = 1
    dp: Ranks | None = None
    world_size: Ranks | None = None
    ep: Ranks = 1
    etp: Ranks | None = None
    zero_stage: Literal[0, 1, 2, 3] = 0
    use_distributed_optimizer: bool = False
    sequence_parallel: bool = False
    scatter_gather_pp: bool = False
    virtual_pipeline_stages: Layers = 1
    micro_batch_size: PositiveInt = 1
    num_microbatches: Layers | None = None
    global_batch_size: PositiveInt | None = None

    @property
    def data_parallel(self) -> int:
        """DP size: ``dp``, else ``world_size // (tp * pp)`` (checked by check_training)."""
        if self.dp is not None:
            return self.dp
        return max(1, (self.world_size or self.tp * self.pp) // (self.tp * self.pp))

    @property
    def expert_tp(self) -> int:
        """The experts' tensor-parallel size: ``etp``, else ``tp``."""
        return self.etp if self.etp is not None else self.tp

    @property
    def zero(self) -> int:
        """The ZeRO stage in effect: ``zero_stage``, or 1 with ``use_distributed_optimizer``."""
        return max(self.zero_stage, 1 if self.use_distributed_optimizer else 0)

    @property
    def microbatches(self) -> int:
        """Micro-batches per iteration per DP replica."""
        if self.num_microbatches is not None:
            return self.num_microbatches
        if self.global_batch_size is not None:
            return max(1, self.global_batch_size // (self.micro_batch_size * self.data_parallel))
        return 1


class Recompute(SpecModel):
    """Activation recomputation as Megatron-LM's ``--recompute-granularity``,
    ``--recompute-method`` and ``--recompute-num-layers`` (Korthikanti et al., "Reducing
    Activation Recomputation in Large Transformer Models", MLSys 2023, arXiv:2205.05198).

    ``granularity`` "none": activations kept; "selective": only the attention core (QK^T,
    softmax, attention over V) is recomputed before its backward, 4 B s^2 h FLOPs per layer
    and no communication; "full": a layer's whole forward, tensor-parallel collectives
    included, runs again before its backward. ``method`` (full only, default "uniform"):
    "uniform" checkpoints chunks of ``num_layers`` consecutive layers of a stage (the last
    chunk may be shorter) and recomputes a chunk's forward before the chunk's backward;
    "block" recomputes only the first ``num_layers`` layers of each stage, each before its
    own backward. ``num_layers`` default 1 (every layer its own checkpoint, the paper's "full
    recomputation"); at most the layers of one stage (check_recompute)."""

    model_config = ConfigDict(extra="forbid")

    granularity: Literal["none", "selective", "full"] = "none"
    method: Literal["uniform", "block"] | None = None
    num_layers: Layers | None = None

    def chunks(self, layers: int) -> list[tuple[int, int, bool]]:
        """The layers ``0..layers-1`` of one stage (of one model chunk with virtual pipeline
        stages: Megatron checkpoints each chunk's block) as ``(first, end, recomputed)``
        ranges in forward order: the units whose forward is repeated (``recomputed``) before
        their backward, or that keep their activations."""
        if self.granularity != "full":
            return [(0, layers, False)]
        n = min(self.num_layers or 1, layers)
        if (self.method or "uniform") == "uniform":
            return [(a, min(a + n, layers), True) for a in range(0, layers, n)]
        return [(i, i + 1, True) for i in range(n)] + ([(n, layers, False)] if n < layers
                                                          else [])


class Accelerator(SpecModel):
    """One accelerator: peak ``flops_per_s`` (default: NVIDIA A100 dense BF16 tensor-core peak,
    312e12, A100 datasheet) and the achieved fraction ``efficiency`` (0, 1]."""

    model_config = ConfigDict(extra="forbid")

    flops_per_s: float = Field(312e12, gt=0)
    efficiency: float = Field(0.5, gt=0, le=1)


def _divides(issues: list[SpecIssue], key: tuple, a: int, what_a: str, b: int,
             what_b: str, file: str | None) -> None:
    if b % a:
        issues.append(SpecIssue(f"{what_a}={a} does not divide {what_b}={b}", file=file,
                                key_path=key))


def check_training(m: TransformerModel, p: Parallelism, *, file: str | None = None,
                   prefix: tuple = ()) -> list[SpecIssue]:
    """Every inconsistency between ``m`` and ``p``, each naming its key under ``prefix``.

    Checks: tp divides heads, hidden and ffn sizes; pp divides layers; dp*tp*pp equals
    world_size; ep divides dp and num_experts; the global batch is a multiple of
    micro_batch_size * dp; exactly one of num_microbatches/global_batch_size; at most
    :data:`~models.specfile.MAX_RANKS` ranks, :data:`~models.specfile.MAX_LAYERS` micro-batches
    and :data:`~models.specfile.MAX_TRANSFERS` layer x micro-batch x rank steps (the schedule
    holds about that many ops; refused before it is built).
    """
    issues: list[SpecIssue] = []
    lay, mod = (*prefix, "parallelism"), (*prefix, "model")
    _divides(issues, (*lay, "tp"), p.tp, "tp", m.num_attention_heads, "num_attention_heads",
             file)
    _divides(issues, (*lay, "tp"), p.tp, "tp", m.hidden_size, "hidden_size", file)
    _divides(issues, (*lay, "tp"), p.tp, "tp", m.ffn, "ffn_hidden_size", file)
    _divides(issues, (*lay, "pp"), p.pp, "pp", m.num_layers, "num_layers", file)
    if p.world_size is not None and p.dp is not None and p.dp * p.tp * p.pp != p.world_size:
        issues.append(SpecIssue(f"dp*tp*pp = {p.dp}*{p.tp}*{p.pp} = {p.dp * p.tp * p.pp} != "
                                f"world_size {p.world_size}", file=file,
                                key_path=(*lay, "world_size")))
    if p.world_size is not None and p.dp is None:
        _divides(issues, (*lay, "world_size"), p.tp * p.pp, "tp*pp", p.world_size,
                 "world_size", file)
    _check_experts(issues, m, p, lay, mod, file)
    _check_zero(issues, m, p, lay, file)
    if p.num_microbatches is not None and p.global_batch_size is not None:
        issues.append(SpecIssue("give num_microbatches or global_batch_size, not both",
                                file=file, key_path=(*lay, "global_batch_size")))
    elif p.global_batch_size is not None:
        _divides(issues, (*lay, "global_batch_size"), p.micro_batch_size * p.data_parallel,
                 "micro_batch_size*dp", p.global_batch_size, "global_batch_size", file)
    v = p.virtual_pipeline_stages
    if v > 1:
        key = (*lay, "virtual_pipeline_stages")
        if p.pp < 2:
            issues.append(SpecIssue("virtual_pipeline_stages > 1 needs pp >= 2 (interleaved "
                                    "1F1B)", file=file, key_path=key))
        else:
            _divides(issues, key, p.pp * v, "pp*virtual_pipeline_stages", m.num_layers,
                     "num_layers", file)
            _divides(issues, key, p.pp, "pp", p.microbatches, "micro-batches (interleaved "
                     "1F1B)", file)
    if p.sequence_parallel and p.tp > 1:  # Megatron splits the sequence over TP
        _divides(issues, (*lay, "sequence_parallel"), p.tp, "tp", m.seq_length, "seq_length",
                 file)
    if p.scatter_gather_pp and p.sequence_parallel:
        issues.append(SpecIssue("scatter_gather_pp does not combine with sequence_parallel "
                                "(Megatron then sends each TP rank's sequence shard)",
                                file=file, key_path=(*lay, "scatter_gather_pp")))
    if m.grad_dtype and "grad_bytes" in m.model_fields_set \
            and m.grad_bytes != GRAD_DTYPE_BYTES[m.grad_dtype]:
        issues.append(SpecIssue(f"grad_dtype {m.grad_dtype} is {GRAD_DTYPE_BYTES[m.grad_dtype]} "
                                f"bytes per gradient but grad_bytes is {m.grad_bytes}: give "
                                "one of them", file=file, key_path=(*mod, "grad_dtype")))
    _check_totals(issues, m, p, lay, file)
    return issues


def _check_experts(issues: list[SpecIssue], m: TransformerModel, p: Parallelism, lay: tuple,
                   mod: tuple, file: str | None) -> None:
    """Expert parallelism as Megatron-LM's argument checks: ep and etp only with experts, ep
    dividing num_experts, etp x ep dividing the tp x dp ranks of a stage (the expert layout
    regroups them), etp dividing ffn_hidden_size, sequence parallelism with MoE and tp > 1
    ("When using MoE and tensor parallelism, sequence parallelism must be used"), the
    capacity keys only with experts."""
    if not m.num_experts:
        for bad, what in ((p.ep > 1, "ep > 1"),
                          (p.etp is not None and p.etp != p.tp, "etp != tp")):
            if bad:
                issues.append(SpecIssue(f"{what} needs a mixture-of-experts model "
                                        "(num_experts > 0)", file=file,
                                        key_path=(*mod, "num_experts")))
        for key in ("moe_capacity_factor", "moe_pad_expert_input_to_capacity"):
            if key in m.model_fields_set and getattr(m, key):
                issues.append(SpecIssue(f"{key} needs a mixture-of-experts model "
                                        "(num_experts > 0)", file=file, key_path=(*mod, key)))
        return
    _divides(issues, (*lay, "ep"), p.ep, "ep", m.num_experts, "num_experts", file)
    _divides(issues, (*lay, "etp"), p.expert_tp, "etp", m.ffn, "ffn_hidden_size", file)
    _divides(issues, (*lay, "etp" if p.etp is not None else "ep"), p.expert_tp * p.ep,
             "etp*ep", p.tp * p.data_parallel, "tp*dp", file)
    if m.moe_router_topk > m.num_experts:
        issues.append(SpecIssue(f"moe_router_topk {m.moe_router_topk} is more than the "
                                f"{m.num_experts} experts", file=file,
                                key_path=(*mod, "moe_router_topk")))
    if p.tp > 1 and not p.sequence_parallel:
        issues.append(SpecIssue("a mixture-of-experts model with tp > 1 needs "
                                "sequence_parallel: true (as Megatron-LM requires)", file=file,
                                key_path=(*lay, "sequence_parallel")))
    if m.moe_pad_expert_input_to_capacity and m.moe_capacity_factor is None:
        issues.append(SpecIssue("moe_pad_expert_input_to_capacity needs moe_capacity_factor",
                                file=file, key_path=(*mod, "moe_pad_expert_input_to_capacity")))


def _check_zero(issues: list[SpecIssue], m: TransformerModel, p: Parallelism, lay: tuple,
                file: str | None) -> None:
    """ZeRO: ``use_distributed_optimizer`` is stage 1 (refused beside another stage);
    stages 2 and 3 not with pipeline stages (DeepSpeed's pipeline engine asserts "ZeRO-2 and
    ZeRO-3 are incompatible with pipeline parallelism"), stage 3 not with experts (not
    modelled)."""
    if p.use_distributed_optimizer and p.zero_stage not in (0, 1):
        issues.append(SpecIssue(f"use_distributed_optimizer is ZeRO stage 1 but zero_stage is "
                                f"{p.zero_stage}: give one of them", file=file,
                                key_path=(*lay, "use_distributed_optimizer")))
    if p.zero_stage in (2, 3) and p.pp > 1:
        issues.append(SpecIssue(f"zero_stage {p.zero_stage} does not combine with pp > 1 "
                                "(DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3; "
                                "Megatron's distributed optimizer is zero_stage 1)",
                                file=file, key_path=(*lay, "zero_stage")))
    if p.zero_stage == 3 and m.num_experts:
        issues.append(SpecIssue("zero_stage 3 with a mixture-of-experts model is not "
                                "modelled; use zero_stage 1 or 2", file=file,
                                key_path=(*lay, "zero_stage")))


def check_recompute(r: Recompute, m: TransformerModel, p: Parallelism, *,
                    file: str | None = None, prefix: tuple = ()) -> list[SpecIssue]:
    """Every inconsistency of the recomputation keys of a training workload, each naming its
    key under ``prefix`` (the flat keys ``recompute``, ``recompute_method``,
    ``recompute_num_layers``). As Megatron-LM's argument checks: a method or a layer count
    only with ``full``; ``num_layers`` at most the layers of one pipeline stage (of one
    model chunk with virtual pipeline stages)."""
    issues: list[SpecIssue] = []
    if r.granularity != "full":
        for key, value in (("recompute_method", r.method), ("recompute_num_layers",
                                                            r.num_layers)):
            if value is not None:
                issues.append(SpecIssue(f"{key} applies to recompute: full, not "
                                        f"{r.granularity}", file=file,
                                        key_path=(*prefix, key)))
    per_stage = m.num_layers // (p.pp * p.virtual_pipeline_stages)
    if r.num_layers is not None and r.num_layers > per_stage:
        what = "pipeline stage (num_layers / pp)" if p.virtual_pipeline_stages == 1 else \
            "model chunk (num_layers / (pp x virtual_pipeline_stages))"
        issues.append(SpecIssue(f"recompute_num_layers {r.num_layers} is more than the "
                                f"{per_stage} layers of one {what}",
                                file=file, key_path=(*prefix, "recompute_num_layers")))
    return issues


def _check_totals(issues: list[SpecIssue], m: TransformerModel, p: Parallelism, lay: tuple,
                  file: str | None) -> None:
    """The products of the bounded keys, before the schedule is built (models.specfile)."""
    world = p.data_parallel * p.tp * p.pp
    if world > MAX_RANKS:
        issues.append(SpecIssue(f"dp*tp*pp = {p.data_parallel}*{p.tp}*{p.pp} = {world} ranks; "
                                f"at most {MAX_RANKS} (MAX_RANKS)", file=file,
                                key_path=(*lay, "world_size" if p.world_size else "dp")))
        return
    if p.microbatches > MAX_LAYERS:
        issues.append(SpecIssue(f"global_batch_size {p.global_batch_size} makes "
                                f"{p.microbatches} micro-batches per iteration; at most "
                                f"{MAX_LAYERS} (MAX_LAYERS)", file=file,
                                key_path=(*lay, "global_batch_size")))
        return
    # each pipeline stage holds num_layers / pp of the layers (ceil: a stage with the rest)
    stage_layers = -(-m.num_layers // p.pp)
    steps = stage_layers * p.microbatches * world
    if steps > MAX_TRANSFERS:
        issues.append(SpecIssue(f"layers per stage x micro-batches x ranks = {stage_layers} x "
                                f"{p.microbatches} x {world} = {steps} steps per iteration; at "
                                f"most {MAX_TRANSFERS} (MAX_TRANSFERS): fewer layers, "
                                "micro-batches or ranks", file=file, key_path=lay))
