"""What one pipeline stage does per micro-batch in Megatron/DeepSpeed order (pure).

Steps are stage-local templates (:class:`Step`): a collective on "every group of kind k in this
stage", compute on this stage's ranks, or a pipeline hand-off. Order and sizes follow AICB's
Megatron generator (workload_generator/generate_megatron_workload.py ``forward``/``step`` and
mocked_model/training/MockedMegatron.py, commit 23eec3c), with two deliberate differences:
the backward pass walks each layer MLP-first (Megatron's real order; AICB walks attention
first, which changes no count or size), and MoE layers communicate in the backward pass too
(AICB's ``MOEMLP.backward`` builds its list but returns an empty one). Sizes: see
workloads.training.flops. Compute time = FLOPs / tp / (flops_per_s x efficiency).

Embeddings and the output layer where Megatron-LM runs them (megatron/core/models/gpt):
the word embedding's forward all-reduce over TP (``VocabParallelEmbedding``, reduce of the
partial lookups) on the first stage, nothing in its backward (the input is token ids;
sequence parallelism: below); the
output layer on the last stage, a column-parallel linear over the vocabulary whose input
gradient is all-reduced over TP in the backward (``copy_to_tensor_model_parallel_region``).
AICB instead puts an embedding all-reduce in the backward of the first stage; with one
stage both give the same calls, with several aitb follows Megatron. The optimizer step
reduces each stage's own parameters over DP (flops.stage_split_params: embeddings on the
first and the last stage), then, with tied embeddings and ``pp > 1``, all-reduces the word
embedding's gradient in the embedding group (first and last stage ranks of one TP/DP
position; Megatron ``finalize_model_grads``, ``_allreduce_word_embedding_grads``), which
AICB's generator leaves out.

Activation recomputation (params.Recompute; Korthikanti et al. 2022): with ``full`` the
backward of each recomputed chunk of layers starts with the chunk's forward again, compute
and collectives (Megatron ``CheckpointFunction.backward`` runs the forward, then autograd
on it); with ``selective`` the attention core (4 B s^2 h FLOPs) is recomputed just before
each layer's attention backward, with no communication.

Sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2; Megatron-LM
megatron/core/tensor_parallel): each block's all-reduce becomes an all-gather of the input
before its column-parallel linear and a reduce-scatter after its row-parallel one; in
backward the row's all-gather of the output gradient, the column's all-gather of its input
again (``LinearWithGradAccumulationAndAsyncCommunication.backward`` keeps only the shard and
re-gathers it for the weight gradient) and the column's reduce-scatter of the input
gradient. The embedding all-reduces its output and splits it (learned positions) or
reduce-scatters it (rotary), and all-gathers its gradient in backward
(``_reduce_scatter_embeddings``); the output layer, a column-parallel
linear, gathers its input forward and backward and reduce-scatters its input gradient;
pipeline hand-offs carry the sequence shard; the step all-reduces the gradients of the
parameters marked ``sequence_parallel`` over TP (flops.sequence_parallel_params).

Mixture of experts: :meth:`StageBuilder._moe`. ZeRO: the step (stages 0-2; stage 2's
gradients in every backward, :meth:`StageBuilder._zero2_reduce`) and
:meth:`StageBuilder._zero3` (stage 3: per block, and the embedding and the output layer).
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.training.flops import (
    attention_block_params,
    attention_fwd_flops,
    logits_fwd_flops,
    mlp_block_params,
    mlp_fwd_flops,
    moe_a2a_bytes,
    norm_params,
    position_embedding_params,
    sequence_parallel_params,
    stage_split_params,
    tp_comm_bytes,
    word_embedding_params,
)
from workloads.training.params import Accelerator, Parallelism, Recompute, TransformerModel

__all__ = ["Step", "StageBuilder"]


@dataclass(frozen=True, slots=True)
class Step:
    """``kind`` "coll" (``op`` on every ``group`` kind instance of the stage, ``size_bytes``),
    "compute" (``duration_s`` on the stage's ranks) or "xfer" (pipeline hand-off ``op`` =
    "act"/"grad" of micro-batch ``mb``, sent by virtual stage ``vsrc`` (chunk x pp + stage)
    to physical stage ``peer``, or received from it)."""

    kind: str
    op: str = ""
    group: str = ""
    size_bytes: int = 0
    duration_s: float = 0.0
    label: str = ""
    mb: int = 0
    peer: int = 0
    vsrc: int = 0


class StageBuilder:
    """Builds the steps of each stage for model ``m`` under layout ``p`` on accelerator ``a``
    with activation recomputation ``r`` (default none)."""

    def __init__(self, m: TransformerModel, p: Parallelism, a: Accelerator,
                 r: Recompute | None = None) -> None:
        self.m, self.p, self.a, self.r = m, p, a, r or Recompute()
        self.comm = tp_comm_bytes(m, p.micro_batch_size)
        self.layers = m.num_layers // p.pp
        self.v = p.virtual_pipeline_stages
        self.chunk_layers = self.layers // self.v
        self.rate = a.flops_per_s * a.efficiency

    def _coll(self, op: str, group: str, size: int, label: str) -> list[Step]:
        p = self.p
        x = p.expert_tp
        width = {"tp": p.tp, "dp": p.data_parallel, "ep": p.ep, "etp": x, "ep_tp": x * p.ep,
                 "ep_dp": p.tp * p.data_parallel // (x * p.ep)}.get(group, 2)
        return [Step("coll", op, group, size, label=label)] if width > 1 else []

    def _compute(self, flops: float, label: str) -> Step:
        return Step("compute", duration_s=flops / self.p.tp / self.rate, label=label)

    def forward(self, stage: int, chunk: int = 0) -> list[Step]:
        """One micro-batch's forward pass through model ``chunk`` of ``stage`` (the
        embedding in the first virtual stage, the loss in the last)."""
        m, p, out = self.m, self.p, []
        out += self._coll("broadcast", "tp", 5 * 8, "forward_step")
        out += self._coll("broadcast", "tp", 8 * (p.tp * p.data_parallel * p.pp
                                                  + m.seq_length * p.micro_batch_size),
                          "forward_step")
        first, last = self.ends(stage, chunk)
        if first:
            out += self._embedding_gather("forward", "embedding")
            out += self._coll("reduce_scatter" if self._reduce_scatter_embeddings()
                              else "all_reduce", "tp", self.comm, "forward.embedding")
        base = chunk * self.chunk_layers
        for i in range(self.chunk_layers):
            out += self._layer_forward(base + i, "forward")
        if last:
            out += self._embedding_gather("forward", "output_layer")
            if p.sequence_parallel:  # the column-parallel output layer gathers its input
                out += self._coll("all_gather", "tp", self.comm, "forward.output_layer")
            out.append(self._compute(logits_fwd_flops(m, p.micro_batch_size, p.tp), "logits"))
            for _ in range(3):  # _VocabParallelCrossEntropy: max, sum exp, predicted logit
                out += self._coll("all_reduce", "tp", p.micro_batch_size * m.seq_length * 4,
                                  "forward_step.cross_entropy")
            out += self._coll("all_reduce", "dp", 4, "forward_step.average_losses")
        return out

    def _reduce_scatter_embeddings(self) -> bool:
        """Megatron's ``reduce_scatter_embeddings``: with sequence parallelism and no learned
        position embedding the word embedding reduce-scatters its output; with learned
        positions it all-reduces it (the positions are added to the whole sequence) and then
        splits it into the sequence shards, locally (LanguageModelEmbedding). Either way the
        backward all-gathers the output gradient (the conjugate of the reduce-scatter or
        the split)."""
        return self.p.sequence_parallel and self.m.position_embedding_type != \
            "learned_absolute"

    def ends(self, stage: int, chunk: int) -> tuple[bool, bool]:
        """Whether (stage, chunk) is the first and the last virtual pipeline stage."""
        return (stage == 0 and chunk == 0,
                stage == self.p.pp - 1 and chunk == self.v - 1)

    def backward(self, stage: int, chunk: int = 0) -> list[Step]:
        """One micro-batch's backward pass through model ``chunk`` of ``stage`` (2x the
        forward FLOPs), with the forward of recomputed layers repeated before their backward
        (module docstring)."""
        m, p, out = self.m, self.p, []
        first, last = self.ends(stage, chunk)
        if last:
            out += self._embedding_gather("backward", "output_layer")
            if p.sequence_parallel:  # column-parallel backward: input re-gathered for wgrad
                out += self._coll("all_gather", "tp", self.comm, "backward.output_layer")
            out.append(self._compute(2 * logits_fwd_flops(m, p.micro_batch_size, p.tp),
                                     "backward.output_layer"))
            out += self._coll("reduce_scatter" if p.sequence_parallel else "all_reduce", "tp",
                              self.comm, "backward.output_layer")
            out += self._embedding_reduce("output_layer")
        base = chunk * self.chunk_layers
        for lo, end, recomputed in reversed(self.r.chunks(self.chunk_layers)):
            if recomputed:
                for i in range(lo, end):
                    out += self._layer_forward(base + i, "recompute")
            for i in reversed(range(lo, end)):
                out += self._layer_backward(base + i)
        if first:
            if p.sequence_parallel:  # backward of the reduce-scatter or split: all-gather
                out += self._coll("all_gather", "tp", self.comm, "backward.embedding")
            out += self._embedding_gather("backward", "embedding")
            out += self._embedding_reduce("embedding")
            out += self._zero2_reduce(stage)  # ZeRO-2 runs with one stage only
        return out

    def _layer_forward(self, i: int, phase: str) -> list[Step]:
        """Layer ``i``'s forward (``phase`` "forward", or "recompute" in the backward)."""
        m, mbs = self.m, self.p.micro_batch_size
        return (self._block(attention_fwd_flops(m, mbs), f"attention{i}", phase, moe=False)
                + self._block(mlp_fwd_flops(m, mbs), f"mlp{i}", phase,
                              moe=bool(m.num_experts)))

    def _layer_backward(self, i: int) -> list[Step]:
        """Layer ``i``'s backward: MLP, then attention (after the selective recomputation of
        its core, 4 B s^2 h FLOPs: QK^T and attention over V)."""
        m, mbs = self.m, self.p.micro_batch_size
        out = self._block(2 * mlp_fwd_flops(m, mbs), f"mlp{i}", "backward",
                          moe=bool(m.num_experts))
        if self.r.granularity == "selective":
            out.append(self._compute(4 * mbs * m.seq_length ** 2 * m.hidden_size,
                                     f"recompute.core_attention{i}"))
        return out + self._block(2 * attention_fwd_flops(m, mbs), f"attention{i}",
                                 "backward", moe=False)

    def _block(self, flops: float, name: str, phase: str, moe: bool) -> list[Step]:
        label = f"{phase}.{name}"
        body = [self._compute(flops, label)]
        if moe:
            return self._moe(body, label, phase)
        z3 = self._zero3(name, phase)
        if self.p.sequence_parallel:
            if phase != "backward":  # column: all-gather input; row: reduce-scatter output
                return z3 + self._coll("all_gather", "tp", self.comm, label) + body + \
                    self._coll("reduce_scatter", "tp", self.comm, label)
            return (z3 + self._coll("all_gather", "tp", self.comm, label) + body
                    + self._coll("all_gather", "tp", self.comm, label)
                    + self._coll("reduce_scatter", "tp", self.comm, label))
        return z3 + body + self._coll("all_reduce", "tp", self.comm, label)

    def _moe(self, body: list[Step], label: str, phase: str) -> list[Step]:
        """An MoE block as Megatron's all-to-all token dispatcher runs it
        (megatron/core/transformer/moe/token_dispatcher.py, ``MoEAlltoAllTokenDispatcher``):
        in forward the per-expert token counts all-gathered over the ETP x EP ranks (E
        int64 counts from each), the dispatch all-to-all over EP, the all-gather of the
        received tokens over the experts' TP group, the experts, the reduce-scatter over
        that group and the combine all-to-all; in backward the same collectives as the
        conjugates in reverse order (combine's all-to-all, the all-gather for the
        reduce-scatter, the experts, the reduce-scatter for the all-gather, dispatch's
        all-to-all), the counts not again (nor in forward when padded to capacity: the
        dispatcher's ``drop_and_pad`` path knows every count). Sizes: flops.moe_a2a_bytes
        (per rank's tokens
        x topk, capacity applied) and etp times that gathered. AICB's ``MOEMLP`` has the
        same sizes (its counts gather: 2 x ep x E x tp bytes over EP) but returns no
        backward collectives; aitb follows Megatron."""
        m, p = self.m, self.p
        a2a = moe_a2a_bytes(m, p.micro_batch_size, p.tp)
        gathered = a2a * p.expert_tp
        etp = "tp" if p.expert_tp == p.tp else "etp"
        first, second = label + ".dispatch", label + ".combine"
        if phase == "backward":
            first, second = second, first
        pre: list[Step] = []
        if phase != "backward" and not m.moe_pad_expert_input_to_capacity:
            pre = self._coll("all_gather", "ep_tp", 8 * m.num_experts * p.expert_tp * p.ep,
                             label + ".counts")
        return (pre + self._coll("all_to_all", "ep", a2a, first)
                + self._coll("all_gather", etp, gathered, label) + body
                + self._coll("reduce_scatter", etp, gathered, label)
                + self._coll("all_to_all", "ep", a2a, second))

    def _zero3(self, name: str, phase: str) -> list[Step]:
        """ZeRO-3 (Rajbhandari et al. 2020, ZeRO, section 7.2.2; DeepSpeed's module hooks):
        gather a block's parameters before each pass that uses it (forward, the recomputed
        forward, backward; released after each), reduce-scatter its gradients after its
        backward. A block: the input layer norm and attention
        (flops.attention_block_params), or the pre-MLP layer norm and MLP
        (flops.mlp_block_params), of one TP rank, from the shapes (a stated ``parameters``
        scales the DP step's counts, not these)."""
        if self.p.zero != 3:
            return []
        share = (attention_block_params if name.startswith("attention")
                 else mlp_block_params)(self.m, self.p.tp)
        out = self._coll("all_gather", "dp", self.m.param_bytes * share, f"{phase}.{name}.z3")
        if phase == "backward":
            out += self._coll("reduce_scatter", "dp", self.m.grad_value_bytes * share,
                              f"{phase}.{name}.z3")
        return out

    def _embedding_params(self, which: str, reduce: bool) -> int:
        """ZeRO-3 parameters of the ``which`` module ("embedding": word and position
        embeddings; "output_layer": the final layer norm and the output weight, which with
        tied embeddings is the word embedding). ``reduce``: the gradients reduced after the
        module's backward, each parameter once, after its last use (a tied word embedding:
        after the embedding's backward, which runs last)."""
        m, t = self.m, self.p.tp
        word = word_embedding_params(m, t)
        if which == "embedding":
            return word + position_embedding_params(m)
        return norm_params(m) + (word if m.untie_embeddings or not reduce else 0)

    def _embedding_gather(self, phase: str, which: str) -> list[Step]:
        if self.p.zero != 3:
            return []
        return self._coll("all_gather", "dp", self.m.param_bytes
                          * self._embedding_params(which, False), f"{phase}.{which}.z3")

    def _embedding_reduce(self, which: str) -> list[Step]:
        if self.p.zero != 3:
            return []
        return self._coll("reduce_scatter", "dp", self.m.grad_value_bytes
                          * self._embedding_params(which, True), f"backward.{which}.z3")

    def _grad_shards(self, stage: int) -> list[tuple[str, int, str]]:
        """(group kind, parameters, label) of the stage's dense parameters (DP) and this
        rank's experts (expert-DP), the non-empty ones (flops.stage_split_params)."""
        p = self.p
        dense, expert = stage_split_params(self.m, p.tp, p.ep, p.pp, stage, p.expert_tp)
        return [(g, n, label) for g, n, label in (("dp", dense, "step"),
                                                   ("ep_dp", expert, "step.experts")) if n]

    def _zero2_reduce(self, stage: int) -> list[Step]:
        """ZeRO-2 (DeepSpeed): the gradients reduce-scattered in every micro-batch's
        backward ("ZeRO stage >= 2 communicates during non gradient accumulation boundaries
        as well", DeepSpeedEngine.allreduce_gradients), a rank keeping only its shard."""
        if self.p.zero != 2:
            return []
        return [st for group, n, label in self._grad_shards(stage)
                for st in self._coll("reduce_scatter", group, self.m.grad_value_bytes * n,
                                     label.replace("step", "backward.z2"))]

    def step(self, stage: int) -> list[Step]:
        """The optimizer step of ``stage`` in Megatron's ``finalize_model_grads`` order:
        gradient syncs of the stage's dense parameters over DP and of this rank's experts over
        the expert-data-parallel group (flops.stage_split_params, embeddings on the first and
        last stage): all-reduced (stage 0) or reduce-scattered (stage 1, Megatron's
        distributed optimizer; stage 2 did it in each backward); the layer-norm syncs of
        sequence parallelism, the tied word embedding's gradient over the embedding group
        (once, at the first stage), the NaN check; then, with ZeRO-1/2, the updated bf16
        parameters all-gathered (after the optimizer's update)."""
        m, p, out = self.m, self.p, []
        g = m.grad_value_bytes
        shards = self._grad_shards(stage)
        for group, n, label in shards:
            if p.zero == 0:
                out += self._coll("all_reduce", group, g * n, f"{label}.finish_grad_sync")
            elif p.zero == 1:
                out += self._coll("reduce_scatter", group, g * n, label)
        if p.sequence_parallel:
            out += self._coll("all_reduce", "tp", g * sequence_parallel_params(m, p.pp, stage),
                              "step.layernorm_grads")
        if p.pp > 1 and stage == 0 and not m.untie_embeddings:
            out += self._coll("all_reduce", "embedding", g * word_embedding_params(m, p.tp),
                              "step.embedding_grads")
        out += self._coll("all_reduce", "tp", 4, "step.check_for_nan")
        if p.zero in (1, 2):
            for group, n, label in shards:
                out += self._coll("all_gather", group, m.param_bytes * n, label)
        return out

    def handoff_bytes(self) -> int:
        """Bytes one TP rank sends in a pipeline hand-off: the activation (AICB: 2 * hidden *
        seq * mbs), or its 1/tp share with ``scatter_gather_pp``, or with
        ``sequence_parallel`` its sequence shard (Megatron's p2p tensor shape is
        (seq / tp, mbs, hidden) then; no gather follows)."""
        split = self.p.scatter_gather_pp or self.p.sequence_parallel
        return self.comm // self.p.tp if split else self.comm

    def after_receive(self, op: str) -> list[Step]:
        """What a stage does with a hand-off it received: with ``scatter_gather_pp``, the
        all-gather of the whole tensor in its TP group (Megatron ``gather_split_1d_tensor``);
        ``op`` is "act" or "grad"."""
        if not self.p.scatter_gather_pp:
            return []
        return self._coll("all_gather", "tp", self.comm, f"pp.gather_{op}")
