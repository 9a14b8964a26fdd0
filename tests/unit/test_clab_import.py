"""containerlab import: the public files in tests/data/clab, precedence, link forms, refusals."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from models.errors import SpecError
from topologies.clab import import_clab

DATA = Path(__file__).parent.parent / "data" / "clab"
FILES = sorted(p for p in DATA.iterdir() if ".clab.y" in p.name)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lab.clab.yml"
    path.write_text(textwrap.dedent(text))
    return path


def _kinds(result) -> dict[str, str]:
    return {n.name: n.kind for n in result.plan.nodes}


def _pairs(result) -> list[tuple[str, str]]:
    return sorted((lk.a.node, lk.b.node) for lk in result.plan.links)


def test_every_public_file_imports_or_names_its_reason():
    assert len(FILES) == 5
    for path in FILES:
        try:
            result = import_clab(path)
        except SpecError as exc:
            for issue in exc.issues:
                assert issue.file == str(path) and issue.key_path and issue.line, str(issue)
            continue
        assert result.plan.links and result.plan.nodes
        for w in result.warnings:
            assert w.file == str(path) and w.key_path, str(w)


def test_clos01_vendor_kinds_become_routers_with_a_warning_naming_them():
    r = import_clab(DATA / "clab_clos01.clab.yml")
    assert _kinds(r) == {"leaf1": "router", "leaf2": "router", "spine": "router",
                         "client1": "host", "client2": "host"}
    assert _pairs(r) == [("client1", "leaf1"), ("client2", "leaf2"), ("leaf1", "spine"),
                         ("leaf2", "spine")]
    kind_warning = [w for w in r.warnings if "nokia_srlinux" in w.message]
    assert len(kind_warning) == 1
    assert all(n in kind_warning[0].message for n in ("leaf1", "leaf2", "spine"))
    # interface names and containerlab's default MTU (9500, DefaultLinkMTU) are kept
    link = r.plan.links[0]
    assert (link.a.ifname, link.b.ifname, link.mtu) == ("e1-1", "e1-1", 9500)
    # kinds: section gives the image (kind level below node level)
    assert r.plan.node("leaf1").labels["clab.image"] == "ghcr.io/nokia/srlinux"
    assert r.plan.node("client1").labels["clab.image"] == "ghcr.io/hellt/network-multitool"


def test_frr01_groups_give_kind_and_image_routing_images_become_routers():
    r = import_clab(DATA / "clab_frr01_groups.clab.yml")
    assert _kinds(r) == {"router1": "router", "router2": "router", "router3": "router",
                         "pc1": "host", "pc2": "host", "pc3": "host"}
    assert r.plan.node("pc1").labels["clab.name"] == "PC1"
    assert r.plan.node("pc1").group == "hosts"
    assert any("'PC1' renamed 'pc1'" in w.message for w in r.warnings)
    assert len(r.plan.links) == 6


def test_telemetry_lab_drops_nodes_without_data_links_by_name():
    r = import_clab(DATA / "srl-telemetry-lab_st.clab.yml")
    assert len(r.plan.nodes) == 8 and len(r.plan.links) == 9
    dropped = [w for w in r.warnings if w.message.startswith("dropped 5 node(s)")]
    assert dropped and all(n in dropped[0].message
                           for n in ("gnmic", "prometheus", "grafana", "alloy", "loki"))
    # defaults.kind nokia_srlinux applies to nodes without a kind
    assert r.plan.node("leaf3").kind == "router"
    assert r.plan.node("leaf3").labels["clab.kind"] == "nokia_srlinux"


def test_external_links_are_refused_with_file_line_and_type():
    path = DATA / "clab_01-linux-nodes_extlinks.clab.yml"
    with pytest.raises(SpecError) as info:
        import_clab(path)
    got = {(i.key_path, i.line) for i in info.value.issues}
    assert got == {(("topology", "links", 3), 70), (("topology", "links", 4), 77)}
    text = str(info.value)
    assert "a host link" in text and "a mgmt-net link" in text and "node 'l2'" in text


def test_external_links_dropped_on_request_dummy_dropped_mtu_kept():
    r = import_clab(DATA / "clab_01-linux-nodes_extlinks.clab.yml", drop_external=True)
    assert _kinds(r) == {"l1": "host", "l2": "host"}
    assert [(lk.a.ifname, lk.b.ifname, lk.mtu) for lk in r.plan.links] == [
        ("eth1", "some1", 2000), ("eth2", "eth2", 9500), ("eth3", "eth3", 9500)]
    messages = " | ".join(w.message for w in r.warnings)
    assert "dummy interface 'somedummy'" in messages and "l3" in messages


def test_groups_through_defaults_without_links_is_refused_naming_nodes():
    with pytest.raises(SpecError) as info:
        import_clab(DATA / "clab_24-basic-groups_defaults.clab.yaml")
    assert "no links between lab nodes" in str(info.value)
    assert "l1, l2, l3" in str(info.value)


PRECEDENCE = """\
    name: prec
    topology:
      defaults: {kind: nokia_srlinux, image: d-img, labels: {a: d, b: d, c: d}}
      kinds:
        linux: {image: k-img, group: g-kind, labels: {b: k}}
        nokia_srlinux: {image: srl-img}
      groups:
        g: {kind: linux, image: g-img, labels: {c: g}}
        g-kind: {labels: {a: gk}}
      nodes:
        n1: {group: g}
        n2: {kind: linux}
        n3: {}
        n4: {kind: linux, image: n-img, group: g, labels: {c: n}}
      links:
        - endpoints: ["n1:eth1", "n3:e1-1"]
        - endpoints: ["n2:eth1", "n3:e1-2"]
        - endpoints: ["n4:eth1", "n3:e1-3"]
