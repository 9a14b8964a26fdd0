"""The key test: GPT-13B (TP=8, PP=1, mbs=1, 128 ranks) built from model parameters against
AICB's published files for the same job.

Compared, per (op, group kind): the number of calls per communicator in one training
iteration and the multiset of message sizes. Excluded, and why:
* AICB's ``init`` stage (before the first ``epoch_end``): it runs once at start-up, it is not
  part of an iteration.
* AICB's 0-byte ``step._allreduce_layernorm_grads`` TP all-reduce: AICB sizes it from
  parameters carrying a ``sequence_parallel`` attribute, which no MockedParam has, so it is
  always 0 bytes (no traffic); aitb emits this all-reduce only with sequence parallelism.
* The DP reduce-scatter/all-gather sizes depend on the parameter count of one TP rank. The
  file's count (1,605,739,520 = 3,211,479,040 / 2) cannot be reproduced from any published
  AICB commit (HEAD's MockedMegatron gives 1,747,804,160, the 2024-07-31 one 1,682,268,160);
  aitb's Megatron count (Narayanan et al. eq. 2) gives 1,617,525,760, 0.73 % more. So sizes are
  compared exactly with the model's ``parameters`` set to the file's count, and the derived
  count is checked to within 1 % (the width covers the 0.73 % gap, nothing wider). With a
  vocabulary of 32000 (the word embedding the SimAI file's ``embedding_norm`` all-reduces)
  instead of 50257, aitb's count is the file's exactly
  (tests/unit/test_training_validation.py compares that job).
"""

import csv
from collections import Counter
from pathlib import Path

import pytest

from models.schedule import Collective
from workloads.aicb import AicbOptions, load_aicb
from workloads.training import Parallelism, TransformerModel, training_schedule

DATA = Path(__file__).parent.parent / "data" / "aicb"
CSV = DATA / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1.csv"
TXT = DATA / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"
FILE_PARAMS_PER_TP_RANK = 3211479040 // 2  # the file's all_gather is 2 bytes x params


def _spec_row(name: str) -> dict[str, str]:
    with (DATA / "Workload_spec_v1.1.csv").open() as f:
        rows = list(csv.reader(f, delimiter="\t"))
    header = rows[0]
    row = next(r for r in rows[1:] if r[1] == name)
    return dict(zip(header, row, strict=False))  # "Name" appears twice; the first is the model


def _model(parameters: int | None) -> TransformerModel:
    spec = _spec_row("GPT_13B")
    return TransformerModel(
        name="gpt13b", num_layers=int(spec["Num_of_layers"]),
        hidden_size=int(spec["Hidden_size"]), num_attention_heads=int(spec["Attention_heads"]),
        seq_length=int(spec["Sequence_length"]), ffn_hidden_size=int(spec["FFN_hidden_size"]),
        vocab_size=50257,  # aicb scripts/megatron_gpt.sh default vocab_size
        parameters=None if parameters is None else parameters * 8)


# From the file name: tp8, pp1, mbs1; world 128 from the rank line; distributed optimizer
# (AICB scripts/megatron_gpt.sh passes --use-distributed-optimizer) = zero_stage 1.
LAYOUT = Parallelism(tp=8, pp=1, world_size=128, micro_batch_size=1, zero_stage=1)


def _per_kind(s) -> dict[tuple[str, str], Counter]:
    """(op, group kind) -> Counter of sizes, counting the calls of ONE communicator."""
    first = {}
    for g in s.groups.values():
        first.setdefault(g.kind, g.name)
    out: dict[tuple[str, str], Counter] = {}
    for op in s.ops:
        if isinstance(op, Collective) and op.group == first[s.groups[op.group].kind]:
            out.setdefault((op.op, s.groups[op.group].kind), Counter())[op.size_bytes] += 1
    return out


def _without_zero_layernorm(d):
    d = {k: Counter(v) for k, v in d.items()}
    d[("all_reduce", "tp")][0] -= 1
    d[("all_reduce", "tp")] += Counter()  # drop the zero count
    return d


def test_model_schedule_matches_aicb_csv_exactly_with_the_files_parameter_count():
    aicb = _without_zero_layernorm(_per_kind(load_aicb(CSV)))
    ours = _per_kind(training_schedule(_model(FILE_PARAMS_PER_TP_RANK), LAYOUT))
    assert ours == aicb


def test_derived_parameter_count_is_within_one_percent_of_the_files():
    ours = _per_kind(training_schedule(_model(None), LAYOUT))
    (rs,) = ours[("reduce_scatter", "dp")]
    (ag,) = ours[("all_gather", "dp")]
    assert rs == 2 * ag  # fp32 gradients reduced, bf16 parameters gathered (AICB step())
    assert ag / 2 == pytest.approx(FILE_PARAMS_PER_TP_RANK, rel=0.01)


def test_simai_text_is_consistent_with_the_csv():
    txt = _per_kind(load_aicb(TXT, AicbOptions(world_size=128)))
    csv_ = _per_kind(load_aicb(CSV))
    layer = 20971520  # 2 * seq * mbs * hidden
    # every per-layer TP all-reduce (embedding + 2 per layer, forward and backward)
    assert txt[("all_reduce", "tp")][layer] == csv_[("all_reduce", "tp")][layer] == 162
    assert txt[("all_reduce", "tp")][8192] == csv_[("all_reduce", "tp")][8192] == 3
    # DP: gradient reduce-scatter = 2 x parameter all-gather in both; the parameter counts
    # behind them differ by 1.2 % (different AICB versions wrote the two files)
    (rs_txt,) = txt[("reduce_scatter", "dp")]
    (rs_csv,) = csv_[("reduce_scatter", "dp")]
    assert rs_txt == pytest.approx(rs_csv, rel=0.015)
    (ag_txt,) = txt[("all_gather", "tp")]  # SimAI runs a forward-slot ALLGATHER on TP
    assert rs_txt == 2 * ag_txt
    # what only the SimAI file has: a "layernorm" all-reduce of 2 x params, the tied
    # embedding all-reduce (2 x 32000 x 5120) and four 4-byte optimizer all-reduces on TP
    assert txt[("all_reduce", "tp")][ag_txt] == 1
    assert txt[("all_reduce", "tp")][327680000] == 1
    assert txt[("all_reduce", "tp")][4] == 4
