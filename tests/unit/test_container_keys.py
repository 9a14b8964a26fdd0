"""Container keys of hosts with an image (command, environment, binds): precedence, the plan
and its JSON form, and errors naming node and key."""

from __future__ import annotations

import pytest
from topo_helpers import find_issue, issues, load

from models.plan import plan_from_dict, plan_to_dict
from topologies.container_keys import split_bind


def _lab(tmp_path, node_keys: str, group_keys: str = "{}") -> str:
    return f"""\
        name: boxes
        groups:
          workers: {{kind: host, image: "w:1", environment: {{A: "1", B: "2"}}}}
        nodes:
          c1: {{group: workers, {node_keys}}}
          c2: {{kind: host, image: "w:1"}}
          r1: {{kind: router}}
        links:
          - {{endpoints: [c1, r1]}}
          - {{endpoints: [c2, r1]}}
    """


def test_keys_reach_the_plan_with_modes_and_merged_environment(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    plan = load(tmp_path, _lab(tmp_path, f'command: [python3, -c, "pass"], environment: '
                                         f'{{B: 3}}, binds: {{{data}: /data, {tmp_path}: '
                                         f'"/out:rw"}}'))
    c1 = plan.node("c1")
    assert c1.command == ("python3", "-c", "pass")
    assert dict(c1.environment) == {"A": "1", "B": "3"}  # node over group, key by key
    assert dict(c1.binds) == {str(data): "/data:ro", str(tmp_path): "/out:rw"}
    c2 = plan.node("c2")
    assert c2.command is None and not c2.environment and not c2.binds
    assert plan_from_dict(plan_to_dict(plan)) == plan


def test_missing_host_path_is_named_with_node_and_key(tmp_path):
    found = issues(tmp_path, _lab(tmp_path, "binds: {/nonexistent/aitb-x: /x}"))
    find_issue(found, "nodes.c1.binds./nonexistent/aitb-x", "does not exist")


@pytest.mark.parametrize(("keys", "key", "needle"), [
    ("binds: {relative/dir: /x}", "nodes.c1.binds.relative/dir", "must be absolute"),
    ("binds: {/tmp: 'x:ro'}", "nodes.c1.binds./tmp", "container path must be absolute"),
    ("binds: {/tmp: '/x:rx'}", "nodes.c1.binds./tmp", "must be ro or rw"),
    ("command: ['']", "nodes.c1.command", "must not be empty"),
])
def test_bad_container_keys(tmp_path, keys, key, needle):
    find_issue(issues(tmp_path, _lab(tmp_path, keys)), key, needle)


def test_container_keys_need_an_image(tmp_path):
    text = """\
        name: bad
        nodes:
          h1: {kind: host, command: [sleep, "9"]}
          r1: {kind: router, environment: {A: "1"}}
        links:
          - {endpoints: [h1, r1]}
    """
    found = issues(tmp_path, text)
    find_issue(found, "nodes.h1.command", "container hosts only")
    find_issue(found, "nodes.r1.environment", "container hosts only")


def test_a_container_key_set_by_defaults_or_group_is_named_where_it_is_written(tmp_path):
    # defaults.host and a group's keys reach every host: the key at fault is the one written
    # there (and its line), not a key path of each node that the file does not contain
    text = """\
        name: bad
        defaults:
          host: {environment: {A: "1"}}
        groups:
          g: {kind: host, command: [sleep, "9"]}
        nodes:
          h1: {kind: host}
          h2: {group: g}
          r1: {kind: router}
        links:
          - {endpoints: [h1, r1]}
          - {endpoints: [h2, r1]}
    """
    found = issues(tmp_path, text)
    assert find_issue(found, "defaults.host.environment", "not to host h1").line == 3
    assert find_issue(found, "groups.g.command", "not to host h2").line == 5
    assert not [i for i in found if i.key_path[:1] == ("nodes",)], found


def test_empty_command_list_is_refused(tmp_path):
    find_issue(issues(tmp_path, _lab(tmp_path, "command: []")), "nodes.c1.command", "at least")


def test_split_bind():
    assert split_bind("/a") == ("/a", "ro")
    assert split_bind("/a:rw") == ("/a", "rw")
    with pytest.raises(ValueError, match="ro or rw"):
        split_bind("/a:x")


def test_missing_bind_is_refused_when_the_container_starts(tmp_path):
    # a plan read from plan.json on another machine was never checked here
    from models.errors import LabError
    from models.plan import NodePlan
    from testbed.containers.hosts import _volumes

    node = NodePlan("c1", "host", image="x:1", binds={str(tmp_path): "/a:ro",
                                                       "/nonexistent/aitb-y": "/b:rw"})
    with pytest.raises(LabError, match="node c1: binds: host path '/nonexistent/aitb-y'"):
        _volumes(node)
    ok = NodePlan("c1", "host", image="x:1", binds={str(tmp_path): "/a:rw"})
    assert _volumes(ok) == {str(tmp_path): {"bind": "/a", "mode": "rw"}}
