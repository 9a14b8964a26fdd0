"""Every bad input is reported with file, key path, line and a clear message; all at once."""

import pytest
from topo_helpers import find_issue, issues, write

from models.errors import SpecError
from topologies import load_topology, parse_topology

GOOD_NODES = """
nodes:
  h1: {kind: host}
  h2: {kind: host}
  s1: {kind: switch}
"""


def lab(body: str, nodes: str = GOOD_NODES) -> str:
    return "name: t\n" + nodes + body


@pytest.mark.parametrize("body,key,needle", [
    ("links:\n  - endpoints: [h1, s1]\n    bogus: 1\n", "links[0].bogus", "unknown key 'bogus'"),
    ("links:\n  - endpoints: [h1, s1]\n    rat: 1Gbit\n", "links[0].rat", "did you mean 'rate'"),
    ("links:\n  - endpoints: [h1, ghost]\n", "links[0].endpoints[1]", "'ghost'"),
    ("links:\n  - endpoints: [h1, s1]\n  - endpoints: [h2, s1]\n  - endpoints: [s1, h1]\n",
     "links[2].endpoints", "duplicate link"),
    ("links:\n  - endpoints: [h1, h1]\n  - endpoints: [h2, s1]\n", "links[0].endpoints",
     "to itself"),
    ("links:\n  - endpoints: ['h1:abcdefghijklmnop', s1]\n  - endpoints: [h2, s1]\n",
     "links[0].endpoints[0]", "at most 15"),
    ("links:\n  - endpoints: [h1, s1]\n    rate: 100\n  - endpoints: [h2, s1]\n",
     "links[0].rate", "no unit"),
    ("links:\n  - endpoints: [h1, s1]\n    delay: -5ms\n  - endpoints: [h2, s1]\n",
     "links[0].delay", "negative"),
    ("links:\n  - endpoints: [h1, s1]\n    loss: 101%\n  - endpoints: [h2, s1]\n",
     "links[0].loss", "outside 0% to 100%"),
    ("links:\n  - endpoints: [h1, s1]\n    delay: 1ms\n    jitter: 2ms\n"
     "  - endpoints: [h2, s1]\n", "links[0].jitter", "jitter"),
    ("links:\n  - endpoints: [h1, s1]\n    profile: nope\n  - endpoints: [h2, s1]\n",
     "links[0].profile", "known profiles: campus-uplink"),
    ("links:\n  - endpoints: [h1, s1]\n    rate: 10Gbps\n  - endpoints: [h2, s1]\n",
     "links[0].rate", "BYTES"),
    ("links:\n  - endpoints: [h1, s1]\n    aqm: pie\n  - endpoints: [h2, s1]\n",
     "links[0].aqm", "'fifo', 'head_drop', 'red' or 'fq_codel'"),
    ("links:\n  - endpoints: [h1, s1]\n    mtu: 20\n  - endpoints: [h2, s1]\n",
     "links[0].mtu", "greater than or equal to 68"),
    ("links:\n  - endpoints: [h1, s1]\n", "nodes.h2", "host has no links"),
    ("links:\n  - endpoints: [h1, h2]\n    a_to_b: {ecn: true}\n", "links[0].a_to_b.ecn",
     "ecn"),
])
def test_bad_link(tmp_path, body, key, needle):
    found = issues(tmp_path, lab(body))
    issue = find_issue(found, key, needle)
    assert issue.file.endswith("lab.yaml") and issue.line is not None


@pytest.mark.parametrize("name", ["a/b", "a b", "a:b", "a@b", "A1", "-a", "é"])
def test_node_names_ip_rejects(tmp_path, name):
    text = f"name: t\nnodes:\n  '{name}': {{kind: host}}\n  h2: {{kind: host}}\n" \
           f"links:\n  - endpoints: ['{name}', h2]\n"
    find_issue(issues(tmp_path, text), f"nodes.{name}", "not a valid name")


def test_node_name_too_long(tmp_path):
    name = "n" * 33
    text = f"name: t\nnodes:\n  {name}: {{kind: host}}\n  h2: {{kind: host}}\n" \
           f"links:\n  - endpoints: [{name}, h2]\n"
    find_issue(issues(tmp_path, text), f"nodes.{name}", "at most 32")


def test_unknown_kind_lists_kinds(tmp_path):
    found = issues(tmp_path, "name: t\nnodes:\n  h1: {kind: server}\n")
    issue = find_issue(found, "nodes.h1.kind", "'host', 'switch' or 'router'")
    assert issue.line == 3 and "server" in issue.message


def test_duplicate_node_name_with_line(tmp_path):
    text = "name: t\nnodes:\n  h1: {kind: host}\n  h2: {kind: host}\n  h1: {kind: host}\n" \
           "links:\n  - endpoints: [h1, h2]\n"
    issue = find_issue(issues(tmp_path, text), "nodes.h1", "duplicate node name")
    assert issue.line == 5 and "line 3" in issue.message


