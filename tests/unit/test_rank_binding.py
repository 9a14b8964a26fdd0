"""Servers with a rank per NIC (``ranks_per_host``): the key is checked before any lab exists
(file, key and node named), the k-th rank placed on a server is bound to its k-th NIC
(models.paths.rank_addresses), and an experiment refuses more ranks on a server than it has
NICs, naming the workload."""

from __future__ import annotations

from pathlib import Path

import pytest
from topo_helpers import find_issue, issues

from models.errors import SpecError
from models.paths import RankBindingError, host_addresses, rank_addresses
from orchestration.run.runner import prepare
from topologies import generate

ROOT = Path(__file__).resolve().parents[2]
TWO_NICS = """\
    name: t
    nodes:
      s: {kind: host, ranks_per_host: RPH}
      r1: {kind: router}
      r2: {kind: router}
      h: {kind: host}
    links:
      - endpoints: [s, r1]
      - endpoints: [s, r2]
      - endpoints: [h, r1]
      - endpoints: [r1, r2]
    """


def test_ranks_per_host_above_the_nics_is_refused_naming_node_and_key(tmp_path):
    found = issues(tmp_path, TWO_NICS.replace("RPH", "3"))
    issue = find_issue(found, "nodes.s.ranks_per_host", "the node has 2 link(s)")
    assert issue.file.endswith(".yaml")


def test_ranks_per_host_on_a_router_or_a_forwarding_host_is_refused(tmp_path):
    text = TWO_NICS.replace("ranks_per_host: RPH", "forward: true, ranks_per_host: 2")
    find_issue(issues(tmp_path, text), "nodes.s.ranks_per_host", "forwarding host")
    text = TWO_NICS.replace("r1: {kind: router}", "r1: {kind: router, ranks_per_host: 2}")
    find_issue(issues(tmp_path, text.replace("RPH", "2")), "nodes.r1.ranks_per_host",
               "hosts only")


def test_ranks_bind_to_nics_in_rank_order():
    plan = generate("rail_optimized", servers=2, rails=4, spines=1, server_as_host=True)
    assert [h.name for h in plan.hosts()] == ["s1", "s2"]
    assert plan.node("s1").ranks_per_host == 4
    nics = host_addresses(plan, "s2")
    assert len(nics) == 4
    got = rank_addresses(plan, {5: "s2", 0: "s1", 3: "s2", 7: "s2"})
    assert got[3] == nics[0] and got[5] == nics[1] and got[7] == nics[2]
    with pytest.raises(RankBindingError, match="host s1 takes 4 ranks .* 5 are placed"):
        rank_addresses(plan, dict.fromkeys(range(5), "s1"))
    # hosts without the key are left out: their ranks share the host's addresses
    assert rank_addresses(generate("rail_optimized", servers=1, rails=2, spines=1),
                          {0: "s1g1", 1: "s1g1"}) == {}


def _experiment(tmp_path: Path, hosts: str) -> Path:
    text = (ROOT / "examples" / "rail_server_hosts.yaml").read_text()
    path = tmp_path / "exp.yaml"
    path.write_text(text.replace("hosts: [s1, s1, s2, s2]", hosts))
    return path


def test_the_example_places_two_ranks_per_server():
    prep = prepare(ROOT / "examples" / "rail_server_hosts.yaml")
    (w,) = prep.workloads
    assert w.placement == {0: "s1", 1: "s1", 2: "s2", 3: "s2"}
    bound = rank_addresses(prep.plan, w.placement)
    assert bound[1] == host_addresses(prep.plan, "s1")[1]


def test_a_server_listed_more_often_than_its_nics_is_refused_naming_the_workload(tmp_path):
    with pytest.raises(SpecError) as info:
        prepare(_experiment(tmp_path, "hosts: [s1, s1, s1, s2]"))
    (issue,) = info.value.issues
    assert issue.key_path[:2] == ("workloads", 0) and "s1 is listed 3 times" in issue.message
    with pytest.raises(SpecError) as info:  # slots put 3 ranks per host: one more than NICs
        prepare(_experiment(tmp_path, "ranks: 6\n    placement: {slots: 3}"))
    (issue,) = info.value.issues
    assert tuple(issue.key_path) == ("workloads", 0, "placement")
    assert "host s1 takes 2 ranks" in issue.message


GENERATED = """\
name: e
topology:
  inline:
    name: t
    generator: {name: single_switch, params: {hosts: 3}}
    defaults:
      host:
        ranks_per_host: 2
workloads:
  - {kind: collective, op: all_reduce, size: 1MiB}
"""


def test_ranks_per_host_from_defaults_is_reported_at_defaults_not_the_generator(tmp_path):
    # every generated host takes the key from defaults.host: one issue at that key and its
    # line in the experiment, naming the hosts, not one per host against the generator
    path = tmp_path / "exp.yaml"
    path.write_text(GENERATED)
    with pytest.raises(SpecError) as info:
        prepare(path)
    (issue,) = info.value.issues
    assert issue.to_dict()["key"] == "topology.inline.defaults.host.ranks_per_host"
    assert issue.line == 8 and issue.file == str(path)
    assert "nodes h1, h2, h3: ranks_per_host 2 needs as many NICs, and each has 1 link(s)" \
        in issue.message


def test_ranks_per_host_from_a_group_is_reported_at_the_group(tmp_path):
    text = TWO_NICS.replace("ranks_per_host: RPH", "group: servers").replace(
        "    links:", "    groups:\n      servers: {ranks_per_host: 3}\n    links:")
    issue = find_issue(issues(tmp_path, text), "groups.servers.ranks_per_host",
                       "node s: ranks_per_host 3 needs as many NICs, and the node has 2")
    assert issue.line == 8  # the group's line
