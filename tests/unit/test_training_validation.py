"""Validation of ``kind: training``: the bytes aitb sends, per GPU and communicator, against
the closed forms of the papers (exact) and against AICB's workload files (within 1 %, or a
named disagreement). Writes nothing; the committed table docs/training_validation.md must
equal :func:`render` (regenerate from the checkout:
``PYTHONPATH=. python tests/unit/test_training_validation.py``).

"Bytes sent per GPU" is what the rank's sockets send for its share of each call, walked
through the step plans aitb's traffic generator replays (traffic_gen.algorithms, default
algorithms): a ring all-reduce of S bytes on n ranks sends 2(n-1)/n x S per rank (reduce-
scatter then all-gather, Patarasuk and Yuan 2009), a ring reduce-scatter or all-gather of a
full buffer S sends (n-1)/n x S, a ring broadcast (n-1)/n x S on average (every rank but the
ring's last forwards S), a pipeline hand-off S by its sender. Received bytes are not counted.
Where n does not divide S (the 4-byte checks) ranks differ by a byte or two, so each figure
is the mean over the ranks of one pipeline stage, an exact fraction.

Closed forms (written here from the papers, not from workloads/): for micro-batch b,
sequence s, hidden h, layers l, padded vocabulary V, TP t, PP p, DP d, m micro-batches and
the activation A = 2 b s h bytes (bf16):
* TP (Narayanan et al. SC'21 sec. 3.3; Korthikanti et al. 2022): per micro-batch and layer
  two all-reduces of A in forward and two in backward, two more per recomputed layer
  (full recomputation); the word embedding's forward all-reduce on the first stage and the
  output layer's backward one on the last; three 4 b s-byte cross-entropy all-reduces on the
  last stage; Megatron's data broadcasts (40 and 8 (t d p + s b) bytes) and one 4-byte
  NaN check per iteration.
* PP: a stage sends A per micro-batch to the next stage (activations) and to the previous
  one (gradients): m A ([i < p-1] + [i > 0]); with scatter/gather (Narayanan sec. 4.1) A/t,
  and each received share is all-gathered over TP, (t-1)/t A per GPU and hand-off; with v
  virtual stages (interleaved 1F1B, sec. 2.2.2) m A (2v - [i = p-1] - [i = 0]) (data
  broadcasts: one per forward, m v).
* DP: the stage's gradients, P_i x G bytes (G = 4 for fp32, 2 for bf16) with
  P_i = (l/p)((12h^2 + 7h)/t + 6h) + [i = 0](V h/t + s h) + [i = p-1](2h + V h/t)
  (Narayanan eq. 2 split by Megatron's TP sharding, embeddings on both ends; the last term
  for p > 1 or untied embeddings), all-reduced (2(d-1)/d), or reduce-scattered plus the bf16
  parameters all-gathered ((d-1)/d (G + 2) P_i, distributed optimizer / ZeRO-1), plus the
  4-byte loss all-reduce per micro-batch on the last stage.
* embedding group (tied, p > 1): the word embedding's gradient V h/t x G on the first and
  last stage, all-reduced between the two (2(2-1)/2 = 1).
* sequence parallelism, ZeRO-1/2/3 and mixture of experts: as :func:`render` states them
  (the text of the generated document).
"""

from __future__ import annotations

import itertools
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from models.errors import SpecError
from models.schedule import Collective, Schedule, SendRecv
from traffic_gen.algorithms import PlanRequest, build_plan
from traffic_gen.algorithms.check import bytes_sent
from workloads.aicb import AicbOptions, load_aicb
from workloads.training import Parallelism, Recompute, TransformerModel, training_schedule

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "training_validation.md"
AICB_DIRS = (ROOT / "tests" / "data" / "aicb", ROOT.parent / "shared" / "data" / "aicb")
KINDS = ("tp", "pp", "dp", "embedding", "ep", "etp", "ep_tp", "ep_dp")


