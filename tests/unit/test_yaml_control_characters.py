"""A character YAML does not allow (NUL, other control characters) written raw in a file is
refused with the file, the line and the key written on that line, never ``line: null``."""

from __future__ import annotations

import pytest

from models.errors import SpecError
from orchestration.run.runner import prepare
from topologies import load_topology


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b"])
def test_a_raw_control_character_names_file_line_and_key(tmp_path, char):
    path = tmp_path / "t.yaml"
    path.write_text(f"name: t\ngenerator:\n  name: single_switch\n  params: {{hosts: 2, "
                    f"link: a{char}b}}\n")
    with pytest.raises(SpecError) as err:
        load_topology(path)
    [issue] = err.value.issues
    assert issue.to_dict()["line"] == 4 and issue.file == str(path)
    assert issue.key_path == ("generator", "params", "link")
    assert f"U+{ord(char):04X}" in issue.message


def test_an_experiment_with_a_nul_in_a_block_value(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("name: t\nseed: 1\ndescription: x\x00y\n")
    with pytest.raises(SpecError) as err:
        prepare(path)
    [issue] = err.value.issues
    assert str(issue).startswith(f"{path}:3: description: YAML syntax error: character")


def test_unparseable_beyond_the_character_still_has_the_line(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: [t\n\x00\n")
    with pytest.raises(SpecError) as err:
        load_topology(path)
    assert err.value.issues[0].line == 2


def test_a_control_character_in_a_node_value_is_named_at_its_key(tmp_path):
    # escaped in a double-quoted string, YAML reads it; the node's values reach docker,
    # ovs-ofctl and sysctl as text, so it is refused at its key and line
    path = tmp_path / "t.yaml"
    path.write_text('name: t\ndefaults:\n  host: {sysctls: {net.ipv4.tcp_no_metrics_save: '
                    '"a\\0b"}}\nnodes:\n  h1: {kind: host, image: "a\\x07b"}\n'
                    '  h2: {kind: host}\nlinks:\n  - {endpoints: [h1, h2]}\n')
    with pytest.raises(SpecError) as err:
        load_topology(path)
    got = {(i.to_dict()["key"], i.line) for i in err.value.issues}
    assert got == {("defaults.host.sysctls.net.ipv4.tcp_no_metrics_save", 3),
                   ("nodes.h1.image", 5)}, got
    assert all("control characters" in i.message for i in err.value.issues)


def test_a_nul_in_an_experiments_topology_file_name_is_refused_at_its_key(tmp_path):
    """An escaped NUL ("a\\0b", valid YAML) in a file key reached os.open, whose ValueError
    was a traceback (the schema fuzz found it)."""
    path = tmp_path / "e.yaml"
    path.write_text('name: t\ntopology: {file: "a\\0b.yaml"}\n'
                    'workloads:\n  - {kind: incast, receiver: h1, size: 1MiB}\n')
    with pytest.raises(SpecError) as err:
        prepare(path)
    [issue] = err.value.issues
    assert issue.file == str(path) and issue.line == 2 and "NUL" in issue.message, issue
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]
