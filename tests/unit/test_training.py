import pytest

from models.errors import SpecError
from models.schedule import Compute, SendRecv
from workloads.summary import collective_table
from workloads.training import (
    Accelerator,
    Parallelism,
    TransformerModel,
    ideal_iteration,
    training_schedule,
)
from workloads.training.flops import iteration_model_flops, padded_vocab

SMALL = TransformerModel(num_layers=4, hidden_size=256, num_attention_heads=8, seq_length=128,
                         vocab_size=1000, num_experts=0)


def _t(s):
    return {(r["op"], r["group"]): r for r in collective_table(s)}


def test_tp_all_reduces_two_forward_two_backward_per_layer():
    t = _t(training_schedule(SMALL, Parallelism(tp=2, dp=1)))
    comm = 2 * 128 * 1 * 256
    # per layer 2 fwd + 2 bwd, plus the embedding forward and backward
    assert t[("all_reduce", "tp")]["sizes_bytes"] == [4, 128 * 4, comm]
    n_layer = 4 * 4 + 2
    assert t[("all_reduce", "tp")]["count"] == n_layer + 3 + 1  # + cross entropy + nan check


def test_sequence_parallel_replaces_all_reduce_by_gather_scatter_pairs():
    t = _t(training_schedule(SMALL, Parallelism(tp=2, dp=1, sequence_parallel=True)))
    # per block: fwd col AG + row RS, bwd row AG + col AG (input again, for the weight
    # gradient) + col RS (Megatron's LinearWithGradAccumulationAndAsyncCommunication);
    # the embedding (learned positions) all-reduces its output, splits it locally and
    # all-gathers the gradient in backward; the column-parallel output layer gathers its
    # input forward and backward and reduce-scatters its input gradient
    comm = 2 * 128 * 1 * 256
    assert t[("all_gather", "tp")]["count"] == 4 * 2 * 3 + 2 + 1
    assert t[("reduce_scatter", "tp")]["count"] == 4 * 2 * 2 + 1
    # all-reduces: the embedding's, cross entropy, NaN check, layer-norm gradients
    assert t[("all_reduce", "tp")]["sizes_bytes"] == [4, 128 * 4,
                                                      4 * (4 * 6 * 256 + 2 * 256), comm]
    rope = SMALL.model_copy(update={"position_embedding_type": "rope"})
    r = _t(training_schedule(rope, Parallelism(tp=2, dp=1, sequence_parallel=True)))
    # rotary: Megatron's reduce_scatter_embeddings, the embedding's all-reduce a reduce-scatter
    assert r[("reduce_scatter", "tp")]["count"] == 4 * 2 * 2 + 2
    assert comm not in r[("all_reduce", "tp")]["sizes_bytes"]


def test_compute_time_matches_narayanan_flops():
    m = TransformerModel(num_layers=8, hidden_size=512, num_attention_heads=8, seq_length=256,
                         vocab_size=5000)
    p = Parallelism(tp=2, dp=2, micro_batch_size=2, num_microbatches=3)
    a = Accelerator(flops_per_s=100e12, efficiency=0.4)
    b, s, layers, h, v = 2, 256, 8, 512, padded_vocab(m, 2)
    # Narayanan et al. 2021: forward 24Bslh^2 (1 + s/6h + V/(12lh)); fwd + bwd = 3x
    per_batch = 3 * 24 * b * s * layers * h * h * (1 + s / (6 * h) + v / (12 * layers * h))
    assert iteration_model_flops(m, p) == pytest.approx(per_batch * 3 * 2, rel=1e-12)
    sched = training_schedule(m, p, a)
    ideal = ideal_iteration(sched, m, p, a)
    assert ideal["compute_s"] == pytest.approx(per_batch * 3 / 2 / (100e12 * 0.4), rel=1e-12)
    assert ideal["mfu_compute_only"] == pytest.approx(0.4, rel=1e-12)


@pytest.mark.parametrize("pp,m", [(2, 1), (2, 5), (4, 3), (4, 8)])
def test_pipeline_hand_offs_are_causal_and_complete(pp, m):
    p = Parallelism(tp=1, pp=pp, dp=1, num_microbatches=m)
    s = training_schedule(SMALL, p)
    sends = [op for op in s.ops if isinstance(op, SendRecv)]
    assert len(sends) == 2 * (pp - 1) * m
    seen = {}
    for i, op in enumerate(sends):
        kind, mb = op.label.split(".")
        seen[(kind, mb, op.src, op.dst)] = i
    for k in range(m):  # activations flow 0->1->..., gradients back, in order
        for st in range(pp - 2):
            assert seen[("act", f"mb{k}", st, st + 1)] < seen[("act", f"mb{k}", st + 1, st + 2)]
        assert seen[("act", f"mb{k}", pp - 2, pp - 1)] < seen[("grad", f"mb{k}", pp - 1, pp - 2)]


