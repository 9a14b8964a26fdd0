"""The experiment's ``delay_line_cpu``: a CPU of this machine for the native delay line alone
(testbed.lab.lab.Lab line_cpu), checked before anything exists; errors name file, key and line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from models.errors import SpecError
from orchestration.run.runner import prepare

ROOT = Path(__file__).resolve().parents[2]
BASE = ("name: t\n"
        "topology: {file: %s}\n"
        "workloads:\n  - kind: incast\n    receiver: rx\n    size: 64KiB\n"
        % (ROOT / "topologies/examples/incast.yaml"))


def _prepare(tmp_path: Path, extra: str):
    path = tmp_path / "exp.yaml"
    path.write_text(BASE + extra)
    return prepare(path)


def test_a_usable_cpu_is_taken_and_none_is_the_default(tmp_path):
    assert _prepare(tmp_path, "").spec.delay_line_cpu is None
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        pytest.skip("needs two usable CPUs")
    assert _prepare(tmp_path, f"delay_line_cpu: {usable[-1]}\n").spec.delay_line_cpu == \
        usable[-1]


@pytest.mark.parametrize("value, message", [
    (-1, "greater than or equal to 0"),
    (None, "this process may run on CPUs"),  # one past the last usable CPU
])
def test_a_cpu_this_machine_cannot_give_is_refused_naming_file_key_and_line(tmp_path, value,
                                                                           message):
    value = max(os.sched_getaffinity(0)) + 1 if value is None else value
    with pytest.raises(SpecError) as info:
        _prepare(tmp_path, f"delay_line_cpu: {value}\n")
    text = str(info.value)
    assert "exp.yaml:7: delay_line_cpu" in text, text
    assert message in text
