"""``traffic_engine: shared``: what the shared engine cannot replay (FL gathers, UDP, TLS,
events on a node's agents) is refused before any lab exists, naming the file and the key;
what it replays passes and reaches the replay options."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from models.errors import SpecError
from orchestration.run.runner import prepare

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, source: Path, **changes) -> Path:
    yaml = YAML()
    doc = yaml.load(source.read_text())
    doc.update(changes)
    out = tmp_path / "exp.yaml"
    with out.open("w") as fh:
        yaml.dump(doc, fh)
    return out


def test_ring_all_reduce_on_the_shared_engine_is_accepted(tmp_path):
    path = _write(tmp_path, ROOT / "examples" / "ring_allreduce_quick.yaml",
                  traffic_engine="shared")
    assert prepare(path).options.traffic_engine == "shared"
    default = prepare(ROOT / "examples" / "ring_allreduce_quick.yaml")
    assert default.options.traffic_engine == "per_host"


def test_fl_gathers_on_the_shared_engine_are_refused_naming_the_workload(tmp_path):
    path = _write(tmp_path, ROOT / "orchestration" / "run" / "quickstart.yaml",
                  traffic_engine="shared")
    with pytest.raises(SpecError) as got:
        prepare(path)
    (issue,) = [i for i in got.value.issues if "gathers" in i.message]
    assert issue.file == str(path) and list(issue.key_path)[0] == "workloads"
    assert "traffic_engine: per_host" in issue.message


def test_tls_on_the_shared_engine_is_refused(tmp_path):
    path = _write(tmp_path, ROOT / "examples" / "ring_allreduce_quick.yaml",
                  traffic_engine="shared", transport={"encryption": "tls"})
    with pytest.raises(SpecError) as got:
        prepare(path)
    assert any(list(i.key_path) == ["transport", "encryption"] and "TLS" in i.message
               for i in got.value.issues)


def test_an_unknown_engine_is_refused_at_its_key(tmp_path):
    path = _write(tmp_path, ROOT / "examples" / "ring_allreduce_quick.yaml",
                  traffic_engine="threads")
    with pytest.raises(SpecError) as got:
        prepare(path)
    assert any(list(i.key_path) == ["traffic_engine"] for i in got.value.issues)


def test_an_event_on_a_nodes_agents_is_refused_with_the_shared_engine(tmp_path):
    path = _write(tmp_path, ROOT / "examples" / "ring_allreduce_quick.yaml",
                  traffic_engine="shared",
                  events=[{"at": "1s", "kind": "node_down", "node": "h3", "agent": "freeze"}])
    with pytest.raises(SpecError) as got:
        prepare(path)
    (issue,) = [i for i in got.value.issues if "freeze" in i.message]
    assert list(issue.key_path) == ["events", 0] and "per_host" in issue.message
    # the same event without the agents is fine
    path = _write(tmp_path, ROOT / "examples" / "ring_allreduce_quick.yaml",
                  traffic_engine="shared",
                  events=[{"at": "1s", "kind": "node_down", "node": "h3"}])
    assert prepare(path).options.traffic_engine == "shared"
