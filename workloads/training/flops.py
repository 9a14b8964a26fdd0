"""FLOPs, parameter counts and message sizes of a Megatron-style transformer (pure formulas).

FLOPs: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM" (SC'21), section 5.1 and appendix: a transformer layer's forward pass costs
``24 B s h^2 + 4 B s^2 h`` FLOPs with ffn = 4h (QKV 6Bsh^2, scores 2Bs^2h, attention over
values 2Bs^2h, output projection 2Bsh^2, MLP 16Bsh^2), the logit layer ``2 B s h V``; the
backward pass costs twice the forward. Summed over ``l`` layers this is the paper's
``F = 24 B s l h^2 (1 + s/(6h) + V/(12 l h))`` per forward pass; with backward and activation
recomputation the paper's eq. (3) ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``. Here ffn is
general: MLP = ``4 B s h ffn``.

Parameters: the same paper's eq. (2) ``P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h))``, with
ffn general: per layer ``4h^2 + 2 h ffn`` weights, ``3h + ffn`` sharded biases (QKV, fc1),
``6h`` replicated (projection and fc2 biases, two layer norms); embedding ``V h`` (sharded)
and position embedding ``s h`` (replicated); plus Megatron's final layer norm ``2h``
(replicated), which eq. (2) leaves out, and with ``untie_embeddings`` the output layer's own
``V h`` (sharded).

Where Megatron keeps them (megatron/core/models/gpt/gpt_model.py, ``pre_process`` /
``post_process``; ``LanguageModule.setup_embeddings_and_output_layer``): the word and position
embeddings on the first pipeline stage, the final layer norm and the output layer on the last.
With tied embeddings (the default) the last stage of a pipeline holds a second copy of the
word embedding as its output weight, so one TP rank of stage ``i`` of ``pp`` holds
``stage_params = (l / pp) layer + [i = 0] (V h / t + s h) + [i = pp - 1] (2h + V h / t)``
(the last term only for ``pp > 1`` or untied embeddings), and the model's count
(``params_per_tp_rank``) holds the tied word embedding once.

Message sizes: AICB's Megatron workload generator (aliyun/aicb
workload_generator/mocked_model/training/MockedMegatron.py and
workload_generator/generate_megatron_workload.py, commit 23eec3c): TP collectives of a
linear layer ``2 * seq * mbs * hidden`` bytes (``comm_size``), PP hand-offs the same,
cross-entropy all-reduces ``mbs * seq * 4``, the DP loss all-reduce 4 bytes, DP gradient
reduce-scatter ``4 * params / pp`` and parameter all-gather ``2 * params / pp`` (distributed
optimizer) or all-reduce ``4 * params / pp``, where ``params`` counts one TP rank's model.

Mixture of experts (Megatron-LM megatron/core/transformer/moe, expert parallelism as in
Lepikhin et al., "GShard", ICLR 2021): each of ``E`` experts is one MLP; with expert
parallelism ``ep`` a rank holds ``E / ep`` of them (``expert_params``), so the gradients of a
rank's experts are reduced over the expert-data-parallel group (the ``dp / ep`` ranks that
hold the same experts), the dense parameters (attention, embeddings, norms, the router
``h x E``) over the whole DP group. Dispatch and combine all-to-alls carry every token of the
micro-batch ``top-k`` times: ``activation_bytes x mbs x seq x topk x hidden`` per rank
(divided over the TP ranks, each of which routes its share).
"""

from __future__ import annotations

import math

from workloads.training.params import Parallelism, TransformerModel

__all__ = ["padded_vocab", "attention_fwd_flops", "mlp_fwd_flops", "logits_fwd_flops",
           "layer_params", "params_per_tp_rank", "iteration_model_flops", "tp_comm_bytes",
           "expert_mlp_params", "split_params", "moe_a2a_bytes", "moe_dispatch_tokens",
           "stage_params", "stage_split_params", "word_embedding_params", "attention_block_params",
           "mlp_block_params", "sequence_parallel_params", "norm_params",
           "position_embedding_params"]


