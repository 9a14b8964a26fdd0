"""Counts an experiment asks for are bounded before anything is expanded (models/specfile.py:
MAX_REPEATS, MAX_RANKS, MAX_TOKENS, MAX_CONNS_PER_PEER per key; MAX_FLOWS, MAX_TRANSFERS,
MAX_EVENT_ACTIONS, MAX_REQUESTS for the totals). A typo like ``repeats: 100000000000`` used to
make ``aitb run --check`` allocate until the OOM killer came; now it is one line naming the
file, key, line and bound (exit 2), and a value at its bound is accepted."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from models.errors import SpecError
from models.schedule import Burst, Collective, Flow, Group, Schedule
from models.specfile import (
    MAX_CONNS_PER_PEER,
    MAX_EVENT_ACTIONS,
    MAX_FLOWS,
    MAX_RANKS,
    MAX_REPEATS,
    MAX_REQUESTS,
    MAX_TOKENS,
    MAX_TRANSFERS,
)
from orchestration.run.experiment import load_experiment
from orchestration.run.runner import prepare
from traffic_gen.program import compile_program, transfers_of
from workloads.spec import parse_workload

ROOT = Path(__file__).parent.parent.parent
INCAST = "  - kind: incast\n    receiver: h1\n    size: 1KiB\n"
INFERENCE = ("  - kind: inference\n    clients: [h1]\n    servers: [h2]\n"
             "    arrivals: {process: poisson, rate_per_s: 2, duration: 1s}\n")


def _experiment(tmp_path: Path, workload: str, *, extra: str = "", hosts: int = 4) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"name: bounds\n{extra}"
        "topology:\n  inline:\n    name: x\n"
        f"    generator: {{name: single_switch, params: {{hosts: {hosts}}}}}\n"
        "workloads:\n" + workload)
    return path


def _issue(call, path: Path):
    with pytest.raises(SpecError) as err:
        call(path)
    (issue,) = err.value.issues
    return issue


def _braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


# key text, line of the key in the file, key path, bound
PER_KEY = [
    (INCAST + "    repeats: {}\n", 10, ("workloads", 0, "repeats"), MAX_REPEATS),
    ("  - kind: collective\n    op: all_reduce\n    size: 1KiB\n    ranks: {}\n", 10,
     ("workloads", 0, "ranks"), MAX_RANKS),
    ("  - kind: collective\n    op: all_reduce\n    size: 1KiB\n"
     "    placement: {{slots: {}}}\n", 10, ("workloads", 0, "placement", "slots"), MAX_RANKS),
    (_braces(INFERENCE) + "    session_requests: {}\n", 11, ("workloads", 0, "session_requests"),
     MAX_REPEATS),
    (_braces(INFERENCE) + "    tokens: {}\n", 11, ("workloads", 0, "tokens"), MAX_TOKENS),
    (INCAST + "transport: {{conns_per_peer: {}}}\n", 10, ("transport", "conns_per_peer"),
     MAX_CONNS_PER_PEER),
    (INCAST + "events:\n  - {{at: 1s, kind: flap, link: h2-s1, period: 1s, down: 100ms, "
     "count: {}}}\n", 11, ("events", 0, "count"), MAX_REPEATS),
]


@pytest.mark.parametrize("text, line, key, bound", PER_KEY)
def test_each_count_key_is_refused_above_its_bound_and_accepted_at_it(tmp_path, text, line,
                                                                      key, bound):
    path = _experiment(tmp_path, text.format(bound + 1))
    issue = _issue(load_experiment, path)
    assert (issue.file, issue.key_path, issue.line) == (str(path), key, line)
    assert f"less than or equal to {bound}" in issue.message
    spec, _ = load_experiment(_experiment(tmp_path, text.format(bound)))
    assert spec.workloads


@pytest.mark.parametrize("data, key, words", [
    ({"model": {"num_layers": 10**9}}, ("parallelism",), None),
    ({"parallelism": {"tp": 8, "world_size": 10**9}}, ("parallelism", "world_size"),
     f"less than or equal to {MAX_RANKS}"),
    ({"parallelism": {"tp": 8, "pp": 100, "dp": 1000}}, ("parallelism", "dp"),
     f"at most {MAX_RANKS}"),
    ({"parallelism": {"tp": 8, "world_size": 8, "global_batch_size": 10**9}},
     ("parallelism", "global_batch_size"), "micro-batches per iteration"),
])
def test_training_counts_are_bounded_before_the_schedule_is_built(data, key, words):
    from workloads.spec import build_workload

    model = {"num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40,
             "seq_length": 2048, **data.get("model", {})}
    spec = {"kind": "training", "model": model, "parallelism": data.get("parallelism",
                                                                         {"tp": 8})}
    with pytest.raises(SpecError) as err:
        build_workload(parse_workload(spec, file="w.yaml"), file="w.yaml")
    got = {i.key_path: i.message for i in err.value.issues}
    if words is None:  # num_layers: the per-key bound, at parse time
        assert any("num_layers" in k and "less than or equal to" in m for k, m in got.items())
        return
    assert words in got[key], got


def test_an_fl_spec_of_too_many_uploads_is_refused_at_validation():
    ok = {"kind": "fedavg", "clients": 40, "rounds": MAX_FLOWS // 40, "model_parameters": 10}
    assert parse_workload(ok)
    with pytest.raises(SpecError) as err:
        parse_workload({**ok, "rounds": MAX_FLOWS // 40 + 1})
    assert f"{MAX_FLOWS + 40} uploads; at most {MAX_FLOWS}" in str(err.value)
    gossip = {"kind": "gossip", "clients": 1000, "rounds": 1000, "peers": 2,
              "model_parameters": 10}
    with pytest.raises(SpecError, match="2000000 uploads"):
        parse_workload(gossip)


def test_a_patterns_flow_total_is_refused_before_its_bursts_are_built(tmp_path):
    # all_pairs over 6 hosts: 30 flows a burst, x 10000 repeats
    text = "  - kind: all_pairs\n    size: 1KiB\n    repeats: 10000\n"
    issue = _issue(prepare, _experiment(tmp_path, text, hosts=6))
    assert issue.key_path == ("workloads", 0, "repeats") and issue.line == 9
    assert f"300000 flows; at most {MAX_FLOWS}" in issue.message


def test_the_event_actions_total_is_refused_naming_the_event(tmp_path):
    flap = "  - {at: 1s, kind: flap, link: h2-s1, period: 1s, down: 100ms, count: 10000}\n"
    path = _experiment(tmp_path, INCAST, extra="events:\n" + flap * 6)
    issue = _issue(prepare, path)
    assert issue.key_path == ("events", 0, "count") and issue.line == 3
    assert "expand to 120000 actions" in issue.message
    assert f"at most {MAX_EVENT_ACTIONS}" in issue.message


def test_poisson_requests_are_counted_before_they_are_drawn(tmp_path):
    text = INFERENCE.replace("rate_per_s: 2, duration: 1s", "rate_per_s: 1e9, duration: 1s")
    issue = _issue(prepare, _experiment(tmp_path, text))
    assert issue.key_path == ("workloads", 0, "arrivals")
    assert f"about 1000000000 requests; at most {MAX_REQUESTS}" in issue.message


def test_compiled_transfers_are_counted_from_the_schedule():
    ring = Schedule("r", 4, {"w": Group("w", "world", (0, 1, 2, 3))},
                    (Collective("all_reduce", "w", 4096, "ring"),), iterations=3)
    assert transfers_of(ring) == 3 * 4 * 2 * 3  # 2(n-1) sends per rank, every iteration
    placement = {r: f"h{r}" for r in range(4)}
    prog = compile_program(ring, placement)
    sends = sum(st.kind == "send" for ops in prog.ranks.values() for phase in ops
                for d in phase for st in d.get("steps", ()))
    assert sends == transfers_of(ring)
    burst = Schedule("b", 2, {}, (Burst((Flow(0, 1, 10),) * 3),), iterations=2)
    assert transfers_of(burst) == 6
    huge = Schedule("h", 4, ring.groups, (Collective("all_reduce", "w", 2**30, "ring", 1),))
    with pytest.raises(SpecError, match=f"at most {MAX_TRANSFERS}"):
        compile_program(huge, placement)  # 2**30 one-byte pieces: refused, not listed


def _check_in_child(path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """``aitb run PATH --check`` in a child limited to 2 GB of address space, so the old
    unbounded expansion fails there fast instead of reaching the machine's OOM killer."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(path),
                           "--check", "--results", str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
                          preexec_fn=limit)


