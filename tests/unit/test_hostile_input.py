"""Hostile input files: every one is refused with file, key and line (models.specfile), none
raises anything but SpecError, blocks, or expands before its limits are checked.

Cases that hung before (a FIFO, an alias bomb) run the CLI in a child with a time bound, so
that a hang is a failure, not a stuck test run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from models.errors import SpecError
from topologies import load_topology

ROOT = Path(__file__).parent.parent.parent
TOPO = (ROOT / "topologies" / "examples" / "single_switch.yaml").read_text()
BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
BOMB = "l0: &l0 [lol]\n" + BOMB


def _validate(path: Path) -> tuple[int, dict, str]:
    """``aitb topo validate PATH --json`` in a child; a hang exceeds the bound (a failure)."""
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "topo", "validate",
                          str(path), "--json"], capture_output=True, text=True, timeout=120,
                         cwd=path.parent, stdin=subprocess.DEVNULL)
    return out.returncode, json.loads(out.stdout) if out.stdout.strip() else {}, out.stderr


@pytest.mark.parametrize("text, line, needle", [
    ("name: x\nnodes: " + "[" * 5000 + "]" * 5000 + "\n", 2, "nested more than 64"),
    ("name: x\nnodes:\n" + "".join("  " * i + "- \n" for i in range(500)), 66,
     "nested more than 64"),
    ("name: x\nnodes: &a [*a]\n", 2, "recursive alias *a"),
    ("name: x\n? [a, b]\n: 1\n", 2, "a key must be a plain value"),
    (BOMB, 7, "expands to more than"),
    ("name: x\nx: 1" + "1" * 5000 + "\n", None, "cannot read a value"),
])
def test_structural_bombs_are_refused_with_a_line(tmp_path, text, line, needle):
    p = tmp_path / "t.yaml"
    p.write_text(text)
    with pytest.raises(SpecError) as info:
        load_topology(p)
    issue = info.value.issues[0]
    assert needle in issue.message and issue.file == str(p)
    if line is not None:
        assert issue.line is not None and abs(issue.line - line) <= 1, issue


def test_alias_bomb_and_fifo_do_not_hang(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    code, out, _ = _validate(bomb)
    assert code == 2 and "expands to more than" in out["errors"][0]["message"]
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    code, out, _ = _validate(fifo)
    assert code == 2 and "is a FIFO" in out["errors"][0]["message"]


def test_a_bomb_at_a_name_prints_a_short_message(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text(BOMB.replace("l9:", "name:") + TOPO.split("\n", 1)[1].replace("name:", "x:"))
    code, out, err = _validate(p)
    assert code == 2 and len(json.dumps(out)) + len(err) < 20_000


def test_plan_json_nested_deep_is_refused(tmp_path):
    p = tmp_path / "plan.json"
    p.write_text('{"name": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, out, _ = _validate(p)
    assert code == 2 and "nested more than 64" in out["errors"][0]["message"]


def _experiment(tmp_path: Path, topology: str) -> Path:
    (tmp_path / "topo.yaml").write_text(TOPO)
    p = tmp_path / "exp.yaml"
    p.write_text(f"name: e\ntopology:\n  file: {topology}\nworkloads:\n"
                 "  - {kind: collective, op: all_reduce, size: 1MiB}\n")
    return p


@pytest.mark.parametrize("value, needle", [
    ("missing.yaml", "file not found"),
    ("''", "expected a file name"),
    (".", "is a directory"),
])
def test_topology_file_problems_name_the_experiment_key_and_line(tmp_path, value, needle):
    from orchestration.run.runner import prepare

    p = _experiment(tmp_path, value)
    with pytest.raises(SpecError) as info:
        prepare(p)
    issue = info.value.issues[0]
    assert (issue.file, issue.key_path, issue.line) == (str(p), ("topology", "file"), 3), issue
    assert needle in issue.message


def test_base_file_problem_names_the_campaign_key_and_line(tmp_path):
    from orchestration.campaign.load import load as load_campaign

    p = tmp_path / "c.yaml"
    p.write_text("name: c\nbase:\n  file: nowhere.yaml\ngrid: {seed: [1, 2]}\n")
    with pytest.raises(SpecError) as info:
        load_campaign(p)
    issue = info.value.issues[0]
    assert (issue.file, issue.key_path, issue.line) == (str(p), ("base", "file"), 3), issue
    assert "nowhere.yaml" in issue.message and "file not found" in issue.message


def test_fedavg_overcommit_of_1e308_is_refused_not_overflowed():
    from workloads.spec import build_workload, parse_workload

    data = {"kind": "fedavg", "clients": 4, "model_parameters": 1000, "overcommit": 1e308}
    with pytest.raises(SpecError) as info:
        build_workload(parse_workload(data, file="w.yaml"))
    assert info.value.issues[0].key_path == ("overcommit",)


@pytest.mark.parametrize("key, value", [("deadline_s", True), ("clients", True),
                                        ("rounds", 1e40)])
def test_fedavg_counts_take_numbers_only(key, value):
    from workloads.spec import parse_workload

    data = {"kind": "fedavg", "clients": 4, "model_parameters": 1000, key: value}
    with pytest.raises(SpecError) as info:
        parse_workload(data, file="w.yaml")
    assert info.value.issues[0].key_path == (key,)


def test_generator_number_parameter_refuses_true():
    from topologies import generate

    with pytest.raises(SpecError) as info:
        generate("leaf_spine", leaves=True)
    assert info.value.issues[0].key_path == ("generator", "params", "leaves")


@pytest.mark.parametrize("iterations", ["1e40", "100000", "true"])
def test_iterations_have_an_upper_bound(tmp_path, iterations):
    from orchestration.run.experiment import load_experiment

    p = _experiment(tmp_path, "topo.yaml")
    p.write_text(p.read_text().replace("size: 1MiB}", f"size: 1MiB, iterations: {iterations}}}"))
    with pytest.raises(SpecError) as info:
        load_experiment(p)
    assert info.value.issues[0].key_path == ("workloads", 0, "iterations")


@pytest.mark.parametrize("sweep, needle", [
    ("grid: {" + ", ".join(f"k{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" for i in range(6)) + "}",
     "1000000 points"),
    ("grid: {seed: [1, 2]}\nrepetitions: 1000000000", "repetitions"),
])
def test_campaign_size_is_bounded_before_expansion(tmp_path, sweep, needle):
    from orchestration.campaign.load import load as load_campaign

    _experiment(tmp_path, "topo.yaml")
    p = tmp_path / "c.yaml"
    p.write_text(f"name: c\nbase: {{file: exp.yaml}}\n{sweep}\n")
    with pytest.raises(SpecError) as info:
        load_campaign(p)
    assert needle in str(info.value)


def test_sysctl_inf_is_refused_at_validation(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text(TOPO + "defaults: {host: {sysctls: {net.core.somaxconn: .inf}}}\n")
    with pytest.raises(SpecError) as info:
        load_topology(p)
    assert "finite" in str(info.value)


_MOE_LESS = ("model: {num_layers: 1, hidden_size: 256, num_attention_heads: 4, "
             "seq_length: 256, vocab_size: 4000}\nparallelism: {world_size: 2, ep: 2}\n")


def test_inline_workload_build_error_names_the_full_key_path_and_line(tmp_path):
    """A consistency error found when the workload is built (ep > 1 without experts) names
    workloads[1].model.num_experts and its line in the experiment file, not model.num_experts."""
    from orchestration.run.runner import prepare

    p = _experiment(tmp_path, "topo.yaml")
    entry = "  - kind: training\n" + "".join(f"    {ln}\n" for ln in _MOE_LESS.splitlines())
    p.write_text(p.read_text() + entry)
    with pytest.raises(SpecError) as info:
        prepare(p)
    issue = info.value.issues[0]
    assert (issue.file, issue.key_path, issue.line) == \
        (str(p), ("workloads", 1, "model", "num_experts"), 7), issue
    assert "workloads[1].model.num_experts" in str(info.value)


def test_aicb_workload_file_key_names_the_full_key_path_and_line(tmp_path):
    from orchestration.run.runner import prepare

    p = _experiment(tmp_path, "topo.yaml")
    p.write_text(p.read_text() + "  - kind: aicb\n    file: missing.csv\n")
    with pytest.raises(SpecError) as info:
        prepare(p)
    issue = info.value.issues[0]
    assert (issue.file, issue.key_path, issue.line) == (str(p), ("workloads", 1, "file"), 7)


def test_workload_file_build_error_names_key_and_line(tmp_path):
    from workloads.spec import load_schedule

    p = tmp_path / "w.yaml"
    p.write_text("kind: training\n" + _MOE_LESS)
    with pytest.raises(SpecError) as info:
        load_schedule(p)
    issue = info.value.issues[0]
    assert (issue.file, issue.key_path, issue.line) == (str(p), ("model", "num_experts"), 2)


def test_rich_markup_and_emoji_codes_in_user_text_are_printed_as_typed(tmp_path):
    # a file name and a value with [markup] and :emoji: codes: rich would print "hello❌"
    name = tmp_path / "[bold red]hello:x:.yaml"
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(name)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2
    assert f"{name}: file not found" in out.stderr and "\u274c" not in out.stderr
    exp = tmp_path / "e.yaml"
    exp.write_text('name: t\ntopology: {file: "root:x:0:0 :smile:.yaml"}\n'
                   "workloads: [{kind: incast, receiver: h1, size: 1KiB}]\n")
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(exp), "--check"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2 and "root:x:0:0 :smile:.yaml" in out.stderr
