"""Pipeline options of ``kind: training``: Megatron's scatter/gather of pipeline tensors
(Narayanan et al. 2021, section 4.1) and the 1F1B bubble ((pp - 1) / m, section 2.2.1)."""

import pytest

from aitb.errors import SpecError
from aitb.schedule import Collective, SendRecv
from workloads.training import Parallelism, TransformerModel, ideal_iteration, training_schedule

M = TransformerModel(num_layers=4, hidden_size=256, num_attention_heads=8, seq_length=128,
                     vocab_size=1000)
ACT = 2 * 128 * 2 * 256  # bf16 x s x b x h, micro-batch 2


def _par(**kw):
    return Parallelism(tp=4, pp=2, dp=1, micro_batch_size=2, num_microbatches=3, **kw)


def test_whole_activations_by_default():
    s = training_schedule(M, _par())
    sends = [op for op in s.ops if isinstance(op, SendRecv)]
    assert {op.size_bytes for op in sends} == {ACT}
    assert len(sends) == 4 * 3 * 2  # every TP rank, 3 micro-batches, both directions
    assert not any(isinstance(op, Collective) and op.label.startswith("pp.gather")
                   for op in s.ops)


def test_scatter_gather_sends_a_tp_share_and_gathers_it_after_receiving():
    s = training_schedule(M, _par(scatter_gather_pp=True))
    sends = [op for op in s.ops if isinstance(op, SendRecv)]
    assert {op.size_bytes for op in sends} == {ACT // 4}
    assert len(sends) == 4 * 3 * 2
    gathers = [op for op in s.ops if isinstance(op, Collective)
               and op.label.startswith("pp.gather")]
    # stage 1 gathers 3 activations, stage 0 3 gradients, each in its TP group
    assert len(gathers) == 6 and {op.op for op in gathers} == {"all_gather"}
    assert {op.size_bytes for op in gathers} == {ACT}
    assert {s.groups[op.group].ranks for op in gathers if op.label == "pp.gather_act"} == \
        {(4, 5, 6, 7)}
    # rank 4 (stage 1): the k-th gather comes after its k-th share arrived, and each
    # forward (its data broadcasts first) starts right after a gather
    mine = [("recv" if isinstance(op, SendRecv) else op.label) for op in s.ops
            if (isinstance(op, SendRecv) and op.dst == 4) or
            (isinstance(op, Collective) and 4 in s.groups[op.group].ranks)]
    at = [i for i, x in enumerate(mine) if x == "pp.gather_act"]
    assert all(mine[:i].count("recv") >= k + 1 for k, i in enumerate(at))
    assert all(mine[i + 1] == "forward_step" for i in at)
    assert mine.count("forward_step") == 2 * len(at)  # two broadcasts per forward


def test_scatter_gather_with_sequence_parallel_is_refused_by_key():
    with pytest.raises(SpecError, match="sequence_parallel") as exc:
        training_schedule(M, _par(scatter_gather_pp=True, sequence_parallel=True),
                          file="job.yaml")
    assert any(i.where() == "job.yaml: parallelism.scatter_gather_pp"
               for i in exc.value.issues)


@pytest.mark.parametrize("pp,m,want", [(1, 4, 0.0), (2, 4, 0.25), (4, 8, 3 / 8)])
def test_bubble_is_pp_minus_one_over_microbatches(pp, m, want):
    p = Parallelism(pp=pp, num_microbatches=m)
    s = training_schedule(M, p)
    assert s.meta["pipeline_bubble_fraction"] == want
    assert ideal_iteration(s, M, p)["bubble_fraction"] == want