def padded_vocab(m: TransformerModel, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of ``make_vocab_size_divisible_by * tp``
    (megatron/training/tokenizer ``_vocab_size_with_padding``; AICB ``get_padded_vocab_size``)."""
    mult = m.make_vocab_size_divisible_by * tp
    return math.ceil(m.vocab_size / mult) * mult


def attention_fwd_flops(m: TransformerModel, mbs: int) -> float:
    """Forward FLOPs of one attention block for ``mbs`` sequences: 8Bsh^2 + 4Bs^2h."""
    b, s, h = mbs, m.seq_length, m.hidden_size
    return 8 * b * s * h * h + 4 * b * s * s * h


def mlp_fwd_flops(m: TransformerModel, mbs: int) -> float:
    """Forward FLOPs of one MLP block: 4 B s h ffn (6 B s h ffn with ``swiglu``: three
    matrices), times ``moe_router_topk`` for an MoE layer."""
    k = m.moe_router_topk if m.num_experts else 1
    return (6 if m.swiglu else 4) * mbs * m.seq_length * m.hidden_size * m.ffn * k


def logits_fwd_flops(m: TransformerModel, mbs: int, tp: int = 1) -> float:
    """Forward FLOPs of the output (logit) layer: 2 B s h V (padded V)."""
    return 2 * mbs * m.seq_length * m.hidden_size * padded_vocab(m, tp)


def norm_params(m: TransformerModel) -> int:
    """Parameters of one normalisation layer: 2h (LayerNorm: weight and bias) or h
    (RMSNorm: weight only)."""
    return m.hidden_size * (1 if m.normalization == "RMSNorm" else 2)


def layer_params(m: TransformerModel, tp: int) -> int:
    """Parameters of one transformer layer held by one TP rank (experts: all of them):
    attention_block_params + the pre-MLP norm + the MLP (or every expert's,
    expert_mlp_params); the router (h x E) is counted by the callers that need it."""
    experts = max(m.num_experts, 1)
    return attention_block_params(m, tp) + norm_params(m) + experts * expert_mlp_params(m, tp)


def attention_block_params(m: TransformerModel, tp: int) -> int:
    """Parameters of one layer's input norm and attention held by one TP rank:
    ``(4 h^2 + 3 h) / tp + h + norm`` (QKV and projection weights and the QKV bias sharded,
    the projection bias and the norm replicated); without ``add_bias_linear`` no biases."""
    h, bias = m.hidden_size, int(m.add_bias_linear)
    return (4 * h * h + 3 * h * bias) // tp + h * bias + norm_params(m)


def mlp_block_params(m: TransformerModel, tp: int) -> int:
    """Parameters of one layer's pre-MLP norm and dense MLP held by one TP rank:
    norm + expert_mlp_params; with attention_block_params, layer_params."""
    return norm_params(m) + expert_mlp_params(m, tp)


def sequence_parallel_params(m: TransformerModel, pp: int, stage: int) -> int:
    """Parameters of pipeline ``stage`` whose gradients Megatron all-reduces over TP with
    sequence parallelism (``finalize_model_grads``, ``_allreduce_layernorm_grads``: every
    parameter marked ``sequence_parallel``): per layer the two layer norms (4h) and the
    row-parallel biases (attention projection h, and the MLP's second bias h for a dense
    layer, or the router's h x E for an MoE layer, whose experts compute on gathered
    tokens), plus the final layer norm (2h) on the last stage. Replicated over TP, so the
    same on every TP rank."""
    h, bias = m.hidden_size, int(m.add_bias_linear)
    per_layer = 2 * norm_params(m) + h * bias + (h * m.num_experts if m.num_experts
                                                  else h * bias)
    return m.num_layers // pp * per_layer + (norm_params(m) if stage == pp - 1 else 0)


def expert_mlp_params(m: TransformerModel, tp: int) -> int:
    """Parameters of one MLP (or expert) held by one TP rank: ``(2 h ffn + ffn) / tp + h``
    (fc1 weight and bias sharded, fc2 weight sharded, its bias replicated); with
    ``swiglu`` fc1 is 2 ffn wide (gate and up projection, Shazeer 2020), ``3 h ffn``
    weights; without ``add_bias_linear`` no biases."""
    h, f, bias = m.hidden_size, m.ffn, int(m.add_bias_linear)
    fc1 = 2 * f if m.swiglu else f
    return (h * fc1 + f * h + fc1 * bias) // tp + h * bias


def split_params(m: TransformerModel, tp: int, ep: int,
                 etp: int | None = None) -> tuple[int, int]:
    """(dense, expert) parameters one rank holds over all stages (module docstring): expert
    = layers x (E / ep) x expert_mlp_params sharded over ``etp`` (default ``tp``), dense =
    the rest of params_per_tp_rank minus all E experts plus the router (h x E per layer).
    Without experts: (params, 0). When the model states ``parameters``, both parts are
    scaled by params_per_tp_rank / derived (the shapes give the split, the statement the
    total)."""
    total = params_per_tp_rank(m, tp)
    if not m.num_experts:
        return total, 0
    experts_all = m.num_layers * m.num_experts * expert_mlp_params(m, tp)
    derived = _derived_params(m, tp)
    dense = derived - experts_all + m.num_layers * m.hidden_size * m.num_experts
    scale = total / derived
    mine = m.num_layers * (m.num_experts // ep) * expert_mlp_params(m, etp or tp)
    return round(dense * scale), round(mine * scale)


def moe_dispatch_tokens(m: TransformerModel, mbs: int, tp: int) -> int:
    """Token copies one rank dispatches per MoE layer and micro-batch (Megatron-LM
    megatron/core/transformer/moe/moe_utils.py ``get_capacity``,
    ``topk_softmax_with_capacity``; routing assumed uniform): the rank holds T = mbs x seq /
    tp tokens (its sequence shard; MoE with tp > 1 needs sequence parallelism) and routes
    each to ``k = moe_router_topk`` experts, T k copies. With ``moe_capacity_factor`` c each
    of the E experts takes at most C = ceil(T k / E x c) of them (the rest are dropped):
    min(T k, E C); with ``moe_pad_expert_input_to_capacity`` exactly E C."""
    tokens = mbs * m.seq_length // tp * m.moe_router_topk
    if m.moe_capacity_factor is None:
        return tokens
    e = m.num_experts
    cap = math.ceil(tokens / e * m.moe_capacity_factor)
    return e * cap if m.moe_pad_expert_input_to_capacity else min(tokens, e * cap)


def moe_a2a_bytes(m: TransformerModel, mbs: int, tp: int) -> int:
    """Bytes of one rank's dispatch (or combine) all-to-all buffer:
    moe_dispatch_tokens x hidden x activation_bytes (AICB ``MOEMLP``: seq x hidden x mbs x
    topk / tp x 2, the same without a capacity factor). The experts' TP group then gathers
    etp of these buffers."""
    return moe_dispatch_tokens(m, mbs, tp) * m.hidden_size * m.activation_bytes


def position_embedding_params(m: TransformerModel) -> int:
    """Learned absolute position embeddings, ``seq x h`` (replicated over TP); none with
    ``position_embedding_type: rope`` (rotary embeddings have no parameters)."""
    return m.seq_length * m.hidden_size if m.position_embedding_type == "learned_absolute" \
        else 0


def word_embedding_params(m: TransformerModel, tp: int) -> int:
    """Parameters of one TP rank's shard of the word embedding: padded V x h / tp."""
    return padded_vocab(m, tp) * m.hidden_size // tp


def _derived_stage(m: TransformerModel, tp: int, pp: int, stage: int) -> int:
    """Derived parameters of one TP rank of ``stage`` (module docstring, ``stage_params``)."""
    n = m.num_layers // pp * layer_params(m, tp)
    if stage == 0:
        n += word_embedding_params(m, tp) + position_embedding_params(m)
    if stage == pp - 1:
        n += norm_params(m)  # final norm
        if pp > 1 or m.untie_embeddings:  # the tied copy, or the untied output weight
            n += word_embedding_params(m, tp)
    return n


def _derived_params(m: TransformerModel, tp: int) -> int:
    """Derived parameters of one TP rank over all stages, the tied word embedding once."""
    return _derived_stage(m, tp, 1, 0)


def _scaled(n: int, total: int, derived: int) -> int:
    """``n x total / derived`` rounded half up, in integers (exact when n == derived)."""
    return (2 * n * total + derived) // (2 * derived)


def stage_params(m: TransformerModel, tp: int, pp: int, stage: int) -> int:
    """Parameters one TP rank of pipeline ``stage`` (0-based, of ``pp``) holds, embeddings
    where Megatron keeps them (module docstring). When the model states ``parameters``, the
    derived count is scaled by ``params_per_tp_rank / derived`` (the shapes give the split,
    the statement the total); so for ``pp`` 1 with tied embeddings it equals
    ``params_per_tp_rank``."""
    return _scaled(_derived_stage(m, tp, pp, stage), params_per_tp_rank(m, tp),
                   _derived_params(m, tp))


def stage_split_params(m: TransformerModel, tp: int, ep: int, pp: int,
                       stage: int, etp: int | None = None) -> tuple[int, int]:
    """(dense, expert) parameters one rank of ``stage`` holds (split_params for one stage):
    expert = the stage's layers x (E / ep) x expert_mlp_params sharded over ``etp``
    (default ``tp``), dense = the rest of stage_params minus all E experts plus the router
    (h x E per layer); both scaled as stage_params. Without experts: (stage_params, 0)."""
    if not m.num_experts:
        return stage_params(m, tp, pp, stage), 0
    layers = m.num_layers // pp
    experts_all = layers * m.num_experts * expert_mlp_params(m, tp)
    dense = _derived_stage(m, tp, pp, stage) - experts_all + layers * m.hidden_size \
        * m.num_experts
    mine = layers * (m.num_experts // ep) * expert_mlp_params(m, etp or tp)
    total, derived = params_per_tp_rank(m, tp), _derived_params(m, tp)
    return _scaled(dense, total, derived), _scaled(mine, total, derived)


def params_per_tp_rank(m: TransformerModel, tp: int) -> int:
    """Parameters held by one TP rank over all pipeline stages (AICB's ``_get_total_params``):
    ``ceil(parameters / tp)`` when the model states ``parameters``, else derived."""
    if m.parameters is not None:
        return math.ceil(m.parameters / tp)
    return _derived_params(m, tp)


def iteration_model_flops(m: TransformerModel, p: Parallelism) -> float:
    """Model FLOPs of one iteration over the whole job (forward + 2x backward, no
    recomputation): 3 x (l x (attention + MLP) + logits) x micro-batches x dp."""
    fwd = m.num_layers * (attention_fwd_flops(m, p.micro_batch_size)
                          + mlp_fwd_flops(m, p.micro_batch_size))
    fwd += logits_fwd_flops(m, p.micro_batch_size, p.tp)
    return 3 * fwd * p.microbatches * p.data_parallel


def tp_comm_bytes(m: TransformerModel, mbs: int) -> int:
    """AICB's ``comm_size`` of a TP collective: activation_bytes x seq x mbs x hidden."""
    return m.activation_bytes * m.seq_length * mbs * m.hidden_size
