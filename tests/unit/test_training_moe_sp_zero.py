"""Sequence parallelism, mixture of experts (EP, ETP, capacity) and ZeRO in a training
workload: the sizes against hand calculations, the expert layout, and the combinations
Megatron-LM and DeepSpeed refuse, refused by key. (Every combination's bytes against the
closed forms: tests/unit/test_training_validation.py.)"""

import json
from pathlib import Path

import pytest

from models.errors import SpecError
from models.schedule import Collective, SendRecv
from workloads.layout import Layout
from workloads.training import Parallelism, TransformerModel, training_schedule
from workloads.training.flops import moe_dispatch_tokens

ROOT = Path(__file__).parents[2]
M = TransformerModel(num_layers=4, hidden_size=256, num_attention_heads=8, seq_length=128,
                     vocab_size=1000)
MOE = M.model_copy(update={"num_experts": 8, "moe_router_topk": 2})


def _sizes(s, op, kind):
    return {o.size_bytes for o in s.ops if isinstance(o, Collective) and o.op == op
            and s.groups[o.group].kind == kind}


def test_sequence_parallel_pipeline_sends_the_sequence_shard():
    """Megatron's p2p tensor shape with sequence parallelism is (seq / tp, mbs, h)."""
    s = training_schedule(M, Parallelism(tp=4, pp=2, sequence_parallel=True,
                                         micro_batch_size=2, num_microbatches=2))
    assert {o.size_bytes for o in s.ops if isinstance(o, SendRecv)} == {2 * 128 * 2 * 256 // 4}


@pytest.mark.parametrize("cf,pad,tokens", [
    (None, False, 128 // 2 * 2),          # T k = 64 x 2
    (1.0, False, 128),                    # capacity ceil(128 / 8) = 16 per expert: no drop
    (0.5, False, 64),                     # 8 per expert: half dropped
    (1.3, True, 8 * 21),                  # ceil(16 x 1.3) = 21 per expert, padded
])
def test_dispatch_tokens_follow_megatrons_capacity(cf, pad, tokens):
    m = MOE.model_copy(update={"moe_capacity_factor": cf,
                               "moe_pad_expert_input_to_capacity": pad})
    assert moe_dispatch_tokens(m, 1, 2) == tokens
    s = training_schedule(m, Parallelism(tp=2, dp=4, ep=4, sequence_parallel=True))
    assert _sizes(s, "all_to_all", "ep") == {tokens * 256 * 2}
    # the experts' TP group (here the TP group) gathers the tokens of both TP ranks
    assert tokens * 256 * 2 * 2 in _sizes(s, "all_gather", "tp")


def test_expert_layout_regroups_a_stage_with_etp():
    """tp 2, dp 4, ep 4, etp 1: a stage's 8 GPUs are 4 EP x 2 expert-DP, EP groups
    consecutive ranks (Megatron's tp-ep-dp expert order)."""
    lay = Layout(tp=2, dp=4, ep=4, etp=1)
    assert [g.ranks for g in lay.groups("ep").values()] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [g.ranks for g in lay.groups("ep_dp").values()] == [(0, 4), (1, 5), (2, 6),
                                                                (3, 7)]
    s = training_schedule(MOE, Parallelism(tp=2, dp=4, ep=4, etp=1, sequence_parallel=True))
    kinds = {s.groups[o.group].kind for o in s.ops if isinstance(o, Collective)
             and o.label.startswith("forward.mlp")}
    assert kinds == {"ep", "ep_tp"}  # no expert TP collective with etp 1


def test_expert_tp_group_when_etp_differs_from_tp():
    s = training_schedule(MOE, Parallelism(tp=4, dp=2, ep=2, etp=2, sequence_parallel=True))
    assert [g.ranks for g in s.groups.values() if g.kind == "etp"] == [(0, 1), (2, 3),
                                                                       (4, 5), (6, 7)]
    assert [g.ranks for g in s.groups.values() if g.kind == "ep"] == [(0, 2), (1, 3),
                                                                      (4, 6), (5, 7)]


@pytest.mark.parametrize("model,par,key,needle", [
    (MOE, Parallelism(tp=2, dp=2, ep=2), "parallelism.sequence_parallel",
     "needs sequence_parallel"),
    (M, Parallelism(pp=2, dp=2, zero_stage=3), "parallelism.zero_stage", "pp > 1"),
    (M, Parallelism(pp=2, dp=2, zero_stage=2), "parallelism.zero_stage", "zero_stage 2"),
    (MOE, Parallelism(dp=2, ep=2, zero_stage=3), "parallelism.zero_stage", "mixture"),
    (M, Parallelism(dp=2, zero_stage=3, use_distributed_optimizer=True),
     "parallelism.use_distributed_optimizer", "give one of them"),
    (MOE, Parallelism(tp=2, dp=3, ep=4, etp=1, sequence_parallel=True), "parallelism.etp",
     "etp\\*ep=4 does not divide tp\\*dp=6"),
    (M.model_copy(update={"moe_capacity_factor": 1.0}), Parallelism(),
     "model.moe_capacity_factor", "needs a mixture-of-experts"),
    (M, Parallelism(tp=2, etp=1), "model.num_experts", "etp != tp"),
    (M.model_copy(update={"seq_length": 126}), Parallelism(tp=4, sequence_parallel=True),
     "parallelism.sequence_parallel", "tp=4 does not divide seq_length=126"),
])
def test_refused_combinations_name_the_key(model, par, key, needle):
    with pytest.raises(SpecError, match=needle) as exc:
        training_schedule(model, par, file="job.yaml")
    assert any(i.where() == f"job.yaml: {key}" for i in exc.value.issues), exc.value.issues


def test_zero2_reduce_scatters_in_every_backward_and_gathers_once():
    """DeepSpeed ZeRO-2 communicates at every micro-batch, ZeRO-1 (Megatron's distributed
    optimizer) at the accumulation boundary; both gather the parameters once."""
    def calls(zero):
        s = training_schedule(M, Parallelism(dp=4, zero_stage=zero, num_microbatches=3))
        return [(o.op, o.size_bytes) for o in s.ops if isinstance(o, Collective)
                and o.op in ("reduce_scatter", "all_gather")]
    z1, z2 = calls(1), calls(2)
    assert len(z1) == 2 and z2 == [z1[0]] * 3 + [z1[1]]


def test_distributed_optimizer_flag_is_zero_stage_one():
    a = training_schedule(M, Parallelism(tp=2, dp=4, use_distributed_optimizer=True))
    b = training_schedule(M, Parallelism(tp=2, dp=4, zero_stage=1))
    assert a.ops == b.ops and a.meta["zero_stage"] == 1


def test_mixtral_example_inspects_with_expert_traffic():
    """The example: per MoE layer, micro-batch and pass each GPU dispatches its sequence
    shard x top-2 (4096 / 2 x 2 x 4096 x 2 B = 33.5 MB) and combines it back: 16 layers x 4
    micro-batches x 4 calls per stage; the experts' gradients (16 layers x 2 experts x 3 x
    4096 x 14336 parameters per GPU, fp32) are reduce-scattered over the 2-GPU expert-DP
    group."""
    from typer.testing import CliRunner

    from orchestration.cli.app import app
    example = ROOT / "workloads/examples/mixtral_8x7b_sp_ep.yaml"
    r = CliRunner().invoke(app, ["workload", "inspect", str(example), "--json"])
    assert r.exit_code == 0, r.output
    rows = {(x["stage"], x["op"], x["group"]): x for x in json.loads(r.output)["stages"]}
    a2a = rows[("0", "all_to_all", "ep")]
    assert (a2a["count"], a2a["sizes_bytes"]) == (16 * 4 * 4, [2048 * 2 * 4096 * 2])
    assert rows[("1", "reduce_scatter", "ep_dp")]["sizes_bytes"] == \
        [4 * 16 * 2 * 3 * 4096 * 14336]
