"""Every example file loads and resolves; the committed JSON Schema is current and accepts
every example."""

import json
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML
from topo_helpers import walk_all

import topologies
from topologies.schema_gen import SCHEMA_PATH, schema_text

EXAMPLES = sorted((Path(topologies.__file__).parent / "examples").glob("*.yaml"))


def test_there_are_examples():
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_loads_and_every_host_pair_is_reachable(path):
    plan = topologies.load_topology(path)
    assert plan.hosts() and plan.source == str(path)
    hosts = [h.name for h in plan.hosts()]
    walk_all(plan, [(hosts[0], h) for h in hosts[1:]] + [(h, hosts[0]) for h in hosts[1:]])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_matches_the_json_schema(path):
    schema = json.loads(SCHEMA_PATH.read_text())
    data = json.loads(json.dumps(YAML(typ="safe").load(path.read_text())))
    jsonschema.Draft202012Validator(schema).validate(data)


def test_schema_rejects_what_the_loader_rejects():
    schema = json.loads(SCHEMA_PATH.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    assert not validator.is_valid({"name": "t", "nodes": {"h1": {"kind": "host", "x": 1}}})
    assert not validator.is_valid({"name": "t", "links": [{"endpoints": ["a", "b"],
                                                           "rate": 100}]})


def test_committed_schema_is_current():
    assert SCHEMA_PATH.read_text() == schema_text(), (
        "topologies/schema/topology.schema.json is stale: run `aitb topo schema --write`")


def test_readme_examples_are_valid(tmp_path):
    readme = (Path(topologies.__file__).parent / "README.md").read_text()
    blocks = [b.split("```")[0] for b in readme.split("```yaml\n")[1:]]
    assert len(blocks) == 2
    for i, block in enumerate(blocks):
        path = tmp_path / f"readme{i}.yaml"
        path.write_text(block)
        assert topologies.load_topology(path).hosts()
