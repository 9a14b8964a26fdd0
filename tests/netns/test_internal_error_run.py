"""A bug inside `aitb run` after bring-up (an exception that is not a user mistake): the lab
is torn down, the manifest says ``failed`` with the error named (before: ``error: null``),
error.json keeps the traceback, and the run's state directory under the state dir is gone
(before: it stayed until `aitb clean`). The exception still propagates: a bug is reported as
one, never turned into a plain failure."""

from __future__ import annotations

import json
import os

import pytest
from conftest import root_links, run_namespaces

import orchestration.run.runner as runner
from models.rundir import new_run_id

pytestmark = pytest.mark.netns

EXPERIMENT = """name: internal-error
topology:
  inline:
    name: ie2
    nodes:
      s1: {kind: switch}
      h1: {kind: host}
      h2: {kind: host}
    links:
      - {endpoints: [h1, s1], rate: 1Gbit}
      - {endpoints: [h2, s1], rate: 1Gbit}
workloads:
  - {kind: collective, op: all_reduce, algorithm: ring, size: 64KiB}
"""


def test_an_internal_error_is_in_the_manifest_and_leaves_no_state(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    state = tmp_path / "state"
    monkeypatch.setenv("AITB_STATE_DIR", str(state))
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    seen_lab: list[bool] = []

    def buggy_replay(prep, lab, *_args, **_kw):
        seen_lab.append(bool(run_namespaces(lab_id)))  # the lab was up when the bug hit
        raise ZeroDivisionError("a bug in the replay")

    monkeypatch.setattr(runner, "_replay_all", buggy_replay)
    prep = runner.prepare(tmp_path / "exp.yaml")
    run_id = new_run_id()
    lab_id = run_id.rsplit("-", 1)[-1]
    before = root_links()
    with pytest.raises(ZeroDivisionError):
        runner.execute(prep, tmp_path / "results", run_id=run_id, analyze=False)
    assert seen_lab == [True]
    run_dir = tmp_path / "results" / "internal-error" / run_id
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["error"] == "internal error: ZeroDivisionError: a bug in the replay"
    error = json.loads((run_dir / "error.json").read_text())
    assert error["type"] == "ZeroDivisionError" and "buggy_replay" in error["traceback"]
    assert run_namespaces(lab_id) == [] and set(root_links()) <= set(before)
    assert not (state / lab_id).exists(), sorted(p.name for p in (state / lab_id).iterdir())


@pytest.mark.parametrize("step", ["write_json_atomic", "write_alto"])
def test_a_signal_between_the_manifest_and_the_lab_ends_the_run_interrupted(tmp_path,
                                                                              monkeypatch,
                                                                              step,
                                                                              own_sigint):
    """SIGINT right after the manifest's first write (its rename done, the write not yet
    returned) or in the steps after it and before the lab (ALTO maps, run log,
    certificates) went past execute's signal handling: `aitb run` exited 130 and left a
    manifest saying ``running``. It must say ``interrupted``, with no lab or state."""
    import signal

    from testbed.lab import signals

    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    state = tmp_path / "state"
    monkeypatch.setenv("AITB_STATE_DIR", str(state))
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    real, calls = getattr(runner, step), []

    def then_signal(*args, **kw):
        real(*args, **kw)
        calls.append(1)
        if len(calls) == 1:  # the first: the manifest's, or the only one
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # its handler runs here
                pass

    monkeypatch.setattr(runner, step, then_signal)
    prep = runner.prepare(tmp_path / "exp.yaml")
    run_id = new_run_id()
    lab_id = run_id.rsplit("-", 1)[-1]
    with signals.raising():  # as `aitb run` calls it
        outcome = runner.execute(prep, tmp_path / "results", run_id=run_id)
    assert not outcome.ok and outcome.exit_code == 130
    run_dir = tmp_path / "results" / "internal-error" / run_id
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "SIGINT" in manifest["error"]
    assert json.loads((run_dir / "error.json").read_text())["type"] == "LabInterrupted"
    assert "lab_timings_s" not in manifest  # the lab never came up
    assert run_namespaces(lab_id) == [] and not (state / lab_id).exists()