@dataclass(frozen=True)
class Job:
    """One training configuration (GPT shapes, ffn = 4h)."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    tp: int
    pp: int
    dp: int
    mbs: int
    micro: int
    recompute: str = "none"
    method: str | None = None
    recompute_layers: int | None = None
    untie: bool = False
    grad_dtype: str = "fp32"
    zero: int = 0
    scatter_gather: bool = False
    virtual: int = 1
    parameters: int | None = None
    sp: bool = False
    distributed_optimizer: bool = False  # Megatron's flag: ZeRO-1
    experts: int = 0
    topk: int = 1
    ep: int = 1
    etp: int | None = None
    capacity: float | None = None
    pad: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def zero_stage(self) -> int:
        return 1 if self.distributed_optimizer else self.zero

    def model(self) -> TransformerModel:
        return TransformerModel(
            name=self.name, num_layers=self.layers, hidden_size=self.hidden,
            num_attention_heads=self.heads, seq_length=self.seq, vocab_size=self.vocab,
            untie_embeddings=self.untie, grad_dtype=self.grad_dtype,
            parameters=self.parameters, num_experts=self.experts, moe_router_topk=self.topk,
            moe_capacity_factor=self.capacity, moe_pad_expert_input_to_capacity=self.pad,
            **self.extra)

    def schedule(self) -> Schedule:
        return training_schedule(
            self.model(), Parallelism(tp=self.tp, pp=self.pp, dp=self.dp,
                                      micro_batch_size=self.mbs,
                                      num_microbatches=self.micro, zero_stage=self.zero,
                                      use_distributed_optimizer=self.distributed_optimizer,
                                      scatter_gather_pp=self.scatter_gather,
                                      virtual_pipeline_stages=self.virtual,
                                      sequence_parallel=self.sp, ep=self.ep, etp=self.etp),
            recompute=Recompute(granularity=self.recompute, method=self.method,
                                num_layers=self.recompute_layers))

    def layout(self) -> str:
        r = self.recompute + (f" {self.method} {self.recompute_layers}" if self.method else "")
        z = {0: "all-reduce", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}[self.zero]
        if self.distributed_optimizer:
            z = "distributed optimizer"
        moe = ""
        if self.experts:
            moe = (f", {self.experts} experts top-{self.topk} ep {self.ep}"
                   + (f" etp {self.etp}" if self.etp is not None else "")
                   + (f" capacity {self.capacity:g}" if self.capacity is not None else "")
                   + (" padded" if self.pad else ""))
        return (f"t{self.tp} p{self.pp} d{self.dp}, b {self.mbs}, m {self.micro}, recompute "
                f"{r}, {'untied' if self.untie else 'tied'}, {self.grad_dtype} grads, {z}"
                + (", SP" if self.sp else "") + moe
                + (", scatter/gather PP" if self.scatter_gather else "")
                + (f", {self.virtual} virtual stages" if self.virtual > 1 else ""))


GPT27 = dict(layers=32, hidden=2560, heads=32, seq=2048, vocab=51200, tp=8, pp=2, dp=2,
             mbs=12, micro=4)
SMALL = dict(layers=8, hidden=512, heads=8, seq=256, vocab=5000, mbs=2)
GRID = (
    Job("GPT-3 2.7B", recompute="full", **GPT27),
    Job("GPT-3 2.7B", **GPT27),
    Job("GPT-3 2.7B", recompute="selective", grad_dtype="bf16", **GPT27),
    Job("GPT-3 2.7B", recompute="full", method="block", recompute_layers=4, untie=True,
        **GPT27),
    Job("small", tp=2, pp=4, dp=2, micro=6, recompute="full", method="uniform",
        recompute_layers=2, **SMALL),
    Job("small", tp=4, pp=1, dp=4, micro=2, zero=1, **SMALL),
    Job("small", tp=1, pp=2, dp=4, micro=3, untie=True, grad_dtype="bf16", **SMALL),
    Job("small", tp=2, pp=2, dp=1, micro=5, recompute="full", method="block",
        recompute_layers=3, **SMALL),
    Job("small", tp=4, pp=3, dp=2, micro=4, scatter_gather=True,
        **{**SMALL, "layers": 6}),
    Job("small", tp=2, pp=2, dp=2, micro=4, virtual=2, recompute="full", **SMALL),
    Job("small", tp=2, pp=4, dp=1, micro=8, virtual=2, scatter_gather=True, **SMALL),
    # sequence parallelism with every pipeline, recomputation and optimizer option
    Job("small", tp=4, pp=2, dp=2, micro=4, sp=True, **SMALL),
    Job("small", tp=2, pp=2, dp=2, micro=4, sp=True, recompute="full",
        distributed_optimizer=True, **SMALL),
    Job("small", tp=2, pp=2, dp=2, micro=4, sp=True, virtual=2, recompute="selective",
        grad_dtype="bf16", untie=True, **SMALL),
    Job("small", tp=4, pp=1, dp=2, micro=2, sp=True, recompute="full", method="block",
        recompute_layers=3, zero=2, **SMALL),
    # ZeRO-2 (gradients reduce-scattered in every micro-batch's backward) and ZeRO-3
    Job("small", tp=2, pp=1, dp=2, micro=3, zero=2, **SMALL),
    Job("small", tp=2, pp=1, dp=4, micro=2, zero=3, recompute="full", **SMALL),
    Job("small", tp=2, pp=1, dp=4, micro=3, zero=3, sp=True, untie=True, grad_dtype="bf16",
        **SMALL),
    Job("small", tp=1, pp=1, dp=4, micro=2, zero=3, recompute="full", method="uniform",
        recompute_layers=2, **SMALL),
    # mixture of experts: EP, ETP, capacity, with TP (SP), PP, ZeRO and recomputation
    Job("small", tp=1, pp=1, dp=4, micro=2, experts=4, topk=2, ep=2, **SMALL),
    Job("small", tp=2, pp=2, dp=4, micro=4, sp=True, experts=8, topk=2, ep=2,
        recompute="full", distributed_optimizer=True, **SMALL),
    Job("small", tp=2, pp=1, dp=2, micro=2, sp=True, experts=8, topk=2, ep=4, etp=1,
        capacity=1.0, pad=True, **SMALL),
    Job("small", tp=4, pp=2, dp=2, micro=2, sp=True, experts=4, topk=1, ep=2, etp=2,
        zero=1, untie=True, **SMALL),
    Job("small", tp=4, pp=1, dp=2, micro=3, sp=True, experts=4, topk=1, ep=2, etp=2,
        zero=2, **SMALL),
    Job("small", tp=1, pp=2, dp=4, micro=2, experts=4, topk=1, ep=4, capacity=0.5,
        recompute="selective", grad_dtype="bf16", **SMALL),
    Job("small", tp=1, pp=1, dp=4, micro=2, experts=4, topk=2, ep=2, capacity=1.5,
        **SMALL),
)


# --- what aitb sends -------------------------------------------------------------------------

@cache
def _plan_sent(op: str, n: int, size: int, root: int) -> tuple[int, ...]:
    return tuple(bytes_sent(build_plan(op, None, PlanRequest(n=n, size_bytes=size, root=root))))


def sent_per_gpu(s: Schedule) -> dict[tuple[int, str], int]:
    """(rank, group kind) -> bytes the rank sends in one iteration (module docstring)."""
    out: dict[tuple[int, str], int] = defaultdict(int)
    for op in s.ops:
        if isinstance(op, Collective):
            g = s.groups[op.group]
            if len(g.ranks) > 1:
                for r, b in zip(g.ranks, _plan_sent(op.op, len(g.ranks), op.size_bytes,
                                                    op.root), strict=True):
                    out[(r, g.kind)] += b
        elif isinstance(op, SendRecv):
            out[(op.src, s.groups[op.group].kind if op.group else "pp")] += op.size_bytes
    return out


def stage_means(s: Schedule, pp: int) -> dict[tuple[int, str], Fraction]:
    """(stage, kind) -> mean bytes sent per GPU of that stage (ranks in Megatron's layout:
    stage i holds ranks i W/p .. (i+1) W/p - 1)."""
    sent = sent_per_gpu(s)
    per = s.world_size // pp
    out: dict[tuple[int, str], Fraction] = {}
    for i in range(pp):
        for k in KINDS:
            total = sum(sent.get((r, k), 0) for r in range(i * per, (i + 1) * per))
            if total:
                out[(i, k)] = Fraction(total, per)
    return out


# --- the papers' closed forms ----------------------------------------------------------------

def ring(n: int) -> Fraction:
    """Bytes a ring all-reduce sends per GPU, per byte of buffer: 2(n-1)/n."""
    return Fraction(2 * (n - 1), n)


def _padded(vocab: int, tp: int) -> int:
    mult = 128 * tp
    return -(-vocab // mult) * mult


def closed_form(j: Job) -> dict[tuple[int, str], Fraction]:
    """(stage, kind) -> bytes sent per GPU from the module docstring's formulas."""
    t, p, d, b, s, h, m = j.tp, j.pp, j.dp, j.mbs, j.seq, j.hidden, j.micro
    act = 2 * b * s * h
    per = j.layers // p
    grad = 4 if j.grad_dtype == "fp32" else 2
    word = _padded(j.vocab, t) * h // t
    f, E, k = 4 * h, j.experts, j.topk
    u = Fraction(t - 1, t)
    x = j.etp or t  # the experts' TP size
    edp = t * d // (x * j.ep)
    if E:  # tokens one rank dispatches: its sequence shard x top-k, capacity applied
        tok = b * s // t * k
        if j.capacity is not None:
            cap = -(-tok * Fraction(j.capacity) // E)  # ceil(T k / E x c)
            tok = E * cap if j.pad else min(tok, E * cap)
        disp = tok * h * 2
    out: dict[tuple[int, str], Fraction] = defaultdict(Fraction)
    for i in range(p):
        first, last = i == 0, i == p - 1
        if j.recompute == "full":
            redo = per if (j.method or "uniform") == "uniform" else min(j.recompute_layers, per)
        else:
            redo = 0
        v = j.virtual  # virtual stages: m v forwards per stage, p v - 1 boundaries
        hand_offs = m * v - m * (i == p - 1) + m * v - m * (i == 0) if p > 1 else 0
        per_chunk = per // v
        if j.recompute == "full" and (j.method or "uniform") == "block":
            redo = v * min(j.recompute_layers, per_chunk)
        passes = per + redo  # forward passes of a layer (with the recomputed ones)
        # TP, in buffers of A: an all-reduce sends 2u A, an all-gather or reduce-scatter u A
        blocks = 1 if E else 2  # the blocks with TP collectives (an MoE MLP has its own)
        if j.sp:  # Korthikanti et al.: AG + RS forward; backward AG, AG (input again), RS
            fwd, bwd, emb, outl = 2 * u * blocks, 3 * u * blocks, 3 * u, 3 * u
        else:
            fwd, bwd, emb, outl = 2 * u * blocks, 2 * u * blocks, 2 * u, 2 * u
        if t > 1:
            tp = m * act * (passes * fwd + per * bwd + first * emb + last * outl)
            tp += 2 * u * (m * last * 3 * 4 * b * s + 4)
            tp += u * m * v * (40 + 8 * (t * d * p + s * b))
            if j.scatter_gather:  # each received 1/t share all-gathered: (t-1)/t x A
                tp += u * act * hand_offs
            if j.sp:  # gradients of the sequence-parallel parameters (norms, biases, router)
                tp += 2 * u * grad * (per * (5 * h + (h * E if E else h)) + last * 2 * h)
            out[(i, "tp")] += tp
        if p > 1:
            out[(i, "pp")] = Fraction(act * hand_offs, t if (j.scatter_gather or j.sp) else 1)
        if E:  # per MoE layer and pass: dispatch + combine over EP; AG + RS of x buffers
            out[(i, "ep")] += Fraction(j.ep - 1, j.ep) * 2 * disp * m * (passes + per)
            out[(i, "tp" if x == t else "etp")] += (x - 1) * 2 * disp * m * (passes + per)
            n = x * j.ep  # the per-expert token counts (int64) gathered in each forward
            out[(i, "ep_tp")] += (n - 1) * 8 * E * m * passes * (not j.pad)
        attn = (4 * h * h + 3 * h) // t + 5 * h
        mlp = (2 * h * f + f) // t + h
        if E:
            layer, expert = attn + h * E, per * E // j.ep * ((2 * h * f + f) // x + h)
        else:
            layer, expert = attn + mlp, 0
        params = per * layer + first * (word + s * h)
        params += last * (2 * h + (word if (p > 1 or j.untie) else 0))
        for kind, n, size in (("dp", d, params), ("ep_dp", edp, expert)):
            if n < 2 or not size:
                continue
            if j.zero_stage == 0:
                out[(i, kind)] += ring(n) * grad * size
            elif j.zero_stage in (1, 2):  # ZeRO paper sec. 7.2.1: RS gradients, AG params
                reduces = m if j.zero_stage == 2 else 1  # DeepSpeed ZeRO-2: every backward
                out[(i, kind)] += Fraction(n - 1, n) * (reduces * grad + 2) * size
            else:  # sec. 7.2.2: every pass gathers what it uses; one RS per micro-batch
                uses = passes + per  # per layer
                uses_ends = 2 * (word + s * h) + 2 * (2 * h + word)  # embedding, output layer
                out[(i, kind)] += Fraction(n - 1, n) * m * (
                    2 * (uses * (attn + mlp) + uses_ends) + grad * size)
        if d > 1:
            out[(i, "dp")] += ring(d) * 4 * m * last
        if p > 1 and not j.untie and (first or last):
            out[(i, "embedding")] = Fraction(grad * word)
    return {key: val for key, val in out.items() if val}


# --- AICB files ------------------------------------------------------------------------------

def _aicb(name: str) -> Path | None:
    for d in AICB_DIRS:
        if (d / name).is_file():
            return d / name
    return None


# vocabulary 32000: the word embedding the SimAI twin of this file all-reduces
# ('embedding_norm', 2 x 32000 x 5120 bytes)
GPT13B = Job("GPT-13B", layers=40, hidden=5120, heads=32, seq=2048, vocab=32000, tp=8, pp=1,
             dp=16, mbs=1, micro=1, zero=1)
# ffn 11008 (Llama-7B's MLP width) in GPT shapes: the parameter count of the file exactly
LLAMA7B_TP2 = Job("Llama-7B (GPT shapes, ffn 11008)", layers=32, hidden=4096, heads=32,
                  seq=2048, vocab=32000, tp=2, pp=1, dp=64, mbs=1, micro=1, zero=1,
                  extra={"ffn_hidden_size": 11008})
LLAMA = {"ffn_hidden_size": 11008, "swiglu": True, "normalization": "RMSNorm",
         "add_bias_linear": False, "position_embedding_type": "rope"}
LLAMA7B_ZERO2 = Job("Llama-7B (SwiGLU, RMSNorm, RoPE, no biases)", layers=32, hidden=4096,
                    heads=32, seq=2048, vocab=32000, tp=1, pp=1, dp=128, mbs=1, micro=1,
                    zero=2, untie=True, grad_dtype="fp16", extra=LLAMA)
LLAMA7B_ZERO3 = Job("Llama-7B (SwiGLU, RMSNorm, RoPE, no biases)", layers=32, hidden=4096,
                    heads=32, seq=2048, vocab=32000, tp=1, pp=1, dp=128, mbs=1, micro=1,
                    zero=3, untie=True, grad_dtype="fp16", extra=LLAMA)
LLAMA65B_PP8 = Job("Llama-65B (GPT shapes, ffn 28672)", layers=80, hidden=8192, heads=64,
                   seq=2048, vocab=32000, tp=2, pp=8, dp=8, mbs=1, micro=8,
                   extra={"ffn_hidden_size": 28672})  # AICB's spec row


@dataclass(frozen=True)
class Compared:
    """One AICB file against the aitb job of the same configuration; ``verdict(kind, ratio)``
    says whether aitb / AICB = ratio is expected (within 1 %, or a named disagreement)."""

    file: str
    job: Job | None
    options: AicbOptions = field(default_factory=AicbOptions)
    notes: dict[str, str] = field(default_factory=dict)  # kind -> why the two differ
    # kind -> the expected aitb / AICB ratio where they differ: a number, or one per stage
    expect: dict[str, Any] = field(default_factory=dict)


COMPARED = (
    Compared("G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1.csv", GPT13B, notes={
        "dp": "the file's 1,605,739,520 parameters per TP rank are exactly Megatron's count "
              "(Narayanan eq. 2 plus the final layer norm) for the vocabulary of 32000 "
              "(padded to 32768) that its SimAI twin shows; with AICB's default vocabulary "
              "of 50257 it would be 0.73 % more"}),
    Compared("G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt", GPT13B,
             AicbOptions(world_size=128), notes={
                 "tp": "the SimAI file adds three calls on TP: an all-reduce of 2 x "
                       "parameters ('layernorm'), one of the 2 x 32000 x 5120-byte word "
                       "embedding ('embedding_norm') and the distributed optimizer's "
                       "parameter all-gather; Megatron all-reduces layer-norm gradients over "
                       "TP only with sequence parallelism, the embedding only between "
                       "pipeline stages, and gathers parameters over DP (aitb follows "
                       "Megatron)",
                 "dp": "the SimAI file has only the gradient reduce-scatter on DP (its "
                       "parameter all-gather is on TP), from a count 1.2 % above the CSV's; "
                       "aitb reduce-scatters fp32 gradients and all-gathers bf16 parameters "
                       "over DP (Megatron's distributed optimizer)"},
             expect={"tp": 0.39514, "dp": 1.48285}),
    Compared("L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1.csv", LLAMA7B_TP2, notes={
        "dp": "the file's 2,591,674,368 parameters per TP rank are exactly Megatron's GPT "
              "shapes with Llama-7B's MLP width 11008 (two matrices, biases, layer norms, "
              "learned positions), not AICB's spec row (ffn 16384: 3.30 G) nor Llama-7B "
              "itself (SwiGLU, RMSNorm, RoPE, untied: 3.37 G per TP rank); aitb builds the "
              "file's shapes"}),
    Compared("L65B-M1-C05_Llama65B_megatron_tp2_pp8_mbs1.csv.gz", LLAMA65B_PP8, notes={
        "tp": "AICB runs all 80 layers and the embedding's forward and backward all-reduces "
              "on every pipeline stage (4 x 80 + 2 calls of A per micro-batch); Megatron, and "
              "aitb, runs 80 / 8 = 10 layers per stage (4 x 10 calls), the embedding on the "
              "first stage and the output layer on the last (+1 each)",
        "dp": "the file has no optimizer step (no DP rows); aitb reduces each stage's "
              "gradients",
        "embedding": "the file all-reduces the embedding group only in AICB's set-up; "
                     "Megatron all-reduces the tied word embedding's gradients every step"},
        expect={"tp": lambda i: (4 * 10 + (i == 0) + (i == 7)) / (4 * 80 + 2)}),
    Compared("L7B-D1-C01_Llama7B_zero2_mbs1.csv", LLAMA7B_ZERO2, AicbOptions(), notes={
        "dp": "AICB's DeepSpeed ZeRO-2 file all-reduces the fp16 gradient buckets "
              "(DeepSpeed's path without contiguous_gradients) and then all-gathers the "
              "parameters, 3 x (n-1)/n x 2P; ZeRO (Rajbhandari et al. sec. 7.2.1) and "
              "DeepSpeed's default contiguous_gradients reduce each gradient only to its "
              "partition's owner (a reduce-scatter) before the all-gather, 2 x (n-1)/n x 2P, "
              "which aitb follows"}, expect={"dp": 2 / 3}),
    Compared("L7B-D1-C02_Llama7B_zero3_mbs1.csv.gz", LLAMA7B_ZERO3),
    Compared("all_to_all_workload.csv", None),
    Compared("all_reduce_workload.csv", None),
)
NOT_COMPARED = {
    "all_to_all_workload.csv": "a micro-benchmark (one collective swept over sizes), not a "
    "training job",
    "all_reduce_workload.csv": "a micro-benchmark (one collective swept over sizes), not a "
    "training job",
}


AICB_DIFFERENCES = (
    "SP, embedding: AICB all-reduces the embedding's output in forward and again in "
    "backward with or without SP; Megatron all-reduces it in forward and sends nothing in "
    "backward without SP (the backward of `reduce_from_tensor_model_parallel_region` is the "
    "identity); with SP it all-reduces (learned positions) or reduce-scatters (rotary: "
    "`reduce_scatter_embeddings`) in forward and all-gathers the gradient in backward.",
    "SP, output layer: AICB builds the output layer (a column-parallel linear) but never "
    "emits its calls; Megatron all-gathers its input in forward and again in backward and "
    "reduce-scatters its input gradient (without SP: one backward all-reduce, which aitb "
    "also sends).",
    "SP, gradients: AICB sizes `_allreduce_layernorm_grads` from parameters marked "
    "`sequence_parallel`, which none of its mocked parameters is (0 bytes); Megatron "
    "all-reduces the gradients of both norms, the row-parallel biases and the router of "
    "every layer and of the final norm over TP.",
    "MoE backward: AICB's `MOEMLP.backward` builds the dispatch and combine calls and "
    "returns an empty list; Megatron's backward runs the conjugates (all-to-alls, and the "
    "gather and scatter over the experts' TP group swapped).",
    "MoE token counts: AICB all-gathers 2 x ep x E x tp bytes over EP; Megatron's "
    "all-to-all dispatcher all-gathers each rank's E int64 counts over the etp x ep ranks "
    "(8 E etp ep bytes).",
    "MoE sizes: the same without a capacity factor (all-to-all T k h x 2 bytes per rank, the "
    "TP gather k A); AICB has no capacity factor, padding or expert TP size, which change "
    "them in Megatron (`get_capacity`, `--expert-tensor-parallel-size`).",
)


def _expected(c: Compared, stage: int, kind: str) -> float:
    e = c.expect.get(kind, 1.0)
    return float(e(stage) if callable(e) else e)


def aicb_rows() -> list[dict]:
    """One row per (compared file, stage, kind present in either)."""
    rows = []
    for c in COMPARED:
        path = _aicb(c.file)
        if path is None or c.job is None:
            continue
        theirs = stage_means(load_aicb(path, c.options), c.job.pp)
        ours = stage_means(c.job.schedule(), c.job.pp)
        for key in sorted(set(theirs) | set(ours), key=lambda k: (KINDS.index(k[1]), k[0])):
            a, o = theirs.get(key, Fraction(0)), ours.get(key, Fraction(0))
            ratio = float(o / a) if a else None
            rows.append({"file": c.file, "job": c.job, "stage": key[0], "kind": key[1],
                         "aicb": a, "aitb": o, "ratio": ratio,
                         "note": c.notes.get(key[1], ""),
                         "expect": _expected(c, *key)})
    return rows


# --- tests -----------------------------------------------------------------------------------

@pytest.mark.parametrize("job", GRID, ids=lambda j: f"{j.name}-{j.layout()}")
def test_aitb_sends_exactly_the_closed_form(job: Job):
    assert stage_means(job.schedule(), job.pp) == closed_form(job)


MOE_VARIANTS = ({}, {"experts": 4, "topk": 2, "ep": 2},
                {"experts": 4, "topk": 2, "ep": 2, "etp": 1, "capacity": 1.0, "pad": True})


def _combinations():
    """TP 1/2 x (PP 1, PP 2, PP 2 with 2 virtual stages) x SP x (dense, MoE with etp = tp,
    MoE with etp 1 and padded capacity) x ZeRO 0-3 x recomputation, at DP 2."""
    for tp, (pp, v), sp, moe, zero, rec in itertools.product(
            (1, 2), ((1, 1), (2, 1), (2, 2)), (False, True), MOE_VARIANTS, (0, 1, 2, 3),
            ("none", "selective", "full")):
        yield Job("small", tp=tp, pp=pp, dp=2, micro=2, sp=sp, zero=zero, recompute=rec,
                  virtual=v, **moe, **SMALL)


def _refusal(j: Job) -> str | None:
    """Why Megatron/DeepSpeed refuse a combination (None: it runs)."""
    if j.experts and j.tp > 1 and not j.sp:
        return "sequence_parallel"
    if j.zero in (2, 3) and j.pp > 1 or j.zero == 3 and j.experts:
        return f"zero_stage {j.zero}"
    return None


def test_every_combination_runs_the_closed_form_or_is_refused_by_key():
    """TP x PP (and virtual stages) x SP x EP (and ETP, capacity) x ZeRO stage x
    recomputation: every combination the frameworks run sends exactly the closed form; the
    others are refused naming the key. Refused: MoE with TP 2 without SP (2 MoE variants x 3
    pipelines x 4 ZeRO x 3 recomputations = 72), ZeRO-3 with a pipeline or experts (108
    ZeRO-3 combinations minus the 12 dense single-stage ones = 96; 18 of them also in the
    first) and ZeRO-2 with a pipeline (2 x 2 x 2 x 3 x 3 = 72; 12 also in the first)."""
    ran = 0
    for j in _combinations():
        why = _refusal(j)
        if why is None:
            assert stage_means(j.schedule(), j.pp) == closed_form(j), j.layout()
            ran += 1
        else:
            with pytest.raises(SpecError, match=why):
                j.schedule()
    assert ran == 432 - (72 + 96 - 18 + 72 - 12)


def test_gpt3_2_7b_full_recompute_reproduces_the_published_tp_and_pp_volumes():
    """GPT-3 2.7B, t8 p2 d2, b 12, m 4, recompute full: TP per GPU within 5 % of 85 GB on
    every stage; PP 1 GB per GPU counted as sent + received (0.5 GB sent); DP per stage =
    that stage's parameters x 4 B (embeddings on both ends)."""
    job = GRID[0]
    got = stage_means(job.schedule(), job.pp)
    for i in range(2):
        assert abs(float(got[(i, "tp")]) / 85e9 - 1) < 0.05
        assert float(got[(i, "pp")]) * 2 == pytest.approx(1.0066e9, rel=1e-4)
    stage = job.schedule().meta["stage_params_per_tp_rank"]
    assert [got[(i, "dp")] - 4 * (i == 1) * 4 for i in range(2)] == [4 * n for n in stage]


PUBLISHED_DP = 741e6  # Li et al., APNet 2024: DP bytes per GPU and iteration


def dp_gap(j: Job) -> dict[str, Any]:
    """What Megatron's rules contribute to the GPT-3 2.7B DP figure per GPU and stage, in
    bytes (fp32 gradients), and what is left to the published 741 MB."""
    t, p, h, s = j.tp, j.pp, j.hidden, j.seq
    got = stage_means(j.schedule(), p)
    dp = [float(got[(i, "dp")]) for i in range(p)]
    emb = [float(got.get((i, "embedding"), 0)) for i in range(p)]
    return {
        "dp": dp, "embedding": emb,
        "padding": (_padded(j.vocab, t) - j.vocab) * h // t * 4,
        "position": s * h * 4,
        "norms_biases": j.layers // p * (7 * h // t + 6 * h) * 4,
        "left": [PUBLISHED_DP - x for x in dp],
        "with_embedding": [a + b for a, b in zip(dp, emb, strict=True)],
    }


def test_gpt3_2_7b_dp_gap_is_not_closed_by_a_megatron_rule():
    """The candidates: the vocabulary (51200) is already a multiple of 128 x tp, so padding
    adds nothing; position embeddings, layer norms and biases are already counted; counting
    the embedding-group all-reduce as DP brings stage 1 within 3 % but puts stage 0 at
    +5.6 %. No accounting puts both stages within 3 % of 741 MB."""
    g = dp_gap(GRID[0])
    assert g["padding"] == 0
    assert all(abs(x / PUBLISHED_DP - 1) > 0.03 for x in g["dp"])
    within = [abs(x / PUBLISHED_DP - 1) <= 0.03 for x in g["with_embedding"]]
    assert within == [False, True]


def test_every_aicb_file_is_compared_or_says_why_not():
    names = {p.name for d in AICB_DIRS if d.is_dir() for p in d.iterdir()
             if p.name.endswith((".csv", ".csv.gz", ".txt"))} - {"Workload_spec_v1.1.csv"}
    assert names <= {c.file for c in COMPARED}
    for c in COMPARED:
        assert (c.job is None) == (c.file in NOT_COMPARED)


def test_aicb_files_agree_within_one_percent_or_the_disagreement_is_named():
    rows = aicb_rows()
    assert rows
    for r in rows:
        if r["ratio"] is None:  # only aitb sends on this communicator: must be explained
            assert r["note"], r
            continue
        if r["expect"] == 1.0:
            assert r["ratio"] == pytest.approx(1.0, rel=0.01), r
        else:  # a named disagreement of the expected size (the small calls: within 0.5 %)
            assert r["note"] and r["ratio"] == pytest.approx(r["expect"], rel=5e-3), r


def test_docs_table_is_current():
    assert DOC.read_text(encoding="utf-8") == render(), \
        "regenerate: PYTHONPATH=. python tests/unit/test_training_validation.py"


# --- the table -------------------------------------------------------------------------------

def _mb(x: Fraction) -> str:
    return f"{float(x) / 1e6:,.3f}"


def render() -> str:
    """docs/training_validation.md."""
    combos = list(_combinations())
    refused = sum(_refusal(j) is not None for j in combos)
    ran = len(combos) - refused
    out = [
        "# Training traffic: aitb against the papers and AICB",
        "",
        "Generated by `tests/unit/test_training_validation.py` (regenerate from the checkout "
        "with `PYTHONPATH=. python tests/unit/test_training_validation.py`; the test fails "
        "while this file is stale).",
        "",
        "**Bytes sent per GPU**: what one GPU's sockets send in one iteration for its share of "
        "every call, walked through the step plans aitb's traffic generator replays (default "
        "algorithms). A ring all-reduce of S bytes on n GPUs sends 2(n-1)/n x S per GPU "
        "(reduce-scatter then all-gather); a ring reduce-scatter or all-gather of a full "
        "buffer S sends (n-1)/n x S; a ring broadcast (n-1)/n x S on average (every GPU but "
        "the ring's last forwards S); a pipeline hand-off S by its sender. Bytes received "
        "are not counted. Each figure is the mean over the GPUs of one pipeline stage (they "
        "differ by a byte or two where n does not divide a 4-byte check). MB = 10^6 bytes.",
        "",
        "## Against the closed forms (exact)",
        "",
        "Closed forms, with A = 2 b s h bytes (bf16 activation of one micro-batch), t/p/d the "
        "TP/PP/DP sizes, m micro-batches, l layers:",
        "",
        "- TP (Narayanan et al., SC'21; Korthikanti et al., 2022): per micro-batch and layer "
        "2 all-reduces of A forward, 2 backward, 2 more per recomputed layer (full "
        "recomputation; selective adds compute only); the word embedding's forward "
        "all-reduce on the first stage, the output layer's backward all-reduce on the last; "
        "3 cross-entropy all-reduces of 4 b s bytes on the last stage; Megatron's data "
        "broadcasts (40 and 8 (t d p + s b) bytes) per micro-batch; a 4-byte NaN check.",
        "- SP (sequence parallelism, Korthikanti et al. 2022, sec. 4.2.2, as Megatron-LM "
        "implements it): every all-reduce of A becomes an all-gather before the "
        "column-parallel linear and a reduce-scatter after the row-parallel one (the same "
        "bytes, (t-1)/t A each); in backward each block sends 3 of them, not 2: Megatron "
        "keeps only the sequence shard of a column-parallel input and all-gathers it again "
        "for the weight gradient. The embedding (learned positions, as every job here) "
        "all-reduces its output, splits it into the sequence shards locally and all-gathers "
        "their gradient in backward; the output "
        "layer all-gathers its input forward and backward and reduce-scatters its input "
        "gradient; the pipeline sends the sequence shard A/t; and once per step the "
        "gradients of the parameters marked sequence_parallel (per layer both layer norms "
        "and the row-parallel biases, 6h, or 5h + h E with experts; the final layer norm "
        "2h) are all-reduced over TP.",
        "- PP: m A to the next stage (activations) and m A to the previous one (gradients); "
        "with scatter/gather (Narayanan et al., sec. 4.1) A/t per GPU, and every received "
        "share all-gathered over TP ((t-1)/t A per GPU, counted under tp); with v virtual "
        "stages (interleaved 1F1B, sec. 2.2.2) m A (2v - [first] - [last]), and the data "
        "broadcasts once per forward, m v times.",
        "- DP: the stage's parameters P_i x G (G = 4 fp32, 2 bf16 gradients), "
        "P_i = (l/p)((12h^2 + 7h)/t + 6h) + [first](V h/t + s h) + [last](2h + V h/t) "
        "(the last V h/t: the tied copy, or the untied output layer), all-reduced, or with "
        "ZeRO-1 (Megatron's distributed optimizer; Rajbhandari et al., ZeRO, sec. 7.2.1) "
        "reduce-scattered plus bf16 parameters all-gathered, (d-1)/d (G + 2) P_i; with "
        "ZeRO-3 (sec. 7.2.2, DeepSpeed's module hooks) each block's bf16 parameters "
        "all-gathered in every pass that uses them (forward, recomputed forward, backward; "
        "the embedding and the output layer forward and backward) and every gradient "
        "reduce-scattered once per micro-batch; plus the 4-byte loss all-reduce per "
        "micro-batch on the last stage. ZeRO-2 and ZeRO-3 run with p = 1 only (DeepSpeed refuses "
        "pipelines with ZeRO-2/3; Megatron's distributed optimizer, ZeRO-1, runs with "
        "them). ZeRO-2 reduce-scatters the gradients in every micro-batch's backward "
        "(DeepSpeed keeps only the shard), (d-1)/d (m G + 2) P_i.",
        "- EP (mixture of experts, Megatron's all-to-all token dispatcher; Lepikhin et al., "
        "GShard, 2021): every MLP is E experts, each rank routes its T = b s / t tokens "
        "(its sequence shard) to k experts, D = T k h x 2 bytes, or with a capacity factor "
        "c at most C = ceil(T k c / E) tokens per expert (E C exactly when padded). Per "
        "MoE layer and pass a dispatch and a combine all-to-all over EP ((ep-1)/ep D "
        "each), an all-gather and a reduce-scatter of x D over the experts' TP group of x "
        "= etp GPUs ((x-1) D each; under tp when etp = t), and in each forward the int64 "
        "per-expert token counts all-gathered over the etp x ep GPUs (ep_tp; not when "
        "padded to capacity, where every count is known). The dense "
        "parameters (attention, norms, router h E, embeddings) are reduced over DP, each "
        "GPU's E/ep experts ((2 h f + f)/x + h each) over the expert-DP group of t d / (x ep) "
        "GPUs (ep_dp).",
        "- embedding (tied, p > 1): V h/t x G between the first and the last stage.",
        "",
        "The test also runs every combination of TP 1/2, PP 1/2 (and 2 with 2 virtual "
        "stages), SP, experts (none; 4 experts top-2 on ep 2 with etp = t; the same with "
        "etp 1 and capacity factor 1 padded), ZeRO 0-3 and recomputation "
        "none/selective/full at DP 2: "
        f"{ran} send exactly the closed form; the other {refused} are refused naming the "
        "key, as Megatron-LM and DeepSpeed refuse them (MoE with t > 1 needs SP; ZeRO-2 "
        "and ZeRO-3 not with pipelines) or aitb does not model them (ZeRO-3 with experts).",
        "",
        "| job | layout | stage | communicator | aitb MB/GPU | closed form MB/GPU | equal |",
        "| --- | --- | --- | --- | ---: | ---: | --- |",
    ]
    for j in GRID:
        got, want = stage_means(j.schedule(), j.pp), closed_form(j)
        for key in sorted(set(got) | set(want), key=lambda k: (k[0], KINDS.index(k[1]))):
            g, w = got.get(key, Fraction(0)), want.get(key, Fraction(0))
            out.append(f"| {j.name} | {j.layout()} | {key[0]} | {key[1]} | {_mb(g)} | "
                       f"{_mb(w)} | {'yes' if g == w else 'NO'} |")
    j = GRID[0]
    got = stage_means(j.schedule(), j.pp)
    tp = [float(got[(i, 'tp')]) / 1e9 for i in range(2)]
    dp = [float(got[(i, 'dp')]) / 1e6 for i in range(2)]
    pp = float(got[(0, "pp")]) / 1e9
    gap = dp_gap(j)
    stage, left = j.schedule().meta["stage_params_per_tp_rank"], gap["left"]
    wemb = [x / 1e6 for x in gap["with_embedding"]]
    out += [
        "",
        "### GPT-3 2.7B, t8 p2 d2, b 12, m 4, `recompute: full`, against the published job",
        "",
        "Li et al., \"Understanding Communication Characteristics of Distributed Training\" "
        "(APNet 2024) quote about 85 GB TP, 1 GB PP and 741 MB DP per GPU and iteration.",
        "",
        f"- TP: {tp[0]:.2f} GB (stage 0), {tp[1]:.2f} GB (stage 1) sent per GPU: "
        f"{(tp[0] / 85 - 1) * 100:+.1f} % and {(tp[1] / 85 - 1) * 100:+.1f} % of 85 GB. "
        "Without recomputation it is 2/3 of the layer traffic (57 GB).",
        f"- PP: {pp:.3f} GB sent per GPU (stage 0 sends the activations, stage 1 the "
        f"gradients of 4 micro-batches of 125.8 MB); {2 * pp:.3f} GB sent + received, the "
        "published 1 GB (also the whole pipeline pair's traffic).",
        f"- DP: {dp[0]:.1f} MB (stage 0) and {dp[1]:.1f} MB (stage 1) sent per GPU, each "
        "stage's parameters x 4 B (a 2-GPU ring all-reduce sends its size once) plus, on "
        "stage 1, the 4-byte loss all-reduces: stage 0 holds 16 layers, the word and the "
        f"position embedding ({stage[0]:,} parameters per TP rank), stage 1 16 layers, the "
        f"final layer norm and the tied word embedding copy ({stage[1]:,}). That is "
        f"{(dp[0] / 741 - 1) * 100:+.1f} % and {(dp[1] / 741 - 1) * 100:+.1f} % of 741 MB, "
        "outside 3 %. Megatron's rules that could add to it:",
        f"  - vocabulary padding (`--make-vocab-size-divisible-by` 128 x t = {128 * j.tp}): "
        f"51200 is already a multiple, {gap['padding'] / 1e6:.1f} MB (the GPT-2 vocabulary, "
        "50257, pads to the same 51200);",
        f"  - position embeddings (s h): {gap['position'] / 1e6:.1f} MB, already in stage 0;",
        "  - layer-norm and bias parameters ((l/p)(7h/t + 6h), the final layer norm 2h): "
        f"{gap['norms_biases'] / 1e6:.2f} MB per stage, already in both;",
        "  - the embedding-group all-reduce of the tied word embedding "
        f"({gap['embedding'][0] / 1e6:.1f} MB per GPU of either stage) runs on its own "
        "communicator (the first and last stage GPUs of one TP and DP position); counted "
        f"as DP it would give {wemb[0]:.1f} MB ({(wemb[0] / 741 - 1) * 100:+.1f} %) and "
        f"{wemb[1]:.1f} MB ({(wemb[1] / 741 - 1) * 100:+.1f} %): stage 1 within 3 %, "
        "stage 0 not.",
        "",
        "  No Megatron rule closes the gap, so aitb keeps Megatron's placement rather than "
        f"fit the figure. What remains: {left[0] / 1e6:.1f} MB on stage 0 "
        f"({left[0] / 4e6:.2f} M fp32 gradients per GPU, {left[0] / 4 / stage[0] * 100:.1f} % "
        f"of its parameters) and {left[1] / 1e6:.1f} MB on stage 1 ({left[1] / 4e6:.2f} M, "
        f"{left[1] / 4 / stage[1] * 100:.1f} %); the published figure is one number for "
        "all GPUs, while Megatron's two stages differ by "
        f"{dp[0] - dp[1]:.1f} MB. 741 MB equals (2.7e9 / 2 + 51200 x 2560) / 8 x "
        "4 B = 740.5 MB, the nominal 2.7 G parameters split evenly over the two stages plus "
        "a whole word embedding on each (the even split already holds half of one), which "
        "is not how Megatron counts them: its shapes give 2.654 G parameters.",
        "",
        "## Against AICB workload files",
        "",
        "The AICB files in tests/data/aicb and ../shared/data/aicb, read by aitb's importer "
        "(iteration rows only, not AICB's `init` set-up), against the aitb job of the same "
        "configuration built from its parameters; ratio = aitb / AICB. Rows outside 1 % say "
        "where AICB and Megatron disagree and which one aitb follows.",
        "",
        "| file | aitb job | stage | communicator | AICB MB/GPU | aitb MB/GPU | aitb / AICB | "
        "note |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in aicb_rows():
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.4f}"
        note = r["note"] or ("within 1 %" if r["ratio"] is not None else "")
        out.append(f"| {r['file']} | {r['job'].name}, {r['job'].layout()} | {r['stage']} | "
                   f"{r['kind']} | {_mb(r['aicb'])} | {_mb(r['aitb'])} | {ratio} | {note} |")
    out += ["", "Not compared:", ""]
    out += [f"- {name}: {why}." for name, why in NOT_COMPARED.items()]
    out += ["", "### Where AICB's generator and Megatron-LM differ on options no file covers",
            "", "The repository has no AICB file with sequence parallelism or experts. "
            "AICB's Megatron generator (workload_generator/mocked_model/training/"
            "MockedMegatron.py) and Megatron-LM (megatron/core) differ there as follows; "
            "aitb follows Megatron-LM, whose collectives are the ones a real job sends.", ""]
    out += [f"- {d}" for d in AICB_DIFFERENCES]
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    DOC.write_text(render(), encoding="utf-8")
    print(DOC, file=sys.stderr)
