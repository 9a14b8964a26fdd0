"""An invalid experiment file does not hide the problems of the files it names: one check
reports the experiment's own errors and those of its topology (file, generator or inline) and
of its valid workload entries (with the files they name) together, each with its file, key and
line; what cannot be checked without a valid experiment is said (orchestration/run/salvage.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import refused_run

from models.errors import SpecError
from orchestration.run.runner import prepare

ROOT = Path(__file__).parent.parent.parent

BAD_TOPOLOGY = """\
name: t1
nodes:
  h1: {kind: host}
  h2: {kind: host}
  s1: {kind: switch, colour: red}
links:
  - {endpoints: [h1, s1], rate: 1Gbit}
  - {endpoints: [h2, s1], rate: 1Gbit}
"""

GOOD_TOPOLOGY = BAD_TOPOLOGY.replace(", colour: red", "")

RING = """\
  - kind: collective
    op: all_reduce
    algorithm: ring
    size: 4MiB
    hosts: [h1, h2]
"""


def _write(tmp_path: Path, experiment: str, topology: str = BAD_TOPOLOGY) -> Path:
    (tmp_path / "topo.yaml").write_text(topology)
    path = tmp_path / "exp.yaml"
    path.write_text(experiment)
    return path


def _issues(path: Path) -> list[tuple[str, str, int | None, str]]:
    with pytest.raises(SpecError) as err:
        prepare(path)
    return [(Path(i.file or "").name, i.where().split(": ")[-1], i.line, i.message)
            for i in err.value.issues]


def test_experiment_and_topology_errors_come_together(tmp_path):
    path = _write(tmp_path, "name: e1\ntopology: {file: topo.yaml}\nbogus_key: 3\n"
                            "workloads:\n" + RING)
    got = _issues(path)
    assert [(f, k, line) for f, k, line, _ in got] == [
        ("exp.yaml", "bogus_key", 3), ("topo.yaml", "nodes.s1.colour", 5)]
    assert "unknown key 'bogus_key'" in got[0][3] and "unknown key 'colour'" in got[1][3]


def test_valid_workload_entries_are_checked_on_the_topology_with_their_index(tmp_path):
    # entry 0 is invalid; entries 1 (its AICB file is missing) and 2 (an unknown host) are
    # valid in the experiment and checked against the topology under their own indices
    path = _write(tmp_path, "name: Bad Name\ntopology: {file: topo.yaml}\nworkloads:\n"
                  + RING.replace("size:", "sise:")
                  + "  - {kind: aicb, file: missing.csv, hosts: [h1, h2]}\n"
                  + RING.replace("[h1, h2]", "[h1, h9]"), GOOD_TOPOLOGY)
    got = {(k, line): m for _, k, line, m in _issues(path)}
    assert "name" in {k for k, _ in got}
    assert ("workloads[0].sise", 7) in got
    assert "file not found" in got[("workloads[1].file", 9)]
    assert "not hosts of lab t1: h9" in got[("workloads[2].hosts", 14)]


def test_inline_topology_errors_come_with_the_experiments(tmp_path):
    path = _write(tmp_path, "name: d\nscale: 0\ntopology:\n  inline:\n    name: x\n"
                  "    nodes: {h1: {kind: host}, h2: {kind: hots}}\n"
                  "    links: [{endpoints: [h1, h2]}]\nworkloads: []\n")
    got = [(f, k, line) for f, k, line, _ in _issues(path)]
    assert got == [("exp.yaml", "scale", 2), ("exp.yaml", "workloads", 8),
                   ("exp.yaml", "topology.inline.nodes.h2.kind", 6)]


def test_an_invalid_topology_key_says_the_topology_was_not_checked(tmp_path):
    path = _write(tmp_path, "name: c\ntopology: {file: topo.yaml, generator: fat_tree}\n"
                  "workloads:\n" + RING)
    got = _issues(path)
    assert [(k, line) for _, k, line, _ in got] == [("topology", 2), ("topology", 2)]
    assert "exactly one of file, generator, inline" in got[0][3]
    assert "topology (and the workloads on it) was not checked" in got[1][3]
    assert not any(f == "topo.yaml" for f, *_ in got)  # its colour: is not reported


def test_events_are_left_out_and_said_so_when_a_workload_is_invalid(tmp_path):
    path = _write(tmp_path, "name: e\ntopology: {file: topo.yaml}\nworkloads:\n"
                  + RING.replace("size:", "sise:")
                  + "events:\n  - {at: 1s, kind: link_down, link: nope}\n", GOOD_TOPOLOGY)
    got = [(k, line, m) for _, k, line, m in _issues(path)]
    assert got[-1][:2] == ("events", 9) and "events were not checked" in got[-1][2]
    assert not any("nope" in m for *_, m in got)


def test_a_valid_experiment_still_reports_only_its_topologys_errors(tmp_path):
    path = _write(tmp_path, "name: e\ntopology: {file: topo.yaml}\nworkloads:\n" + RING)
    assert [(f, k, line) for f, k, line, _ in _issues(path)] == [
        ("topo.yaml", "nodes.s1.colour", 5)]


def test_cli_prints_both_files_errors_exits_2_and_creates_nothing(tmp_path):
    path = _write(tmp_path, "name: e1\ntopology: {file: topo.yaml}\nbogus_key: 3\n"
                            "workloads:\n" + RING)
    stderr = refused_run(path, tmp_path)
    assert f"{path}:3: bogus_key: unknown key" in stderr
    assert f"{tmp_path / 'topo.yaml'}:5: nodes.s1.colour: unknown key" in stderr
