"""The start margin is configurable (timeouts.start_margin), measured when unset, and only
timed phases wait for it; incast gaps are the bursts' ``after_s``, not a compute op."""

from pathlib import Path

import pytest

from models.errors import SpecError
from models.schedule import Burst, Collective, Compute, Flow, Group, Schedule
from orchestration.run.experiment import parse_experiment
from orchestration.run.runner import prepare_spec
from traffic_gen.program import compile_program
from workloads.patterns import incast


def _prepare(timeouts):
    doc = {"name": "t", "topology": {"generator": "single_switch"},
           "workloads": [{"kind": "incast", "receiver": "h1", "size": "1KiB"}],
           "timeouts": timeouts}
    return prepare_spec(parse_experiment(doc, "exp.yaml"), doc, "exp.yaml", Path("."))


def test_start_margin_key_reaches_the_replay():
    assert _prepare({"start_margin": "10ms"}).options.start_margin_s == pytest.approx(0.01)
    assert _prepare({}).options.start_margin_s is None  # measured by the controller


def test_start_margin_rejects_garbage():
    with pytest.raises(SpecError, match="start_margin"):
        _prepare({"start_margin": "soon"})


def test_incast_gap_is_the_next_bursts_after_s():
    ops = incast([1, 2], 0, 100, repeats=3, gap_s=0.02)
    assert [type(o) for o in ops] == [Burst] * 3
    assert [o.after_s for o in ops] == [0.0, 0.02, 0.02]
    with pytest.raises(ValueError, match="negative"):
        incast([1], 0, 100, repeats=2, gap_s=-1)


def test_only_bursts_and_rounds_are_timed_phases():
    s = Schedule("t", 3, {"g": Group("g", "dp", (0, 1, 2))},
                 (Compute(0.01), Burst((Flow(1, 0, 10),), after_s=0.5),
                  Collective("all_reduce", "g", 30)))
    prog = compile_program(s, {0: "a", 1: "b", 2: "c"})
    assert [(p.timed, p.after_s) for p in prog.phases] == [(False, 0), (True, 0.5),
                                                          (False, 0)]
