"""Experiment entries ``kind: inference`` / ``kind: background`` and ``start: with_previous``:
validated before any lab exists, errors naming the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from models.errors import SpecError
from orchestration.run.concurrent import start_groups
from orchestration.run.runner import prepare

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> dict:
    return YAML(typ="safe").load((ROOT / "examples" / name).read_text())


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "exp.yaml"
    with path.open("w") as f:
        YAML().dump(doc, f)
    return path


def _error(tmp_path: Path, doc: dict) -> str:
    with pytest.raises(SpecError) as info:
        prepare(_write(tmp_path, doc))
    return str(info.value)


def test_examples_prepare_with_their_groups():
    inf = prepare(ROOT / "examples/inference.yaml")
    assert start_groups(inf.spec.workloads) == [[0]]
    assert inf.workloads[0].schedule.meta["bootstraps"] >= 1
    bg = prepare(ROOT / "examples/background.yaml")
    assert start_groups(bg.spec.workloads) == [[0, 1]]  # all-reduce alongside the background


@pytest.mark.parametrize(("change", "key", "words"), [
    ({"policy": "random"}, "workloads[0].policy", "nearest"),
    ({"servers": ["s1", "nope"]}, "workloads[0].servers", "not hosts"),
    ({"holders": []}, "workloads[0]", "bootstrap needs holders"),
    ({"holders": ["k1", "s2"]}, "workloads[0].holders", "also servers"),
    ({"bootstrap": {"size": "1MiB", "layers": [0.5, 0.2]}}, "workloads[0].bootstrap",
     "sum to 1"),
    ({"prompt": 100}, "workloads[0].prompt", "unit"),
    ({"arrivals": {"process": "poisson", "rate_per_s": 2}}, "workloads[0].arrivals",
     "rate_per_s and duration"),
    ({"arrivals": {"process": "trace", "requests": [{"at": "1s", "client": "s1"}]}},
     "workloads[0].arrivals.requests[0].client", "not among clients"),
])
def test_bad_inference_entries_name_the_key(tmp_path, change, key, words):
    doc = _load("inference.yaml")
    doc["workloads"][0].update(change)
    msg = _error(tmp_path, doc)
    assert key in msg and words in msg


@pytest.mark.parametrize(("change", "key", "words"), [
    ({"load": 1.5}, "workloads[0].load", "less than or equal to 1"),
    ({"link": "nope"}, "workloads[0].link", "no link 'nope'"),
    ({"link": "h1-s1"}, "workloads[0].link", "does not cross link h1-s1"),
    ({"distribution": "hadoop"}, "workloads[0].distribution", "websearch"),
    ({"receivers": ["rx", "b1"]}, "workloads[0].link", "does not cross"),
])
def test_bad_background_entries_name_the_key(tmp_path, change, key, words):
    doc = _load("background.yaml")
    doc["workloads"][0].update(change)
    msg = _error(tmp_path, doc)
    assert key in msg and words in msg


def test_with_previous_needs_a_previous_workload(tmp_path):
    doc = _load("background.yaml")
    doc["workloads"][0]["start"] = "with_previous"
    assert "workloads[0].start" in _error(tmp_path, doc)


def test_start_groups_chain_with_previous_entries(tmp_path):
    doc = _load("background.yaml")
    third = dict(doc["workloads"][1], start="after_previous")
    fourth = dict(doc["workloads"][1], start="with_previous")
    doc["workloads"] += [third, fourth]
    assert start_groups(prepare(_write(tmp_path, doc)).spec.workloads) == [[0, 1], [2, 3]]
