"""containerlab export: validates against containerlab's JSON schema, imports back to the same
graph, and the script is valid shell carrying aitb's tc recipe."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import regex
from jsonschema import Draft7Validator, validators
from ruamel.yaml import YAML

from orchestration.cli.commands.clab import export_files, shaping_commands
from topologies import load_topology
from topologies.clab import import_clab
from topologies.clab.export import DEFAULT_IMAGE, clab_plan

DATA = Path(__file__).parent.parent / "data" / "clab"
EXAMPLES = Path(__file__).parent.parent.parent / "topologies" / "examples"


def _pattern(validator, pattern, instance, schema):
    """jsonschema's ``pattern`` with the `regex` module: containerlab's schema uses \\p{N} and
    \\p{L}, which Python's re cannot compile (see tests/data/clab/SOURCE.md)."""
    if validator.is_type(instance, "string") and not regex.search(pattern, instance):
        yield from validator.descend(instance, {"const": f"<matches {pattern}>"})


ClabValidator = validators.extend(Draft7Validator, {"pattern": _pattern})
SCHEMA = ClabValidator(json.loads((DATA / "clab.schema.json").read_text()))


def _plans():
    out = {p.stem: load_topology(p) for p in sorted(EXAMPLES.glob("*.yaml"))}
    for name in ("clab_clos01.clab.yml", "clab_frr01_groups.clab.yml",
                 "srl-telemetry-lab_st.clab.yml", "clab_01-linux-nodes_extlinks.clab.yml"):
        out[name] = import_clab(DATA / name, drop_external=True).plan
    return out


PLANS = _plans()


def _schema_errors(doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in SCHEMA.iter_errors(doc)]


def _graph(plan):
    nodes = {n.name: n.kind for n in plan.nodes}
    links = Counter((frozenset({(lk.a.node, lk.a.ifname), (lk.b.node, lk.b.ifname)}), lk.mtu)
                    for lk in plan.links)
    return nodes, links


def _export(tmp_path, plan, keep_kinds=False):
    topo, script = export_files(plan, tmp_path, DEFAULT_IMAGE, keep_kinds)
    return topo, script


@pytest.mark.parametrize("name", sorted(PLANS))
@pytest.mark.parametrize("keep_kinds", [False, True])
def test_export_validates_and_reimports_to_the_same_graph(tmp_path, name, keep_kinds):
    plan = PLANS[name]
    topo, _ = _export(tmp_path, plan, keep_kinds)
    doc = YAML(typ="safe").load(topo.read_text())
    assert _schema_errors(doc) == []
    back = import_clab(topo).plan
    assert _graph(back) == _graph(clab_plan(plan))
    # the only renaming is ethN -> eth(N+1) on nodes that had eth0; node pairs are unchanged
    pairs = Counter(frozenset((lk.a.node, lk.b.node)) for lk in plan.links)
    assert pairs == Counter(frozenset((lk.a.node, lk.b.node)) for lk in back.links)
    assert all(ep.ifname != "eth0" for lk in back.links for ep in (lk.a, lk.b))


def test_schema_check_can_fail(tmp_path):
    topo, _ = _export(tmp_path, PLANS["incast"])
    doc = YAML(typ="safe").load(topo.read_text())
    doc["topology"]["nodes"]["rx"]["kind"] = "no-such-kind"
    doc["topology"]["links"][0]["mtu"] = 70000
    errors = _schema_errors(doc)
    # oneOf/anyOf report at the enclosing object
    assert [e.split(":")[0] for e in errors] == ["topology/nodes/rx", "topology/links/0"]


def test_keep_kinds_restores_vendor_kind_and_image(tmp_path):
    topo, _ = _export(tmp_path, PLANS["clab_clos01.clab.yml"], keep_kinds=True)
    nodes = YAML(typ="safe").load(topo.read_text())["topology"]["nodes"]
    assert nodes["leaf1"]["kind"] == "nokia_srlinux"
    assert nodes["leaf1"]["image"] == "ghcr.io/nokia/srlinux"
    assert nodes["leaf1"]["labels"]["aitb.kind"] == "router"
    assert nodes["client1"] == {**nodes["client1"], "kind": "linux",
                                "image": "ghcr.io/hellt/network-multitool"}


def test_script_is_valid_shell_and_carries_every_recipe(tmp_path):
    plan = PLANS["incast"]
    _, script = _export(tmp_path, plan)
    subprocess.run(["sh", "-n", str(script)], check=True)
    text = script.read_text()
    cplan = clab_plan(plan)
    for cmd in shaping_commands(cplan):
        assert f"in_node {cmd.node} {' '.join(cmd.argv)}\n" in text
    # the bottleneck s1 -> rx: 1 Gbit/s HTB with a 100-packet buffer, as in the topology
    assert "in_node s1 tc qdisc add dev rx parent 1:1 handle 9: tbf rate 1tbit burst 1514b " \
        "limit 1514b\n" in text
    assert "in_node s1 tc qdisc add dev rx parent 9:1 handle 10: pfifo limit 100\n" in text
    assert "in_node s1 ip link add br0 type bridge stp_state 0\n" in text
    assert script.stat().st_mode & 0o111


def test_script_with_delay_has_ifb_and_netem(tmp_path):
    _, script = _export(tmp_path, PLANS["two_dc"])
    text = script.read_text()
    assert " type ifb\n" in text and " netem limit " in text and "mirred egress redirect" in text


def test_cli_export_unknown_format(tmp_path, capsys):
    from orchestration.cli.app import main

    with pytest.raises(SystemExit) as info:
        main(["topo", "export", str(EXAMPLES / "incast.yaml"), "--format", "gns3",
              "-o", str(tmp_path)])
    assert info.value.code == 2 and "known formats: clab" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_keep_kinds_leaves_network_os_config_to_the_nos_and_host_bridges_as_containers(
        tmp_path):
    from dataclasses import replace

    from topologies.clab.export import vendor_nodes

    plan = PLANS["clab_clos01.clab.yml"]
    assert vendor_nodes(plan, True) == {"leaf1", "leaf2", "spine"}
    assert vendor_nodes(plan, False) == set()
    _, script = _export(tmp_path, plan, keep_kinds=True)
    text = script.read_text()
    assert "in_node leaf1 ip addr" not in text and "in_node client1 ip addr" in text
    # a bridge of the containerlab host stays a Linux container with a bridge inside
    as_bridge = replace(plan, nodes=tuple(
        replace(n, kind="switch", routes=(), labels={**n.labels, "clab.kind": "bridge"})
        if n.name == "spine" else n for n in plan.nodes))
    assert vendor_nodes(as_bridge, True) == {"leaf1", "leaf2"}
    topo, _ = _export(tmp_path / "b", as_bridge, keep_kinds=True)
    spine = YAML(typ="safe").load(topo.read_text())["topology"]["nodes"]["spine"]
    assert spine["kind"] == "linux" and spine["labels"]["aitb.kind"] == "switch"