def test_unreachable_host_pair_is_named(tmp_path):
    text = "name: t\nnodes:\n  h1: {kind: host}\n  h2: {kind: host}\n  h3: {kind: host}\n" \
           "  h4: {kind: host}\nlinks:\n  - endpoints: [h1, h2]\n  - endpoints: [h3, h4]\n"
    found = issues(tmp_path, text)
    assert any("h1 and h3 cannot reach each other" in i.message for i in found)
    assert not any("h1 and h2" in i.message for i in found)


def test_host_is_never_a_transit_node(tmp_path):
    # h2 has links to h1 and h3 but hosts do not forward: h1 and h3 cannot talk
    text = "name: t\nnodes:\n  h1: {kind: host}\n  h2: {kind: host}\n  h3: {kind: host}\n" \
           "links:\n  - endpoints: [h1, h2]\n  - endpoints: [h2, h3]\n"
    assert any("h1 and h3 cannot reach" in i.message for i in issues(tmp_path, text))


def test_all_issues_of_a_stage_are_collected(tmp_path):
    text = lab("links:\n  - endpoints: [h1, ghost]\n  - endpoints: [h2, h2]\n"
               "  - endpoints: [h1, s1]\n    profile: nope\n")
    found = issues(tmp_path, text)
    assert len(found) >= 3
    lines = {i.to_dict()["key"]: i.line for i in found}
    assert lines["links[0].endpoints[1]"] == 8
    assert lines["links[1].endpoints"] == 9
    assert lines["links[2].profile"] == 11


def test_yaml_syntax_error_has_line(tmp_path):
    found = issues(tmp_path, "name: t\nnodes:\n  h1: {kind: host\n  h2: [\n")
    assert found[0].line is not None and "YAML syntax error" in found[0].message


@pytest.mark.parametrize("text,needle", [("", "empty file"), ("- a\n- b\n", "got a list"),
                                         ("42\n", "got a number")])
def test_not_a_mapping(tmp_path, text, needle):
    assert needle in issues(tmp_path, text)[0].message


