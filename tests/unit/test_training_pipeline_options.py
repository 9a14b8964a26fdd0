"""Pipeline options of ``kind: training``: Megatron's scatter/gather of pipeline tensors
(Narayanan et al. 2021, section 4.1) and the 1F1B bubble ((pp - 1) / m, section 2.2.1)."""

import pytest

from models.errors import SpecError
from models.schedule import Collective, SendRecv
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


M8 = M.model_copy(update={"num_layers": 8})


@pytest.mark.parametrize("pp,v,m", [(2, 2, 2), (2, 2, 6), (4, 2, 4), (4, 2, 8), (2, 4, 4),
                                    (3, 2, 6)])
def test_interleaved_hand_offs_cross_every_virtual_boundary_in_order(pp, v, m):
    model = M.model_copy(update={"num_layers": pp * v * 2})
    s = training_schedule(model, Parallelism(pp=pp, num_microbatches=m,
                                             virtual_pipeline_stages=v))
    sends = [op for op in s.ops if isinstance(op, SendRecv)]
    assert len(sends) == 2 * (pp * v - 1) * m  # both directions, every virtual boundary
    at = {}
    for i, op in enumerate(sends):
        kind, mb, vs = op.label.split(".")
        at[(kind, int(mb[2:]), int(vs[1:]))] = i
        sender = int(vs[1:])
        assert op.src == sender % pp  # tp = dp = 1: rank = stage
        assert op.dst == (sender + (1 if kind == "act" else -1)) % pp
    for k in range(m):  # activations climb the virtual stages, gradients come back down
        for vs in range(pp * v - 2):
            assert at[("act", k, vs)] < at[("act", k, vs + 1)]
            assert at[("grad", k, vs + 2)] < at[("grad", k, vs + 1)]
        assert at[("act", k, pp * v - 2)] < at[("grad", k, pp * v - 1)]


def test_interleaving_keeps_the_layers_and_divides_the_bubble():
    p1 = Parallelism(tp=2, pp=2, num_microbatches=4)
    p2 = p1.model_copy(update={"virtual_pipeline_stages": 2})
    s1, s2 = training_schedule(M8, p1), training_schedule(M8, p2)

    def tp_layer_calls(s, rank):
        return sorted(op.label for op in s.ops if isinstance(op, Collective)
                      and rank in s.groups[op.group].ranks and ("attention" in op.label
                                                                or "mlp" in op.label))
    assert tp_layer_calls(s1, 0) == tp_layer_calls(s2, 0)  # same 4 layers on stage 0
    assert s2.meta["pipeline_bubble_fraction"] == s1.meta["pipeline_bubble_fraction"] / 2
    # the embedding stays on the first virtual stage (stage 0, chunk 0), the loss on the last
    emb = [op for op in s2.ops if isinstance(op, Collective) and op.label == "forward.embedding"]
    assert {s2.groups[op.group].ranks for op in emb} == {(0, 1)} and len(emb) == 4


@pytest.mark.parametrize("par,needle", [
    (Parallelism(pp=1, virtual_pipeline_stages=2), "needs pp >= 2"),
    (Parallelism(pp=2, virtual_pipeline_stages=3, num_microbatches=2),
     "pp\\*virtual_pipeline_stages=6 does not divide num_layers=8"),
    (Parallelism(pp=2, virtual_pipeline_stages=2, num_microbatches=3),
     "pp=2 does not divide micro-batches"),
])
def test_bad_virtual_stages_are_refused_by_key(par, needle):
    with pytest.raises(SpecError, match=needle) as exc:
        training_schedule(M8, par, file="job.yaml")
    assert any(i.where() == "job.yaml: parallelism.virtual_pipeline_stages"
               for i in exc.value.issues)
