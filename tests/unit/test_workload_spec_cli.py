import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from models.errors import SpecError
from orchestration.cli.app import app
from workloads.spec import load_schedule, read_workload_file

ROOT = Path(__file__).parent.parent.parent
DATA = ROOT / "tests" / "data" / "aicb"
CSV = DATA / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1.csv"
EXAMPLE = ROOT / "workloads" / "examples" / "gpt13b_tp8.yaml"
TRAINING = """kind: training
name: small
model: {num_layers: 4, hidden_size: 256, num_attention_heads: 8, seq_length: 128}
parallelism: {tp: 2, world_size: 8}
"""


def _spec(tmp_path, text, name="w.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _inspect(*argv):
    return CliRunner().invoke(app, ["workload", "inspect", *map(str, argv)])


def test_inspect_json_lists_collectives_per_op_and_group():
    r = _inspect(CSV, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["world_size"] == 128 and out["iterations"] == 1
    rows = {(c["op"], c["group"]): c for c in out["collectives"]}
    assert rows[("reduce_scatter", "dp")]["group_size"] == 16
    assert rows[("reduce_scatter", "dp")]["total_bytes"] == 6422958080
    assert rows[("all_reduce", "tp")]["count"] == 167


def test_inspect_scale_and_subset():
    out = json.loads(_inspect(CSV, "--json", "--scale", "1000", "--subset", "dp=4").output)
    assert out["world_size"] == 32 and out["meta"]["scale"] == 1000
    rows = {(c["op"], c["group"]): c for c in out["collectives"]}
    assert rows[("reduce_scatter", "dp")]["total_bytes"] == round(6422958080 / 1000)


def test_inspect_example_training_spec_matches_the_aicb_dp_traffic_shape():
    out = json.loads(_inspect(EXAMPLE, "--json").output)
    rows = {(c["op"], c["group"]): c for c in out["collectives"]}
    assert rows[("reduce_scatter", "dp")]["total_bytes"] == \
        2 * rows[("all_gather", "dp")]["total_bytes"]
    assert out["compute_s_per_iteration"] > 0


def test_training_spec_with_scale(tmp_path):
    s = load_schedule(_spec(tmp_path, TRAINING), scale=2)
    assert s.name == "small" and s.meta["scale"] == 2.0


def test_aicb_spec_relative_file(tmp_path):
    (tmp_path / "g.csv").write_text(CSV.read_text())
    s = load_schedule(_spec(tmp_path, "kind: aicb\nfile: g.csv\noptions: {dp_replicas: 1}\n"))
    assert s.world_size == 8


@pytest.mark.parametrize("text,where,needle", [
    (TRAINING.replace("tp: 2", "tp: -2"), "w.yaml:4: parallelism.tp", "greater than 0"),
    (TRAINING.replace("seq_length: 128", "seq_len: 128"), "w.yaml:3: model.seq_len",
     "unknown key 'seq_len' \\(did you mean 'seq_length'\\?\\)"),
    (TRAINING.replace("kind: training", "kind: trainig"), "w.yaml:1: kind", "training"),
    ("kind: aicb\nfile: x.csv\noptions: {scale: 0.5}\n", "w.yaml:3: options.scale",
     "greater than or equal to 1"),
])
def test_bad_specs_name_file_line_and_key(tmp_path, text, where, needle):
    p = _spec(tmp_path, text)
    with pytest.raises(SpecError, match=needle) as exc:
        read_workload_file(p)
    assert f"{tmp_path}/{where}" in [i.where() for i in exc.value.issues]


def test_tp_not_dividing_heads_names_the_key(tmp_path):
    p = _spec(tmp_path, TRAINING.replace("tp: 2, world_size: 8", "tp: 3, world_size: 9"))
    with pytest.raises(SpecError, match="tp=3 does not divide num_attention_heads=8") as exc:
        load_schedule(p)
    assert exc.value.issues[0].where() == f"{p}:4: parallelism.tp"  # the line of parallelism:


def test_cli_exits_2_with_a_clear_message_and_no_traceback(tmp_path):
    p = _spec(tmp_path, TRAINING.replace("world_size: 8", "dp: 3, world_size: 8"))
    r = subprocess.run([sys.executable, "-m", "orchestration.cli", "workload", "inspect", str(p)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2
    assert "parallelism.world_size" in r.stderr and "Traceback" not in r.stderr


def test_cli_refuses_a_bad_subset():
    r = _inspect(CSV, "--subset", "tp=2")
    assert r.exit_code != 0
    assert isinstance(r.exception, SpecError) and "dp=N" in str(r.exception)


@pytest.mark.parametrize("example", sorted((ROOT / "workloads" / "examples").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_example_spec_builds(example):
    s = load_schedule(example)
    assert s.ops and s.world_size > 1


def test_fedavg_spec_inspect_counts_downloads_and_uploads():
    out = json.loads(_inspect(ROOT / "workloads/examples/fedavg_10_clients.yaml", "--json").output)
    rows = {(c["op"], c["group"]): c for c in out["collectives"]}
    assert rows[("gather", "global")]["count"] == 5  # one deadline-bounded gather per round
    assert rows[("gather", "global")]["group_size"] == 6  # aggregator + 5 selected clients
    # per round 5 clients x (40 MB model down at 32 bit + 10 MB update up, ratio 4)
    assert rows[("gather", "global")]["total_bytes"] == 5 * 5 * (40_000_000 + 10_000_000)


def test_inspect_of_a_missing_file_or_a_directory_names_it_once(tmp_path):
    for path, why in ((tmp_path / "gone.yaml", "no such file"), (tmp_path, "not a regular file")):
        r = _inspect(path)
        text = r.output + str(r.exception)
        assert why in text and text.count(str(path)) == 1, text