def test_missing_file_is_named(tmp_path):
    with pytest.raises(SpecError) as info:
        load_topology(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(info.value) and "not found" in str(info.value)


@pytest.mark.parametrize("node,key,needle", [
    ("{kind: host, stp: true}", "nodes.x.stp", "switches only"),
    ("{kind: switch, ecmp_hash: l4}", "nodes.x.ecmp_hash", "not to a Linux-bridge switch"),
    ("{kind: host, sysctls: {net.ipv4.ip_forward: 1}}", "nodes.x.sysctls.net.ipv4.ip_forward",
     "set forward: true"),
    ("{kind: router, forward: true}", "nodes.x.forward", "hosts only"),
    ("{kind: switch, forward: false}", "nodes.x.forward", "hosts only"),
    ("{kind: host, sysctls: {'../../etc': 1}}", "nodes.x.sysctls.../../etc", "sysctl key"),
    ("{kind: host, group: nogroup}", "nodes.x.group", "unknown group"),
    ("{group: g}", "nodes.x", "no kind"),
])
def test_bad_node_settings(tmp_path, node, key, needle):
    text = f"name: t\ngroups: {{g: {{}}}}\nnodes:\n  x: {node}\n  h: {{kind: host}}\n" \
           "  r: {kind: router}\nlinks:\n  - endpoints: [x, r]\n  - endpoints: [h, r]\n"
    find_issue(issues(tmp_path, text), key, needle)


def test_switch_loop_needs_stp(tmp_path):
    loop = ("name: t\nnodes:\n  s1: {kind: switch}\n  s2: {kind: switch}\n  s3: {kind: switch}\n"
            "  h1: {kind: host}\n  h2: {kind: host}\n"
            "links:\n  - endpoints: [s1, s2]\n  - endpoints: [s2, s3]\n  - endpoints: [s3, s1]\n"
            "  - endpoints: [h1, s1]\n  - endpoints: [h2, s3]\n")
    find_issue(issues(tmp_path, loop), "links[2]", "form a loop")
    with_stp = loop.replace("{kind: switch}", "{kind: switch, stp: true}")
    write(tmp_path, with_stp, "ok.yaml")
    assert len(load_topology(tmp_path / "ok.yaml").hosts()) == 2


def test_mixed_mtu_on_a_bridge(tmp_path):
    found = issues(tmp_path, lab("links:\n  - endpoints: [h1, s1]\n    mtu: 9000\n"
                                 "  - endpoints: [h2, s1]\n"))
    find_issue(found, "links[0]", "different MTUs")


def test_pool_too_small(tmp_path):
    text = lab("addressing: {ipv4_pool: 198.18.0.0/30}\nlinks:\n  - endpoints: [h1, s1]\n"
               "  - endpoints: [h2, s1]\n  - endpoints: [h1, h2]\n")
    find_issue(issues(tmp_path, text), "addressing.ipv4_pool", "needs 6")  # /30 LAN + /31 p2p


def test_gemodel_bad_percent(tmp_path):
    found = issues(tmp_path, lab("links:\n  - endpoints: [h1, s1]\n"
                                 "    loss_gemodel: {p: 120%}\n  - endpoints: [h2, s1]\n"))
    find_issue(found, "links[0].loss_gemodel.p", "outside")


def test_parse_topology_on_a_dict_reports_key_paths():
    with pytest.raises(SpecError) as info:
        parse_topology({"name": "t", "nodes": {"h1": {"kind": "host", "colour": "red"}}},
                       "experiment.yaml")
    issue = info.value.issues[0]
    assert issue.file == "experiment.yaml" and issue.to_dict()["key"] == "nodes.h1.colour"


@pytest.mark.parametrize("pool,key", [("10.0.0.0/8", "addressing.ipv4_pool"),
                                      ("fd00::/48", "addressing.ipv6_pool"),
                                      ("198.18.0.1/24", "addressing.ipv4_pool")])
def test_pool_must_be_a_benchmarking_range(tmp_path, pool, key):
    field = key.split(".")[1]
    found = issues(tmp_path, lab(f"addressing: {{{field}: '{pool}'}}\nlinks:\n"
                                 "  - endpoints: [h1, s1]\n  - endpoints: [h2, s1]\n"))
    assert any(i.to_dict()["key"] == key for i in found), found


def test_wrong_shapes_get_plain_messages(tmp_path):
    text = ("name: t\nnodes:\n  a: {kind: host, sysctls: {net.core.rmem_max: [1]}}\n  b: host\n"
            "links:\n  - endpoints: [a]\n")
    found = issues(tmp_path, text)
    find_issue(found, "nodes.a.sysctls.net.core.rmem_max", "valid string")
    find_issue(found, "nodes.b", "expected a mapping")
    find_issue(found, "links[0].endpoints[1]", "exactly two")
    assert len(found) == 3  # one issue per problem, no per-union-member duplicates


def test_schema_and_structural_issues_are_reported_together(tmp_path):
    text = """name: mixed
nodes:
  h1: {kind: host, colour: red}
  h2: {kind: host}
  r1: {kind: router}
links:
  - endpoints: [h1, r1]
    rate: 100
  - endpoints: [h2, ghost]
  - endpoints: [h2, r1]
    profile: nope
"""
    found = issues(tmp_path, text)
    assert find_issue(found, "nodes.h1.colour", "unknown key").line == 3
    assert find_issue(found, "links[0].rate", "no unit").line == 8
    assert find_issue(found, "links[1].endpoints[1]", "'ghost'").line == 9
    assert find_issue(found, "links[2].profile", "unknown profile").line == 11
    assert not any("has no links" in i.message for i in found)  # h1's link still counts


def test_each_kind_of_file_says_what_it_expected(tmp_path):
    from orchestration.campaign.spec import load_campaign
    from orchestration.run.experiment import load_experiment
    from topologies.clab import import_clab

    path = tmp_path / "empty.yaml"
    path.write_text("")
    for load, what in ((load_experiment, "an experiment"), (load_campaign, "a campaign"),
                       (import_clab, "a containerlab topology")):
        with pytest.raises(SpecError, match=f"expected {what}: a mapping"):
            load(path)


GENERATED_ECN = """\
name: t
generator: {name: single_switch, params: {hosts: 3, link: host}}
defaults:
  link: {DEFAULT}
profiles:
  host:
    rate: 1Gbit
    PROFILE
"""


@pytest.mark.parametrize("profile,default,key,line", [
    ("ecn: true", "{rate: 1Gbit}", "profiles.host.ecn", 8),       # the profile's own key
    ("up: {ecn: true}", "{rate: 1Gbit}", "profiles.host.up.ecn", 8),
    ("buffer: 100p", "{ecn: true}", "defaults.link.ecn", 4),     # below the profile
])
def test_a_shaping_key_refused_on_generated_links_is_reported_where_it_was_set(
        tmp_path, profile, default, key, line):
    # ecn without a marking AQM, set by a profile (or defaults.link) that generated links use:
    # one issue at that key and its line, naming the links it reaches, not one per link
    # against the generator
    text = GENERATED_ECN.replace("PROFILE", profile).replace("{DEFAULT}", default)
    found = issues(tmp_path, text)
    assert len(found) == 1, found
    issue = find_issue(found, key, "ecn needs an AQM that marks")
    assert issue.line == line and issue.file.endswith("lab.yaml")
    assert "h1-s1" in issue.message and "1 more" in issue.message


def test_a_shaping_key_of_the_link_itself_stays_at_the_link(tmp_path):
    # the link's own key wins over its profile's: reported there, not at the profile
    text = lab("profiles:\n  p: {ecn: true, aqm: red}\nlinks:\n"
               "  - endpoints: [h1, s1]\n    profile: p\n    aqm: fifo\n"
               "  - endpoints: [h2, s1]\n")
    found = issues(tmp_path, text)
    find_issue(found, "profiles.p.ecn", "not fifo")
