"""The keys every workload kind shares (``hosts``, ``placement``, ``stragglers``) are validated
on the imported kinds (training, aicb, chakra, fedavg, hierarchical, gossip) as on the others:
a wrong type is a SpecError naming file, key path and line, never a TypeError, a string split
into characters or a falsy value taken as "not given"."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import refused_run

from models.errors import SpecError
from orchestration.run.kinds.imported import KINDS
from orchestration.run.runner import prepare

BAD = {
    "hosts": ["7", "[1, 2]", "h1", "0", "{a: 1}"],
    "placement": ["0", "false", '""', "[]", "h1"],
    "stragglers": ["7", "[1]", "{fixed: 7}", "{nope: 1}"],
}


def _experiment(tmp_path: Path, kind: str, key: str, value: str) -> Path:
    path = tmp_path / "e.yaml"
    path.write_text(f"""name: t
topology: {{generator: single_switch, params: {{hosts: 4}}}}
workloads:
  - kind: {kind}
    {key}: {value}
""")
    return path


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key,value", [(k, v) for k, vs in BAD.items() for v in vs])
def test_a_wrong_type_is_named_with_file_key_and_line(tmp_path, kind, key, value):
    path = _experiment(tmp_path, kind, key, value)
    with pytest.raises(SpecError) as err:
        prepare(path)
    text = str(err.value)
    assert f"e.yaml:5: workloads[0].{key}" in text, text


def test_the_cli_refuses_it_without_a_traceback_and_creates_nothing(tmp_path):
    stderr = refused_run(_experiment(tmp_path, "fedavg", "hosts", "7"), tmp_path)
    assert "workloads[0].hosts" in stderr and "e.yaml:5" in stderr


def test_an_unknown_key_lists_the_entry_keys_too(tmp_path):
    # "expected one of" lists every key the entry takes: the kind's (kind, file, options) and
    # the entry's (placement, hosts, start, ...), since both are accepted there
    path = _experiment(tmp_path, "aicb", "name", "x")
    with pytest.raises(SpecError) as err:
        prepare(path)
    [issue] = [i for i in err.value.issues if i.key_path[-1] == "name"]
    listed = issue.message.split("expected one of: ")[1].split(", ")
    assert {"kind", "file", "options", "placement", "hosts", "stragglers", "start"} <= set(listed)
    assert issue.line == 5
