"""Labs over machines without root: the cluster section, placement by site or by the cut,
the VXLAN tunnels of cut links (VNI, underlay addresses, MTU refused above underlay - 50) and
the NTP-style clock offset."""

from __future__ import annotations

from pathlib import Path

import pytest

import topologies
from models.errors import SpecError
from orchestration.cluster.control import offset_from
from orchestration.cluster.spec import parse_cluster
from orchestration.cluster.tunnels import place, tunnels, vxlan_argvs

EXAMPLES = Path(topologies.__file__).parent / "examples"


def two(site: bool = True, mtu: int = 9000):
    return parse_cluster({"underlay_mtu": mtu, "machines": [
        {"name": "m1", "ssh": "10.9.0.1", **({"site": "dc1"} if site else {})},
        {"name": "m2", "ssh": "host2.example", "underlay": "10.9.0.2",
         **({"site": "dc2"} if site else {})}]}, "c.yaml")


def test_cluster_errors_name_the_key():
    with pytest.raises(SpecError) as exc:
        parse_cluster({"machines": [{"name": "m1", "ssh": "a.example", "colour": 1}]},
                      "c.yaml")
    text = str(exc.value)
    assert "colour" in text and "c.yaml" in text
    with pytest.raises(SpecError, match="not an IPv4 address; give underlay"):
        parse_cluster({"machines": [{"name": "m1", "ssh": "a.example"}]}, "c.yaml")
    with pytest.raises(SpecError, match="named twice"):
        parse_cluster({"machines": [{"name": "m1", "ssh": "10.0.0.1"},
                                    {"name": "m1", "ssh": "10.0.0.2"}]}, "c.yaml")


def test_probe_interval_and_timeout_are_durations_above_zero():
    one = [{"name": "m1", "ssh": "10.0.0.1"}]
    spec = parse_cluster({"machines": one}, "c.yaml")
    assert (spec.probe_interval_s, spec.probe_timeout_s) == (5.0, 30.0)
    spec = parse_cluster({"machines": one, "probe_interval": "500ms", "probe_timeout": "4s"},
                         "c.yaml")
    assert (spec.probe_interval_s, spec.probe_timeout_s) == (0.5, 4.0)
    for key, value, says in (("probe_timeout", "0s", "longer than 0 s"),
                             ("probe_interval", "3", "no unit"),
                             ("probe_timeout", "-2s", "negative")):
        with pytest.raises(SpecError) as exc:
            parse_cluster({"machines": one, key: value}, "c.yaml")
        assert f"c.yaml: cluster.{key}" in str(exc.value) and says in str(exc.value)


def test_two_dcs_go_to_their_machines_and_the_dci_becomes_a_tunnel():
    plan = topologies.load_topology(EXAMPLES / "two_dc.yaml")
    cluster = two()
    where = place(plan, cluster)
    assert {m for n, m in where.items() if n.startswith("dc1")} == {"m1"}
    assert {m for n, m in where.items() if n.startswith("dc2")} == {"m2"}
    ts = tunnels(plan, where, cluster)
    assert len(ts) == 1
    t = ts[0]
    index = [lk.name for lk in plan.links].index(t.link)
    assert t.vni == 4200 + index and {t.a_machine, t.b_machine} == {"m1", "m2"}
    a = vxlan_argvs(t, "a", cluster, "aitb-x-" + t.a_node)
    local = "10.9.0.1" if t.a_machine == "m1" else "10.9.0.2"
    remote = "10.9.0.2" if local == "10.9.0.1" else "10.9.0.1"
    assert a[0] == ["ip", "link", "add", f"vx{t.vni}", "type", "vxlan", "id", str(t.vni),
                    "local", local, "remote", remote, "dstport", "4789", "nolearning"]
    assert a[1][-2:] == ["name", t.a_ifname] and "aitb-x-" + t.a_node in a[1]


def test_a_cut_link_too_big_for_the_underlay_is_refused():
    plan = topologies.load_topology(EXAMPLES / "two_dc.yaml")
    cluster = two(mtu=1520)
    with pytest.raises(SpecError, match="MTU 1500 exceeds the underlay MTU 1520 - 50"):
        tunnels(plan, place(plan, cluster), cluster)


def test_without_sites_the_planner_cut_places_nodes():
    plan = topologies.load_topology(EXAMPLES / "incast.yaml")
    where = place(plan, two(site=False))
    assert set(where) == {n.name for n in plan.nodes} and set(where.values()) == {"m1", "m2"}


def test_a_site_without_machine_is_an_error():
    plan = topologies.load_topology(EXAMPLES / "two_dc.yaml")
    one = parse_cluster({"machines": [{"name": "m1", "ssh": "10.0.0.1", "site": "dc1"}]}, "c")
    with pytest.raises(SpecError, match="no machine for the site of dc2"):
        place(plan, one)


def test_offset_takes_the_sample_with_the_smallest_delay():
    # machine 5 ms ahead; the second sample had 1 ms of queueing on the way out
    ns = 1_000_000
    fast = (100 * ns, 105 * ns + ns // 2, 105 * ns + ns // 2, 101 * ns)
    slow = (200 * ns, 206 * ns + ns // 2, 206 * ns + ns // 2, 202 * ns)
    got = offset_from([slow, fast])
    assert got.offset_s == pytest.approx(0.005)
    assert got.delay_s == pytest.approx(0.001)
    assert got.samples == 2
    with pytest.raises(ValueError):
        offset_from([])


def _cli(*args: str, env_dir: Path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "orchestration.cli", *args], cwd=root,
                          capture_output=True, text=True,
                          env={**os.environ, "AITB_STATE_DIR": str(env_dir)})


def test_cluster_cli_refuses_bad_files_before_any_connection(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("cluster:\n  machines:\n    - {name: m1, ssh: a.example, colour: 1}\n")
    out = _cli("cluster", "up", str(EXAMPLES / "two_dc.yaml"), "--cluster", str(bad),
               env_dir=tmp_path)
    assert out.returncode == 2 and "colour" in out.stderr
    nosec = tmp_path / "n.yaml"
    nosec.write_text("machines: []\n")
    out = _cli("cluster", "up", str(EXAMPLES / "two_dc.yaml"), "--cluster", str(nosec),
               env_dir=tmp_path)
    assert out.returncode == 2 and "cluster: section" in out.stderr
    out = _cli("cluster", "down", "abc123", env_dir=tmp_path)
    assert out.returncode == 2 and "no cluster lab abc123" in out.stderr
