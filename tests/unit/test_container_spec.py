"""Container hosts in topology files: only hosts take an image; it reaches the plan, its
JSON form, and the containerlab export."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML
from topo_helpers import issues, load

from models.plan import plan_from_dict, plan_to_dict

LAB = """\
    name: boxes
    defaults:
      host: {image: "img-default:1"}
    groups:
      workers: {kind: host, image: "worker:2"}
    nodes:
      c1: {kind: host}
      c2: {group: workers}
      c3: {kind: host, image: "own:3"}
      r1: {kind: router}
    links:
      - {endpoints: [c1, r1]}
      - {endpoints: [c2, r1]}
      - {endpoints: [c3, r1]}
"""


def test_image_precedence_node_group_defaults(tmp_path):
    plan = load(tmp_path, LAB)
    assert {n.name: n.image for n in plan.nodes} == {
        "c1": "img-default:1", "c2": "worker:2", "c3": "own:3", "r1": None}
    assert plan_from_dict(plan_to_dict(plan)) == plan


@pytest.mark.parametrize("where", ["nodes:\n  r1: {kind: router, image: x}",
                                   "defaults:\n  router: {image: x}\nnodes:\n  r1: {kind: router}"])
def test_image_on_a_router_is_refused(tmp_path, where):
    text = f"name: bad\n{where}\n  h1: {{kind: host}}\nlinks:\n  - {{endpoints: [h1, r1]}}\n"
    found = issues(tmp_path, text)
    assert any("image applies to hosts only" in i.message and i.key_path[-1] == "image"
               for i in found), [str(i) for i in found]


def test_export_carries_the_container_image(tmp_path):
    from orchestration.cli.commands.clab import export_files

    topo, _ = export_files(load(tmp_path, LAB), tmp_path / "out", "default-img", False)
    nodes = YAML(typ="safe").load(topo.read_text())["topology"]["nodes"]
    assert nodes["c3"]["image"] == "own:3" and nodes["r1"]["image"] == "default-img"