"""


def test_precedence_node_group_kind_defaults(tmp_path):
    r = import_clab(_write(tmp_path, PRECEDENCE))
    labels = {n.name: dict(n.labels) for n in r.plan.nodes}
    # n1: kind from its group; image group > kind > defaults; labels merged per key
    assert labels["n1"]["clab.kind"] == "linux" and labels["n1"]["clab.image"] == "g-img"
    assert (labels["n1"]["a"], labels["n1"]["b"], labels["n1"]["c"]) == ("d", "k", "g")
    # n2: group from its kind (kinds.linux.group = g-kind), image from the kind
    assert labels["n2"]["clab.image"] == "k-img" and labels["n2"]["a"] == "gk"
    assert r.plan.node("n2").group == "g-kind"
    # n3: empty body, kind from defaults, image from kinds.nokia_srlinux
    assert labels["n3"]["clab.kind"] == "nokia_srlinux" and labels["n3"]["clab.image"] == "srl-img"
    # n4: the node's own values win
    assert labels["n4"]["clab.image"] == "n-img" and labels["n4"]["c"] == "n"
    assert _kinds(r) == {"n1": "host", "n2": "host", "n3": "router", "n4": "host"}


def test_extended_forms_and_overrides(tmp_path):
    path = _write(tmp_path, """\
        name: Forms_Lab
        topology:
          nodes:
            sw: {kind: bridge}
            h1: {kind: linux, labels: {aitb.kind: router}}
            h2: {kind: linux}
          links:
            - type: veth
              endpoints:
                - {node: h1, interface: ethernet-1/1, mac: "02:00:00:00:00:01"}
                - {node: sw, interface: sw-h1}
            - endpoints: ["h2:eth1", "sw:sw-h2"]
              ipv4: ["10.0.0.1/24", "10.0.0.2/24"]
    """)
    r = import_clab(path, kinds={"h2": "host"})
    assert r.topology["name"] == "forms-lab"
    assert _kinds(r) == {"sw": "switch", "h1": "router", "h2": "host"}
    assert r.plan.links[0].a.ifname == "ethernet-1_1"
    text = " | ".join(w.message for w in r.warnings)
    assert "kind bridge" in text and "'ethernet-1/1'" in text and "link ipv4 (1)" in text


@pytest.mark.parametrize("body,key,needle", [
    ("nodes: {a: {kind: host}, b: {kind: linux}}\n  links: [{endpoints: ['a:e1', 'b:e1']}]",
     ("topology", "nodes", "a", "kind"), "containerlab host itself"),
    ("nodes: {a: {kind: nokia_foo}, b: {kind: linux}}\n  links: [{endpoints: ['a:e1', 'b:e1']}]",
     ("topology", "nodes", "a", "kind"), "unknown containerlab kind 'nokia_foo'"),
    ("nodes: {a: {kind: linux}}\n  links: [{endpoints: ['a:e1', 'zz:e1']}]",
     ("topology", "links", 0, "endpoints", 1), "node 'zz'"),
    ("nodes: {a: {kind: linux}}\n  links: [{endpoints: ['a:e1', 'macvlan:enp0s3']}]",
     ("topology", "links", 0), "macvlan link"),
    ("nodes: {a: {kind: linux}}\n  links: [{type: vxlan, endpoint: {node: a, interface: e1},"
     " remote: 192.0.2.1, vni: 10}]", ("topology", "links", 0), "VXLAN"),
    ("nodes: {a: {kind: linux}, b: {kind: linux}}\n  links: [{type: wormhole, endpoints: []}]",
     ("topology", "links", 0, "type"), "unknown link type 'wormhole'"),
    ("nodes: {a: {}, b: {kind: linux}}\n  links: [{endpoints: ['a:e1', 'b:e1']}]",
     ("topology", "nodes", "a"), "has no kind"),
    ("nodes: {Ab: {kind: linux}, ab: {kind: linux}}\n  links: [{endpoints: ['Ab:e1', 'ab:e1']}]",
     ("topology", "nodes"), "all become 'ab'"),
    ("nodes: {a: {kind: linux, network-mode: host}, b: {kind: linux}}\n"
     "  links: [{endpoints: ['a:e1', 'b:e1']}]",
     ("topology", "nodes", "a", "network-mode"), "another namespace"),
])
def test_refusals_name_key_and_node(tmp_path, body, key, needle):
    path = _write(tmp_path, f"name: bad\ntopology:\n  {body}\n")
    with pytest.raises(SpecError) as info:
        import_clab(path)
    matching = [i for i in info.value.issues if needle in i.message]
    assert matching, str(info.value)
    assert matching[0].key_path == key and matching[0].file == str(path)


def test_not_a_containerlab_file(tmp_path):
    path = _write(tmp_path, "name: x\nnodes: {}\n")
    with pytest.raises(SpecError, match="needs a topology mapping"):
        import_clab(path)


def test_cli_import_writes_a_loadable_topology(tmp_path):
    from orchestration.cli.app import main
    from topologies import load_topology

    out = tmp_path / "clos.yaml"
    with pytest.raises(SystemExit) as info:
        main(["topo", "import", str(DATA / "clab_clos01.clab.yml"), "-o", str(out)])
    assert info.value.code in (0, None)
    plan = load_topology(out)
    assert sorted(n.name for n in plan.nodes) == ["client1", "client2", "leaf1", "leaf2", "spine"]


def test_cli_import_refusal_exits_2(tmp_path, capsys):
    from orchestration.cli.app import main

    with pytest.raises(SystemExit) as info:
        main(["topo", "import", str(DATA / "clab_01-linux-nodes_extlinks.clab.yml")])
    assert info.value.code == 2
    assert "topology.links[3]" in capsys.readouterr().err


def test_aitb_refusals_point_into_the_containerlab_file(tmp_path):
    # two hosts linked directly twice on the same interface: aitb's own check, mapped back to
    # the containerlab link (index 2: the dummy link before it is not in the aitb topology)
    path = _write(tmp_path, """\
        name: twice
        topology:
          nodes:
            a: {kind: linux}
            b: {kind: linux}
          links:
            - endpoints: ["a:eth1", "b:eth1"]
            - type: dummy
              endpoint: {node: a, interface: d0}
            - endpoints: ["a:eth1", "b:eth2"]
    """)
    with pytest.raises(SpecError) as info:
        import_clab(path)
    issue = info.value.issues[0]
    assert issue.key_path[:3] == ("topology", "links", 2) and issue.line == 10, str(issue)
    assert "used by more than one link" in issue.message


def test_two_interface_names_that_become_one_get_an_aitb_name(tmp_path):
    path = _write(tmp_path, """\
        name: clash
        topology:
          nodes:
            a: {kind: linux}
            b: {kind: linux}
          links:
            - endpoints: ["a:Eth1", "b:eth1"]
            - endpoints: ["a:eth1", "b:eth2"]
    """)
    r = import_clab(path)
    assert [(lk.a.ifname, lk.b.ifname) for lk in r.plan.links] == [("eth1", "eth1"),
                                                                    ("eth0", "eth2")]
    assert sum("renamed" in w.message for w in r.warnings) == 2
