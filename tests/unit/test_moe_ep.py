"""MoE with expert parallelism as Megatron shards it, against a hand calculation.

Model: 2 layers, h = 64, ffn = 256, s = 32, V = 1024 (already a multiple of 128), E = 8
experts, top-2, tp = pp = 1, dp = 4, bf16 activations, fp32 gradients (4 B).
  one expert: 2 h ffn + ffn + h          = 32768 + 256 + 64            = 33088
  attention + norms: 4h^2 + 3h + h + 4h  = 16384 + 192 + 64 + 256      = 16896
  router: h x E                          = 512
  embeddings: V h + s h                  = 65536 + 2048                = 67584
  final layer norm: 2h                                                 = 128
  dense per rank = 2 x (16896 + 512) + 67584 + 128                     = 102528
  experts per rank = 2 layers x (8 / ep) x 33088 = 529408 / ep
  DP all-reduce (dense grads, group of 4)        = 4 x 102528          = 410112 B, any ep
  expert-DP all-reduce (group of dp/ep ranks)    = 4 x 529408 / ep     = 2117632 / ep B
    (ep = 4: groups of one rank, no collective)
  dispatch/combine all-to-all per rank = 2 B x 1 x 32 x 2 x 64          = 8192 B
"""

import pytest

from workloads.training import Parallelism, TransformerModel, training_schedule
from workloads.training.flops import split_params

MODEL = TransformerModel(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32,
                         ffn_hidden_size=256, vocab_size=1024, num_experts=8, moe_router_topk=2)


def _step_syncs(ep):
    s = training_schedule(MODEL, Parallelism(dp=4, ep=ep))
    out = {}
    for op in s.ops:
        if getattr(op, "label", "").endswith("finish_grad_sync"):
            g = s.groups[op.group]
            out.setdefault(g.kind, set()).add((op.op, op.size_bytes, len(g.ranks)))
    return s, out


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_gradient_syncs_follow_megatron_ep(ep):
    assert split_params(MODEL, 1, ep) == (102528, 529408 // ep)
    s, syncs = _step_syncs(ep)
    assert syncs["dp"] == {("all_reduce", 410112, 4)}
    if ep < 4:
        assert syncs["ep_dp"] == {("all_reduce", 2117632 // ep, 4 // ep)}
    else:
        assert "ep_dp" not in syncs
    assert s.meta["expert_params_per_rank"] == 529408 // ep


@pytest.mark.parametrize("ep", [2, 4])
def test_all_to_all_is_tokens_topk_hidden(ep):
    s = training_schedule(MODEL, Parallelism(dp=4, ep=ep))
    a2a = {(op.size_bytes, s.groups[op.group].kind, len(s.groups[op.group].ranks))
           for op in s.ops if getattr(op, "op", "") == "all_to_all"}
    assert a2a == {(8192, "ep", ep)}


def test_expert_grads_total_shrink_with_ep():
    """The bytes one rank all-reduces per iteration fall with ep (they were 704 MB for
    every ep of a real model before)."""
    totals = []
    for ep in (1, 2, 4):
        _, syncs = _step_syncs(ep)
        totals.append(sum(size for v in syncs.values() for _, size, _ in v))
    assert totals == [410112 + 2117632, 410112 + 2117632 // 2, 410112]