def test_check_of_a_huge_repeats_exits_2_with_the_bound(tmp_path):
    path = _experiment(tmp_path, INCAST + "    repeats: 100000000000\n")
    out = _check_in_child(path, tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert f"{path}:10: workloads[0].repeats:" in out.stderr
    assert f"less than or equal to {MAX_REPEATS}" in out.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "state").exists()


def test_calibrate_checks_out_before_measuring(tmp_path, monkeypatch):
    from orchestration.capacity import measure
    from orchestration.cli.commands import capacity

    measured = []
    monkeypatch.setattr(measure, "calibrate", lambda *a, **k: measured.append(a))
    monkeypatch.setattr(capacity, "_state_dir", lambda: tmp_path / "state")
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    for out, words in ((afile / "cal.json", "is not a folder"), (tmp_path, "is a folder")):
        with pytest.raises(SpecError, match=f"--out: .*{words}"):
            capacity.calibrate(out=out, hosts=2, seconds=0.1)
    assert measured == [] and afile.read_text() == "keep me"
    assert not (tmp_path / "state").exists()


def test_the_training_step_total_counts_a_stage_s_layers_not_the_model_s():
    """Each pipeline stage holds num_layers / pp layers: 96 layers over pp 8 with 1500
    micro-batches on 8 ranks is 12 x 1500 x 8 = 144000 steps (it builds in ~10 s), not the
    1152000 counted over every layer."""
    from workloads.training.params import Parallelism, TransformerModel, check_training

    m = TransformerModel(num_layers=96, hidden_size=1024, num_attention_heads=16,
                         seq_length=1024)
    ok = Parallelism(tp=1, pp=8, world_size=8, num_microbatches=1500)
    assert check_training(m, ok) == []
    big = Parallelism(tp=1, pp=8, world_size=8, num_microbatches=10000)  # 12 x 10000 x 8 ok
    assert check_training(m, big) == []
    dense = Parallelism(tp=1, pp=1, world_size=8, num_microbatches=1500)
    (issue,) = check_training(m, dense)
    assert "96 x 1500 x 8 = 1152000 steps" in issue.message


def test_inference_messages_and_extreme_rates_are_refused_before_arrivals(tmp_path):
    from models.specfile import MAX_REQUEST_MESSAGES

    # 1 client x 1000/s x 19 s = 19000 requests (within MAX_REQUESTS) x 6 messages
    text = INFERENCE.replace("rate_per_s: 2, duration: 1s", "rate_per_s: 1000, duration: 19s")
    text += "    tokens: 5\n"
    issue = _issue(prepare, _experiment(tmp_path, text))
    assert issue.key_path == ("workloads", 0, "tokens"), issue
    assert f"114000 messages; at most {MAX_REQUEST_MESSAGES}" in issue.message
    huge = INFERENCE.replace("rate_per_s: 2, duration: 1s",
                             "rate_per_s: 1e300, duration: 1000s")
    issue = _issue(prepare, _experiment(tmp_path, huge))
    assert issue.key_path == ("workloads", 0, "arrivals") and "at most" in issue.message
