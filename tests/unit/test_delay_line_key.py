"""The ``delay_line`` key: top-level default, per-link override, carried through plan.json."""

import pytest
from topo_helpers import load

from models.errors import SpecError
from models.plan import LabPlan, PlanError, plan_from_dict, plan_to_dict

BASE = """
name: t
nodes:
  a: {kind: host}
  b: {kind: host}
  c: {kind: host}
  s: {kind: switch}
"""
LINKS = """links:
  - {endpoints: [a, s], delay: 1ms}
  - {endpoints: [b, s], delay: 1ms, delay_line: netem}
  - {endpoints: [c, s]}
"""


def test_default_is_auto_and_a_link_key_overrides_the_top_level_one(tmp_path):
    plan = load(tmp_path, BASE + LINKS)
    assert [lk.delay_line for lk in plan.links] == ["auto", "netem", "auto"]
    plan = load(tmp_path, BASE + "delay_line: native\n" + LINKS)
    assert [lk.delay_line for lk in plan.links] == ["native", "netem", "native"]


def test_delay_line_survives_plan_json(tmp_path):
    plan = load(tmp_path, BASE + "delay_line: native\n" + LINKS)
    again = plan_from_dict(plan_to_dict(plan))
    assert [lk.delay_line for lk in again.links] == ["native", "netem", "native"]


def test_an_unknown_delay_line_is_refused_naming_the_key(tmp_path):
    with pytest.raises(SpecError, match="delay_line"):
        load(tmp_path, BASE + "delay_line: tcnetem\n" + LINKS)


def test_a_plan_with_an_unknown_delay_line_is_refused_naming_the_link(tmp_path):
    plan = load(tmp_path, BASE + LINKS)
    d = plan_to_dict(plan)
    d["links"][0]["delay_line"] = "bogus"
    with pytest.raises(PlanError, match="link 'a-s': delay_line 'bogus'"):
        plan_from_dict(d)
    assert isinstance(plan, LabPlan)