def test_pipeline_compute_runs_only_on_its_stage():
    s = training_schedule(SMALL, Parallelism(tp=2, pp=2, dp=1))
    stages = {op.ranks for op in s.ops if isinstance(op, Compute)}
    assert stages == {(0, 1), (2, 3)}


def test_zero_stages_change_the_dp_traffic():
    z0 = _t(training_schedule(SMALL, Parallelism(dp=4, zero_stage=0)))
    z1 = _t(training_schedule(SMALL, Parallelism(dp=4, zero_stage=1)))
    z3 = _t(training_schedule(SMALL, Parallelism(dp=4, zero_stage=3)))
    grad = z0[("all_reduce", "dp")]["sizes_bytes"][-1]
    assert z1[("reduce_scatter", "dp")]["total_bytes"] == grad
    assert z1[("all_gather", "dp")]["total_bytes"] == grad // 2
    # per block forward and backward, plus the embedding and the output layer (tied: the
    # word embedding gathered for both) forward and backward
    assert z3[("all_gather", "dp")]["count"] == 4 * 2 * 2 + 2 * 2
    # every parameter's gradient reduce-scattered once: 2 blocks per layer, the output
    # layer's final norm, the embeddings (the tied word embedding after its last use)
    assert z3[("reduce_scatter", "dp")]["count"] == 4 * 2 + 2
    assert z3[("reduce_scatter", "dp")]["total_bytes"] == grad


def test_moe_all_to_all_on_expert_groups():
    moe = SMALL.model_copy(update={"num_experts": 4, "moe_router_topk": 2})
    s = training_schedule(moe, Parallelism(tp=2, dp=4, ep=2, sequence_parallel=True))
    t = _t(s)
    assert t[("all_to_all", "ep")]["group_size"] == 2
    assert t[("all_to_all", "ep")]["count"] == 4 * 4  # dispatch + combine, fwd and bwd
    assert t[("all_to_all", "ep")]["sizes_bytes"] == [2 * 128 * 256 * 2 // 2]


@pytest.mark.parametrize("model,par,key,needle", [
    (SMALL, Parallelism(tp=3), "parallelism.tp", "tp=3 does not divide num_attention_heads=8"),
    (SMALL, Parallelism(tp=2, dp=3, world_size=8), "parallelism.world_size",
     "dp\\*tp\\*pp = 3\\*2\\*1 = 6 != world_size 8"),
    (SMALL, Parallelism(pp=3), "parallelism.pp", "pp=3 does not divide num_layers=4"),
    (SMALL, Parallelism(dp=4, ep=2), "model.num_experts", "mixture-of-experts"),
])
def test_invalid_layouts_name_the_key(model, par, key, needle):
    with pytest.raises(SpecError, match=needle) as exc:
        training_schedule(model, par, file="job.yaml")
    assert any(i.where() == f"job.yaml: {key}" for i in exc.value.issues)


def test_llama_shapes_give_the_published_parameter_count():
    """Llama-7B (Touvron et al. 2023): 32 layers, h 4096, ffn 11008 SwiGLU, RMSNorm, no
    biases, rotary positions, vocabulary 32000, untied output: 6,738,415,616 parameters,
    the count of the released checkpoint."""
    from workloads.training.flops import params_per_tp_rank
    llama = TransformerModel(num_layers=32, hidden_size=4096, num_attention_heads=32,
                             seq_length=2048, ffn_hidden_size=11008, vocab_size=32000,
                             swiglu=True, normalization="RMSNorm", add_bias_linear=False,
                             position_embedding_type="rope", untie_embeddings=True)
    assert params_per_tp_rank(llama, 1) == 6_738_415_616
    s = training_schedule(llama, Parallelism(dp=2, zero_stage=3))
    rs = sum(op.size_bytes for op in s.ops if getattr(op, "op", "") == "reduce_scatter")
    assert rs == 4 * 6_738_415_616  # every gradient reduce-scattered once (fp32)
