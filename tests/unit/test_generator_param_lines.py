"""An impossible topology generator parameter is reported at its own key: file, line and
``generator.params.<key>`` in a topology file, ``topology.params.<key>`` in an experiment's
``topology: {generator: NAME, params: {...}}`` (which used to say ``<generator NAME>`` with
neither file nor line), and a profile named by a parameter once at that parameter (it used
to be reported at every generated link)."""

from __future__ import annotations

import pytest

from models.errors import SpecError
from orchestration.run.runner import prepare
from topologies import GENERATORS, load_topology

# per generator, a parameter it cannot build with, and a word of the message
IMPOSSIBLE = {
    "multi_dc_leaf_spine": ("n_dcs", 0, "greater than or equal to 1"),
    "leaf_spine": ("spines", 0, "greater than or equal to 1"),
    "edge_star": ("sites", -1, "greater than or equal to 1"),
    "single_switch": ("hosts", 0, "greater than or equal to 1"),
    "fat_tree": ("k", 5, "is odd"),
    "rail_optimized": ("rails", 0, "greater than or equal to 1"),
    "torus": ("dims", [0, 4], "every dimension needs 2 to 64 positions"),
    "hypercube": ("d", 0, "greater than or equal to 1"),
    "dragonfly": ("groups", 4, "cannot be joined evenly"),
    "full_mesh": ("n", 1, "greater than or equal to 2"),
    "ring": ("n", 2, "greater than or equal to 3"),
    "random_graph": ("m", 40, "must be below n"),
    "edge_hierarchy": ("near_edges", 0, "greater than or equal to 1"),
}

RING = """\
workloads:
  - kind: collective
    op: all_reduce
    algorithm: ring
    size: 4MiB
"""


def _yaml(value: object) -> str:
    return str(value).replace("'", "")


def test_every_generator_has_an_impossible_parameter_here():
    assert set(IMPOSSIBLE) == set(GENERATORS)


def _issues(call) -> list:
    with pytest.raises(SpecError) as err:
        call()
    return err.value.issues


@pytest.mark.parametrize("name", sorted(IMPOSSIBLE))
def test_an_experiments_generator_parameter_is_named_with_file_and_line(tmp_path, name):
    key, value, word = IMPOSSIBLE[name]
    path = tmp_path / "exp.yaml"
    extra = "      model: barabasi_albert\n" if name == "random_graph" else ""
    path.write_text(f"name: e\ntopology:\n  generator: {name}\n  params:\n{extra}"
                    f"      {key}: {_yaml(value)}\n" + RING)
    issues = _issues(lambda: prepare(path))
    assert [(i.file, i.key_path, i.line) for i in issues] == [
        (str(path), ("topology", "params", key), 5 + bool(extra))]
    assert word in issues[0].message


@pytest.mark.parametrize("name", sorted(IMPOSSIBLE))
def test_a_topology_files_generator_parameter_is_named_with_file_and_line(tmp_path, name):
    key, value, word = IMPOSSIBLE[name]
    path = tmp_path / "topo.yaml"
    extra = "    model: barabasi_albert\n" if name == "random_graph" else ""
    path.write_text(f"name: t\ngenerator:\n  name: {name}\n  params:\n{extra}"
                    f"    {key}: {_yaml(value)}\n")
    issues = _issues(lambda: load_topology(path))
    assert [(i.file, i.key_path, i.line) for i in issues] == [
        (str(path), ("generator", "params", key), 5 + bool(extra))]
    assert word in issues[0].message


def test_an_experiments_unknown_generator_and_parameter_are_named(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: e\ntopology:\n  generator: fat_tree\n  params: {k: 4, kk: 2}\n"
                    + RING)
    issues = _issues(lambda: prepare(path))
    assert [(i.key_path, i.line) for i in issues] == [(("topology", "params", "kk"), 4)]
    assert "did you mean 'k'" in issues[0].message
    path.write_text("name: e\ntopology:\n  generator: fat_trie\n" + RING)
    issues = _issues(lambda: prepare(path))
    assert [(i.file, i.key_path, i.line) for i in issues] == [
        (str(path), ("topology", "generator"), 3)]
    assert "unknown generator 'fat_trie' (did you mean 'fat_tree'?)" in issues[0].message


def test_an_unknown_profile_parameter_is_reported_once_at_its_key(tmp_path):
    topo = tmp_path / "topo.yaml"
    topo.write_text("name: t\ngenerator:\n  name: fat_tree\n  params:\n    k: 4\n"
                    "    fabric: nope\n")
    issues = _issues(lambda: load_topology(topo))
    assert [(i.key_path, i.line) for i in issues] == [(("generator", "params", "fabric"), 6)]
    assert "parameter 'fabric': unknown profile 'nope'" in issues[0].message
    # a profile the file defines is known
    topo.write_text(topo.read_text() + "profiles:\n  nope: {rate: 1Gbit}\n")
    assert load_topology(topo).nodes
    star = tmp_path / "star.yaml"
    star.write_text("name: s\ngenerator:\n  name: edge_star\n  params:\n"
                    "    access: [edge-lte, nope]\n")
    issues = _issues(lambda: load_topology(star))
    assert [(i.key_path, i.line) for i in issues] == [
        (("generator", "params", "access", 1), 5)]
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: e\ntopology:\n  generator: leaf_spine\n"
                   "  params: {spines: 2, leaves: 2, hosts_per_leaf: 1, host_link: nope}\n"
                   + RING)
    issues = _issues(lambda: prepare(exp))
    assert [(i.file, i.key_path, i.line) for i in issues] == [
        (str(exp), ("topology", "params", "host_link"), 4)]


def test_a_valid_generator_still_resolves(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: e\ntopology:\n  generator: fat_tree\n  params: {k: 4}\n" + RING)
    assert len(prepare(path).plan.hosts()) == 16



def test_a_union_parameter_names_the_users_key_not_pydantics_member_labels(tmp_path):
    # edge_star's access is a profile name or a list of them: pydantic labels the members of
    # such a union ("str", "list[nullable[str]]") in its error locations; they are no keys
    path = tmp_path / "t.yaml"
    path.write_text("name: t\ngenerator:\n  name: edge_star\n  params: {access: [a, true]}\n")
    with pytest.raises(SpecError) as err:
        load_topology(path)
    keys = {i.to_dict()["key"] for i in err.value.issues}
    assert keys == {"generator.params.access", "generator.params.access[1]"}, keys
    assert {i.line for i in err.value.issues} == {4}
