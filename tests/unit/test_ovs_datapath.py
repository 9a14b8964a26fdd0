"""Which datapath an OVS switch gets (testbed.ovs.datapath.choose) and the topology key
``ovs_datapath`` (validated, inherited node > group > defaults.switch). Pure: no root."""

from __future__ import annotations

import pytest
from topo_helpers import find_issue, issues, load

from models.errors import LabError
from models.plan import plan_from_dict, plan_to_dict
from testbed.ovs.datapath import choose

TOPO = """
name: t
defaults:
  switch: {{datapath: ovs{default}}}
nodes:
  s1: {{kind: switch{s1}}}
  s2: {{kind: switch{s2}}}
  s3: {{kind: switch, datapath: bridge}}
  h1: {{kind: host}}
  h2: {{kind: host}}
  h3: {{kind: host}}
links:
  - {{endpoints: [h1, s1]}}
  - {{endpoints: [s1, s2]}}
  - {{endpoints: [h2, s2]}}
  - {{endpoints: [h3, s3]}}
  - {{endpoints: [s3, s2]}}
"""


def _plan(tmp_path, default="", s1="", s2=""):
    return load(tmp_path, TOPO.format(default=default, s1=s1, s2=s2))


def test_auto_takes_the_kernel_datapath_exactly_when_the_kernel_has_it(tmp_path):
    plan = _plan(tmp_path)
    assert plan.node("s1").ovs_datapath == "auto"
    assert choose(plan, kernel_has_it=True) == {"s1": "system", "s2": "system"}
    assert choose(plan, kernel_has_it=False) == {"s1": "netdev", "s2": "netdev"}  # no s3


def test_a_forced_datapath_wins_over_auto_and_over_the_default(tmp_path):
    text = TOPO.format(default=", ovs_datapath: system", s1="", s2=", ovs_datapath: netdev")
    plan = load(tmp_path, text.replace("s3: {kind: switch, datapath: bridge}",
                                       "s3: {kind: switch, ovs_datapath: auto}"))
    assert [plan.node(s).ovs_datapath for s in ("s1", "s2", "s3")] == ["system", "netdev",
                                                                       "auto"]
    assert choose(plan, kernel_has_it=True) == {"s1": "system", "s2": "netdev",
                                                "s3": "system"}
    # a bridge switch under such defaults is refused at the key (as flows are)
    found = issues(tmp_path, text)
    find_issue(found, "nodes.s3.ovs_datapath", "needs datapath: ovs")


def test_system_on_a_kernel_without_it_names_the_node_and_the_way_out(tmp_path):
    plan = _plan(tmp_path, s1=", ovs_datapath: system", s2=", ovs_datapath: netdev")
    with pytest.raises(LabError, match=r"node\(s\) s1: ovs_datapath: system .*lacks.*--vm"):
        choose(plan, kernel_has_it=False)


def test_the_key_survives_plan_json_and_old_plans_default_to_auto(tmp_path):
    plan = _plan(tmp_path, s1=", ovs_datapath: netdev")
    assert plan_from_dict(plan_to_dict(plan)) == plan
    old = plan_to_dict(plan)
    for n in old["nodes"]:
        n.pop("ovs_datapath")
    assert plan_from_dict(old).node("s1").ovs_datapath == "auto"


def test_unknown_value_is_a_spec_error_at_its_key(tmp_path):
    found = issues(tmp_path, TOPO.format(default="", s1=", ovs_datapath: kernel", s2=""))
    find_issue(found, "nodes.s1.ovs_datapath", "auto")


def test_ovs_datapath_needs_an_ovs_switch(tmp_path):
    text = TOPO.format(default="", s1="", s2="").replace(
        "s3: {kind: switch, datapath: bridge}",
        "s3: {kind: switch, datapath: bridge, ovs_datapath: system}")
    find_issue(issues(tmp_path, text), "nodes.s3.ovs_datapath", "needs datapath: ovs")
    text = TOPO.format(default="", s1="", s2="").replace(
        "h1: {kind: host}", "h1: {kind: host, ovs_datapath: netdev}")
    find_issue(issues(tmp_path, text), "nodes.h1.ovs_datapath", "applies to switches only")


DELAYED = """
name: d
defaults:
  switch: {{datapath: ovs{dp}}}
nodes:
  s1: {{kind: switch}}
  h1: {{kind: host}}
  h2: {{kind: host}}
links:
  - {{endpoints: [h1, s1]{l1}}}
  - {{endpoints: [h2, s1]}}
"""


def test_a_delay_line_into_a_user_space_switch_is_refused_naming_node_and_link(tmp_path):
    """The user-space datapath reads ports before the kernel's ingress qdisc, so a netem
    direction towards it would be bypassed: refused for netdev, forced or chosen by auto."""
    into = load(tmp_path, DELAYED.format(dp="", l1=", a_to_b: {delay: 5ms}"))
    for plan, kernel in ((into, False),
                         (load(tmp_path, DELAYED.format(dp=", ovs_datapath: netdev",
                                                        l1=", a_to_b: {loss: 1%}")), True)):
        with pytest.raises(LabError, match=r"node s1: link\(s\) h1-s1 need a delay line"):
            choose(plan, kernel_has_it=kernel)
    assert choose(into, kernel_has_it=True) == {"s1": "system"}
    out_of = load(tmp_path, DELAYED.format(dp=", ovs_datapath: netdev",
                                           l1=", b_to_a: {delay: 5ms, rate: 10Mbit}"))
    assert choose(out_of, kernel_has_it=False) == {"s1": "netdev"}  # the IFB is in h1
