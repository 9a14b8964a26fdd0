"""Activation recomputation and Megatron's embedding placement in ``kind: training``.

Recomputation (Korthikanti et al. 2022; Megatron-LM ``--recompute-granularity``,
``--recompute-method``, ``--recompute-num-layers``): ``full`` repeats a recomputed layer's
forward, its two TP all-reduces included, before that layer's backward; ``selective`` adds
only the attention core's 4 B s^2 h FLOPs. Embeddings (megatron/core/models/gpt): word and
position embedding on the first stage, final layer norm and output layer on the last; with
tied embeddings the last stage holds a copy of the word embedding, in its DP gradients, and
the embedding group all-reduces the two copies' gradients.

Model used throughout, one TP rank of t = 2 (h = 256, s = 128, V = 1000 padded to 1024):
  layer = (12h^2 + 7h) / t + 6h = 393216 + 896 + 1536            = 395648
  word embedding V h / t = 1024 x 256 / 2                        = 131072
  position embedding s h                                         = 32768
  final layer norm 2h                                            = 512
"""

from pathlib import Path

import pytest

from models.errors import SpecError
from models.schedule import Collective, Compute
from workloads.spec import load_schedule
from workloads.training import (
    Accelerator,
    Parallelism,
    Recompute,
    TransformerModel,
    training_schedule,
)

M = TransformerModel(num_layers=4, hidden_size=256, num_attention_heads=8, seq_length=128,
                     vocab_size=1000)
LAYER, WORD, POS, NORM = 395648, 131072, 32768, 512
COMM = 2 * 128 * 1 * 256  # one TP all-reduce of a layer: bf16 x s x b x h


def _labels(s, kind, stage_rank):
    """Labels of the collectives on groups of ``kind`` that ``stage_rank`` takes part in."""
    return [op.label for op in s.ops if isinstance(op, Collective)
            and s.groups[op.group].kind == kind and stage_rank in s.groups[op.group].ranks]


def _layer_ars(s, rank):
    return [lab for lab in _labels(s, "tp", rank)
            if lab.split(".")[0] in ("forward", "backward", "recompute")
            and ("attention" in lab or "mlp" in lab)]


def test_full_recompute_repeats_each_layers_forward_before_its_backward():
    p = Parallelism(tp=2, dp=1, num_microbatches=1)
    none = _layer_ars(training_schedule(M, p), 0)
    full = _layer_ars(training_schedule(M, p, recompute=Recompute(granularity="full")), 0)
    assert len(none) == 4 * 4 and len(full) == 4 * 6
    backward = full[full.index("recompute.attention3"):]
    # uniform, one layer per chunk: recompute layer i, then its backward, top layer first
    assert backward == [x for i in (3, 2, 1, 0) for x in (
        f"recompute.attention{i}", f"recompute.mlp{i}", f"backward.mlp{i}",
        f"backward.attention{i}")]


def test_uniform_chunks_recompute_a_chunk_then_walk_it_backwards():
    r = Recompute(granularity="full", method="uniform", num_layers=2)
    s = training_schedule(M, Parallelism(tp=2, num_microbatches=1), recompute=r)
    ars = _layer_ars(s, 0)
    backward = ars[ars.index("recompute.attention2"):]
    assert backward == ["recompute.attention2", "recompute.mlp2", "recompute.attention3",
                        "recompute.mlp3", "backward.mlp3", "backward.attention3",
                        "backward.mlp2", "backward.attention2",
                        "recompute.attention0", "recompute.mlp0", "recompute.attention1",
                        "recompute.mlp1", "backward.mlp1", "backward.attention1",
                        "backward.mlp0", "backward.attention0"]


def test_block_recomputes_only_the_first_layers_of_each_stage():
    r = Recompute(granularity="full", method="block", num_layers=1)
    s = training_schedule(M, Parallelism(tp=2, pp=2, num_microbatches=2), recompute=r)
    for rank in (0, 2):  # a rank of stage 0 and of stage 1 (labels count a stage's layers)
        recomputed = {lab for lab in _layer_ars(s, rank) if lab.startswith("recompute")}
        assert recomputed == {"recompute.attention0", "recompute.mlp0"}
        # per stage and micro-batch, block 1 adds 2 all-reduces: 2 x 2 micro-batches
        assert sum(lab.startswith("recompute") for lab in _layer_ars(s, rank)) == 4


