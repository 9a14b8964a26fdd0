"""``true``/``false`` is refused wherever a spec file wants a number, as a class:
the numeric fields are found by walking the models of the topology, workload, experiment,
campaign and cluster files (a new field or model is covered without a word here), and every
numeric value of the example files is replaced by ``true`` in turn and loaded as a user would.
"""

from __future__ import annotations

import io
import types
import typing
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML

from models.errors import SpecError
from models.specfile import issues_from_validation, line_of
from models.unit_fields import BOOLEAN_NUMBER, SpecModel, takes
from orchestration.campaign.spec import CampaignSpec
from orchestration.cluster.spec import ClusterSpec
from orchestration.run.experiment import ExperimentSpec
from topologies.spec import TopologySpec
from workloads.spec import AnySpec

ROOT = Path(__file__).resolve().parents[2]
ROOTS = (TopologySpec, ExperimentSpec, CampaignSpec, ClusterSpec, *typing.get_args(AnySpec))


def _models_in(tp: Any) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for a in typing.get_args(tp) for m in _models_in(a)]


def _all_models() -> list[type[BaseModel]]:
    seen: dict[type[BaseModel], None] = {}
    todo = list(ROOTS)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen[m] = None
        todo += [n for f in m.model_fields.values() for n in _models_in(f.annotation)]
    return list(seen)


def _bad(tp: Any) -> tuple[Any, tuple] | None:
    """A value of type ``tp``'s shape with ``true`` where it wants a number, and the key path
    of that ``true`` below the field; None if ``tp`` holds no number."""
    if takes(tp) == {"number"}:
        return True, ()
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        return _bad(args[0])
    if origin in (typing.Union, types.UnionType):
        return next((b for a in args if (b := _bad(a)) is not None), None)
    if origin in (list, tuple, set, frozenset, typing.Sequence) and args:
        inner = _bad(args[0])
        return None if inner is None else ([inner[0]], (0, *inner[1]))
    if origin in (dict, typing.Mapping) and len(args) == 2:
        inner = _bad(args[1])
        return None if inner is None else ({"k": inner[0]}, ("k", *inner[1]))
    return None


CASES = [(m, name, f) for m in _all_models() for name, f in m.model_fields.items()
         if _bad(f.annotation) is not None]


def test_the_walk_finds_the_numeric_fields_and_every_model_is_a_spec_model():
    assert len(CASES) > 100  # 123 when written
    names = {f"{m.__name__}.{n}" for m, n, _ in CASES}
    assert {"FedAvgWorkload.deadline_s", "Parallelism.ep", "CaptureSpecModel.snaplen",
            "LinkSpec.mtu", "CollectiveEntry.iterations", "TransportSpec.conns_per_peer",
            "StragglerSpecModel.fixed", "CampaignSpec.repetitions"} <= names
    assert [m for m in _all_models() if not issubclass(m, SpecModel)] == []


@pytest.mark.parametrize("model, name, field", CASES,
                         ids=[f"{m.__name__}.{n}" for m, n, _ in CASES])
def test_every_numeric_field_refuses_true(model, name, field):
    key = field.alias or name
    value, below = _bad(field.annotation)
    with pytest.raises(ValidationError) as info:
        model.model_validate({key: value})
    errors = [e for e in info.value.errors() if e["type"] == BOOLEAN_NUMBER]
    assert errors, info.value.errors()
    (issue,) = issues_from_validation(info.value, model, "f.yaml", ("top",))[:1]
    assert issue.key_path == ("top", key, *below)
    assert "expected a number, got true" in issue.message


def _numeric_leaves(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _numeric_leaves(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _numeric_leaves(v, (*path, i))]
    return [path] if isinstance(node, int | float) and not isinstance(node, bool) else []


EXAMPLES = sorted((ROOT / "topologies" / "examples").glob("*.yaml")) + \
    sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in EXAMPLES])
def test_true_for_any_number_of_an_example_names_file_key_and_line(example, tmp_path):
    """Each number written in an example file, replaced by ``true`` in turn and loaded as
    ``aitb topo validate`` / ``aitb run --check`` do: refused, naming the file, that key and
    its line."""
    from orchestration.run.experiment import load_experiment
    from orchestration.run.runner import prepare_spec
    from topologies import load_topology

    yaml = YAML()
    text = example.read_text()
    original = yaml.load(text)
    leaves = _numeric_leaves(original)
    mutant = tmp_path / example.name
    for path in leaves:
        doc = yaml.load(text)
        node = doc
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = True
        buf = io.StringIO()
        yaml.dump(doc, buf)
        mutant.write_text(buf.getvalue())
        with pytest.raises(SpecError) as info:
            if example.parent.parent.name != "topologies":
                spec, parsed = load_experiment(mutant)
                prepare_spec(spec, parsed, str(mutant), example.parent)
            else:
                load_topology(mutant)
        want = (str(mutant), path, line_of(yaml.load(buf.getvalue()), path))
        got = [(i.file, tuple(i.key_path), i.line) for i in info.value.issues]
        assert want in got, (want, got)
        assert "got true" in str(info.value).lower(), str(info.value)
