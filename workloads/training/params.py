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

__all__ = ["TransformerModel", "Parallelism", "Accelerator", "check_training"]

Ranks = Annotated[int, Field(gt=0, le=MAX_RANKS)]
Layers = Annotated[int, Field(gt=0, le=MAX_LAYERS)]  # also micro-batches: one step each


class TransformerModel(SpecModel):
    """A GPT-style decoder (Megatron naming). ``ffn_hidden_size`` defaults to 4 x hidden.
    ``parameters``: the total parameter count, when known, overrides the count derived from
    the shapes (workloads.training.flops.params_per_tp_rank). ``num_experts`` > 0 makes every
    MLP a mixture of experts with ``moe_topk`` experts per token. Bytes: activations and
    parameters as exchanged (bf16: 2), gradients as reduced (AICB: fp32, 4)."""

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
    moe_topk: PositiveInt = 1
    activation_bytes: PositiveInt = 2
    param_bytes: PositiveInt = 2
    grad_bytes: PositiveInt = 4

    @property
    def ffn(self) -> int:
        """The MLP's inner width (``ffn_hidden_size`` or 4 x ``hidden_size``)."""
        return self.ffn_hidden_size or 4 * self.hidden_size


class Parallelism(SpecModel):
    """The layout: ``tp``, ``pp``, ``ep`` sizes; ``dp`` or ``world_size`` (the other is
    derived; both given must agree). ``zero_stage`` 0: DP all-reduce of gradients; 1 and 2:
    reduce-scatter of gradients plus all-gather of parameters (Megatron's distributed
    optimizer, DeepSpeed ZeRO-1/2); 3: parameters gathered per layer in forward and backward,
    gradients reduce-scattered per layer (ZeRO-3). Micro-batches: ``num_microbatches`` or
    ``global_batch_size`` (= num_microbatches x micro_batch_size x dp); default one."""

    model_config = ConfigDict(extra="forbid")

    tp: Ranks = 1
    pp: Ranks = 1
    dp: Ranks | None = None
    world_size: Ranks | None = None
    ep: Ranks = 1
    zero_stage: Literal[0, 1, 2, 3] = 0
    sequence_parallel: bool = False
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
    def microbatches(self) -> int:
        """Micro-batches per iteration per DP replica."""
        if self.num_microbatches is not None:
            return self.num_microbatches
        if self.global_batch_size is not None:
            return max(1, self.global_batch_size // (self.micro_batch_size * self.data_parallel))
        return 1


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
    _divides(issues, (*lay, "ep"), p.ep, "ep", p.data_parallel, "dp", file)
    if m.num_experts:
        _divides(issues, (*lay, "ep"), p.ep, "ep", m.num_experts, "num_experts", file)
    elif p.ep > 1:
        issues.append(SpecIssue("ep > 1 needs a mixture-of-experts model (num_experts > 0)",
                                file=file, key_path=(*mod, "num_experts")))
    if p.num_microbatches is not None and p.global_batch_size is not None:
        issues.append(SpecIssue("give num_microbatches or global_batch_size, not both",
                                file=file, key_path=(*lay, "global_batch_size")))
    elif p.global_batch_size is not None:
        _divides(issues, (*lay, "global_batch_size"), p.micro_batch_size * p.data_parallel,
                 "micro_batch_size*dp", p.global_batch_size, "global_batch_size", file)
    _check_totals(issues, m, p, lay, file)
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