def test_selective_adds_attention_core_compute_and_no_communication():
    p = Parallelism(tp=2, num_microbatches=3)
    a = Accelerator(flops_per_s=1e12, efficiency=1.0)
    none = training_schedule(M, p, a)
    sel = training_schedule(M, p, a, recompute=Recompute(granularity="selective"))
    assert [op for op in sel.ops if not isinstance(op, Compute)] == \
        [op for op in none.ops if not isinstance(op, Compute)]
    extra = [op for op in sel.ops if isinstance(op, Compute) and "core_attention" in op.label]
    assert len(extra) == 4 * 3
    # 4 B s^2 h FLOPs (QK^T and attention over V, 2 B s^2 h each), split over t = 2
    assert {op.duration_s for op in extra} == {4 * 1 * 128 ** 2 * 256 / 2 / 1e12}
    order = [op.label for op in sel.ops if isinstance(op, Compute)]
    assert order.index("recompute.core_attention3") + 1 == order.index("backward.attention3")


def test_full_recompute_adds_one_forward_of_the_layers_to_compute():
    p = Parallelism(tp=2, num_microbatches=1)
    a = Accelerator(flops_per_s=1e12, efficiency=1.0)
    none = training_schedule(M, p, a)
    full = training_schedule(M, p, a, recompute=Recompute(granularity="full"))

    def total(s, prefix):
        return sum(op.duration_s for op in s.ops
                   if isinstance(op, Compute) and op.label.startswith(prefix))
    assert total(none, "recompute") == 0
    assert total(full, "recompute") == pytest.approx(total(full, "forward."), rel=1e-12)


def _dp_sizes(s):
    return {(op.label, tuple(s.groups[op.group].ranks)): op.size_bytes for op in s.ops
            if isinstance(op, Collective) and s.groups[op.group].kind in ("dp", "embedding")
            and op.label.startswith("step")}


def test_each_stage_reduces_its_own_parameters_embeddings_on_both_ends():
    s = training_schedule(M, Parallelism(tp=2, pp=2, dp=2, num_microbatches=2))
    sizes = _dp_sizes(s)
    first = 4 * (2 * LAYER + WORD + POS)  # fp32 gradients
    last = 4 * (2 * LAYER + NORM + WORD)  # the tied copy of the word embedding
    assert sizes[("step.finish_grad_sync", (0, 2))] == first
    assert sizes[("step.finish_grad_sync", (4, 6))] == last
    # the embedding group: first and last stage ranks of one (TP, DP) position
    assert sizes[("step.embedding_grads", (0, 4))] == 4 * WORD
    assert {g.ranks for g in s.groups.values() if g.kind == "embedding"} == \
        {(0, 4), (1, 5), (2, 6), (3, 7)}
    assert s.meta["stage_params_per_tp_rank"] == [first // 4, last // 4]


def test_bf16_gradients_halve_the_reductions():
    bf16 = M.model_copy(update={"grad_dtype": "bf16"})
    sizes = _dp_sizes(training_schedule(bf16, Parallelism(tp=2, pp=2, dp=2)))
    assert sizes[("step.finish_grad_sync", (0, 2))] == 2 * (2 * LAYER + WORD + POS)
    assert sizes[("step.embedding_grads", (0, 4))] == 2 * WORD


def test_untied_embeddings_have_no_embedding_group_and_the_same_stage_sizes():
    untied = M.model_copy(update={"untie_embeddings": True})
    s = training_schedule(untied, Parallelism(tp=2, pp=2, dp=2))
    assert not any(g.kind == "embedding" for g in s.groups.values())
    assert _dp_sizes(s)[("step.finish_grad_sync", (4, 6))] == 4 * (2 * LAYER + NORM + WORD)
    # one stage: the untied output weight is a second V h / t, the tied one is not
    one = _dp_sizes(training_schedule(untied, Parallelism(tp=2, dp=2)))
    tied = _dp_sizes(training_schedule(M, Parallelism(tp=2, dp=2)))
    assert one[("step.finish_grad_sync", (0, 2))] - tied[("step.finish_grad_sync", (0, 2))] \
        == 4 * WORD


def test_output_layer_backward_all_reduce_is_on_the_last_stage_only():
    s = training_schedule(M, Parallelism(tp=2, pp=2, num_microbatches=3))
    assert _labels(s, "tp", 0).count("forward.embedding") == 3
    assert "backward.output_layer" not in _labels(s, "tp", 0)
    assert _labels(s, "tp", 2).count("backward.output_layer") == 3
    assert "forward.embedding" not in _labels(s, "tp", 2)


def test_last_stage_reduces_over_dp_before_the_embedding_group():
    s = training_schedule(M, Parallelism(tp=2, pp=2, dp=2))
    mine = [op.label for op in s.ops if isinstance(op, Collective) and 4 in
            s.groups[op.group].ranks and op.label.startswith("step")]
    assert mine.index("step.finish_grad_sync") < mine.index("step.embedding_grads")


_SPEC = """kind: training
model: {num_layers: 4, hidden_size: 256, num_attention_heads: 8, seq_length: 128,
        vocab_size: 1000%s}
parallelism: {tp: 2, pp: 2}
%s
"""


@pytest.mark.parametrize("model_extra,top,key,needle", [
    ("", "recompute: partial", "recompute", "'none', 'selective' or 'full'"),
    ("", "recompute: selective\nrecompute_method: block", "recompute_method",
     "applies to recompute: full"),
    ("", "recompute_num_layers: 1", "recompute_num_layers", "applies to recompute: full"),
    ("", "recompute: full\nrecompute_num_layers: 3", "recompute_num_layers",
     "more than the 2 layers of one pipeline stage"),
    ("", "recompute: full\nrecompute_method: zigzag", "recompute_method", "'uniform' or"),
    (", grad_dtype: bf16, grad_bytes: 4", "", "model.grad_dtype", "give one of them"),
    (", grad_dtype: fp64", "", "model.grad_dtype", "'fp32', 'bf16' or 'fp16'"),
    (", untie_embeddings: maybe", "", "model.untie_embeddings", "boolean"),
])
def test_bad_values_name_file_and_key(tmp_path: Path, model_extra, top, key, needle):
    f = tmp_path / "job.yaml"
    f.write_text(_SPEC % (model_extra, top))
    with pytest.raises(SpecError, match=needle) as exc:
        load_schedule(f)
    assert any(i.file == str(f) and ".".join(map(str, i.key_path)) == key
               for i in exc.value.issues), [i.where() for i in exc.value.issues]


def test_spec_file_keys_reach_the_schedule(tmp_path: Path):
    f = tmp_path / "job.yaml"
    f.write_text(_SPEC % (", grad_dtype: bf16", "recompute: full\nrecompute_method: block\n"
                          "recompute_num_layers: 2"))
    s = load_schedule(f)
    assert s.meta["recompute"] == "full"
    assert sum(lab.startswith("recompute") for lab in _layer_ars(s, 0)) == 2 * 2


def test_inspect_exits_2_naming_file_and_key(tmp_path: Path):
    import os
    import subprocess
    import sys
    f = tmp_path / "job.yaml"
    f.write_text(_SPEC % ("", "recompute: partial"))
    root = Path(__file__).parents[2]
    r = subprocess.run([sys.executable, "-m", "orchestration.cli", "workload", "inspect",
                        str(f)], capture_output=True, text=True, cwd=root, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 2, r.stderr
    assert f"{f}:5: recompute:" in r.stderr and "Traceback" not in r.stderr


def test_inspect_reports_the_gpt3_example_per_stage(tmp_path: Path):
    """The example job: stage 0 reduces its 179,194,880 parameters x 4 B over DP, stage 1
    its 173,957,120 (tied word embedding copy and final layer norm instead of the position
    embedding), and each TP communicator runs 6 layer all-reduces per layer and
    micro-batch (2 forward, 2 recomputed, 2 backward)."""
    import json

    from typer.testing import CliRunner

    from orchestration.cli.app import app
    example = Path(__file__).parents[2] / "workloads/examples/gpt3_2p7b_tp8_pp2_recompute.yaml"
    r = CliRunner().invoke(app, ["workload", "inspect", str(example), "--json"])
    assert r.exit_code == 0, r.output
    rows = {(x["stage"], x["op"], x["group"]): x for x in json.loads(r.output)["stages"]}
    assert rows[("0", "all_reduce", "dp")]["sizes_bytes"] == [4 * 179194880]
    assert 4 * 173957120 in rows[("1", "all_reduce", "dp")]["sizes_bytes"]
    layer = 2 * 2048 * 12 * 2560
    assert rows[("0", "all_reduce", "tp")]["count"] == 4 * (16 * 6 + 1) + 1
    assert layer in rows[("0", "all_reduce", "tp")]["sizes_bytes"]
