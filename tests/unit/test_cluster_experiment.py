"""The ``cluster:`` key of experiment files, without root or network: placement by site, by
hand, bad input refused at prepare time naming file, key and machine (nothing created), the
times moved by a machine's clock offset on the agents' control channel."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from models.errors import SpecError
from orchestration.cluster.control import Offset
from orchestration.cluster.lab import shift_times, uncertainty_s
from orchestration.run.runner import prepare

TOPO = """topology:
  inline:
    name: two-dc-small
    generator: {name: multi_dc_leaf_spine, params: {n_dcs: 2, spines: 1, leaves: 1,
                hosts_per_leaf: 2, dci: dci, fabric: fab, host_link: host}}
    profiles:
      dci: {rate: 50Mbit, delay: 2ms, buffer: 200KiB}
      fab: {rate: 100Mbit, buffer: 200p}
      host: {rate: 100Mbit}
"""


def experiment(tmp: Path, cluster: str, workloads: str = "") -> Path:
    key = tmp / "id"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True)
    path = tmp / "exp.yaml"
    path.write_text("name: split\n" + TOPO + "workloads:\n" + (workloads or
                    "  - {kind: collective, op: all_reduce, algorithm: ring, size: 1MiB}\n")
                    + "cluster:\n  underlay_mtu: 1600\n" + cluster.replace("KEY", str(key)))
    return path


MACHINES = """  machines:
    - {name: m1, ssh: 10.77.0.1, key: KEY, site: dc1}
    - {name: m2, ssh: 10.77.0.2, key: KEY, site: dc2}
"""


def test_nodes_go_to_the_machine_of_their_site_and_agents_start_by_sleep(tmp_path):
    prep = prepare(experiment(tmp_path, MACHINES))
    assert {n for n, m in prep.machines.items() if m == "m1"} == {
        "dc1-s1", "dc1-l1", "dc1-l1-h1", "dc1-l1-h2", "dc1-b1"}
    assert set(prep.machines) == {n.name for n in prep.plan.nodes}
    assert prep.options.start_mode == "sleep"  # the starters' sockets stay on one machine


def test_place_by_hand_overrides_the_site(tmp_path):
    prep = prepare(experiment(tmp_path, MACHINES + "  place: {dc1-l1-h2: m2}\n"))
    assert prep.machines["dc1-l1-h2"] == "m2" and prep.machines["dc1-l1-h1"] == "m1"


@pytest.mark.parametrize(("cluster", "words"), [
    (MACHINES + "  place: {dc1-l1-h2: m9}\n",
     ["cluster.place.dc1-l1-h2", "unknown machine 'm9'"]),
    (MACHINES.replace("key: KEY, site: dc2", "key: /nonexistent/id, site: dc2"),
     ["cluster.machines[1].key", "machine m2", "no such file"]),
    (MACHINES.replace("key: KEY, site: dc2", "key: EXP, site: dc2"),
     ["cluster.machines[1].key", "machine m2", "not a private key"]),
    (MACHINES.replace("site: dc2", "site: dc7"), ["no machine for the site of dc2-"]),
    (MACHINES.replace("underlay_mtu", "x"), []),
])
def test_bad_cluster_input_names_file_key_and_machine(tmp_path, cluster, words):
    path = experiment(tmp_path, cluster.replace("EXP", str(tmp_path / "exp.yaml")))
    if not words:  # a cluster whose underlay is too small for the DCI's 1500 bytes
        path.write_text(path.read_text().replace("underlay_mtu: 1600", "underlay_mtu: 1500"))
        words = ["dc1-b1-dc2-b1", "exceeds the underlay MTU 1500"]
    with pytest.raises(SpecError) as exc:
        prepare(path)
    text = str(exc.value)
    assert str(path) in text
    for w in words:
        assert w in text, text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml", "id", "id.pub"]


def test_what_a_cluster_run_cannot_do_yet_is_refused(tmp_path):
    path = experiment(tmp_path, MACHINES)
    path.write_text(path.read_text() + "alto: {serve: true}\n")
    with pytest.raises(SpecError, match=r"alto.serve.*cluster"):
        prepare(path)


def test_frr_routing_on_a_cluster_is_refused_before_anything_exists(tmp_path):
    path = experiment(tmp_path, MACHINES)
    path.write_text(path.read_text().replace("    name: two-dc-small\n",
                                             "    name: two-dc-small\n    routing: frr\n"))
    with pytest.raises(SpecError, match=r"routing: frr does not run on a cluster lab"):
        prepare(path)


def test_times_move_by_the_offset_and_only_times():
    msg = {"type": "phase_done", "node": "h1", "phase": 0, "records": [
        {"half": "send", "t_start": 10.0, "t_sent": 10.5, "size_bytes": 7, "sport": 5},
        {"half": "recv", "t_first_byte": 11.0, "t_end": 12.0, "tcp": {"rtt_s": 0.1}}]}
    out = shift_times(msg, -2.0)
    assert out["records"][0] == {"half": "send", "t_start": 8.0, "t_sent": 8.5,
                                 "size_bytes": 7, "sport": 5}
    assert out["records"][1]["t_end"] == 10.0 and out["records"][1]["tcp"] == {"rtt_s": 0.1}
    assert out["phase"] == 0 and msg["records"][0]["t_start"] == 10.0  # a copy
    assert shift_times({"type": "error", "t": 5.0}, 1.5)["t"] == 6.5


def test_uncertainty_is_half_the_round_trip_plus_the_drift():
    before, after = Offset(0.010, 0.002, 8), Offset(0.013, 0.004, 8)
    assert uncertainty_s(before, None) == pytest.approx(0.001)
    assert uncertainty_s(before, after) == pytest.approx(0.003 + 0.002)


def test_a_topology_files_cluster_section_places_the_lab(tmp_path):
    """An experiment without cluster: takes its topology file's; a bad key there is refused
    naming the topology file, not the experiment."""
    from ruamel.yaml import YAML  # the project's YAML library (PyYAML only comes with ray)

    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    topo = YAML(typ="safe").load(TOPO)["topology"]["inline"]
    topo["cluster"] = {"underlay_mtu": 1600, "deploy": "serial", "machines": [
        {"name": "m1", "ssh": "10.77.0.1", "key": str(key), "site": "dc1"},
        {"name": "m2", "ssh": "10.77.0.2", "key": str(key), "site": "dc2"}]}
    # JSON is YAML: one key per line, sorted, so the line of a key is known
    (tmp_path / "topo.yaml").write_text(json.dumps(topo, indent=1, sort_keys=True))
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: split\ntopology: {file: topo.yaml}\nworkloads:\n"
                   "  - {kind: collective, op: all_reduce, algorithm: ring, size: 1MiB}\n")
    prep = prepare(exp)
    assert prep.spec.cluster is not None and prep.spec.cluster.deploy == "serial"
    assert prep.cluster_source == str(tmp_path / "topo.yaml")
    assert prep.machines["dc2-l1-h1"] == "m2" and prep.machines["dc1-l1-h1"] == "m1"
    assert prep.options.start_mode == "sleep"
    topo["cluster"]["machines"][1]["colour"] = "red"
    dumped = json.dumps(topo, indent=1, sort_keys=True)
    (tmp_path / "topo.yaml").write_text(dumped)
    line = 1 + next(i for i, t in enumerate(dumped.splitlines()) if '"colour"' in t)
    with pytest.raises(SpecError) as exc:
        prepare(exp)
    text = str(exc.value)
    assert f"topo.yaml:{line}: cluster.machines[1].colour" in text, text
    # the experiment's own section replaces the topology's
    exp.write_text(exp.read_text() + "cluster:\n  underlay_mtu: 1600\n" + MACHINES.replace(
        "KEY", str(key)).replace("site: dc2", "site: dc2, port: 2222"))
    prep = prepare(exp)
    assert prep.spec.cluster.machines[1].port == 2222 and prep.cluster_source == str(exp)


def test_the_drift_rate_is_the_offsets_change_over_the_drivers_time():
    from orchestration.cluster.control import drift_rate, offset_from

    # a machine 10 ms ahead at t=1000 s, 10.02 ms ahead 100 s later: 200 ppm (0.2 ms/1000 s)
    before, after = Offset(0.010, 1e-4, 8, 1000.0), Offset(0.01002, 1e-4, 8, 1100.0)
    assert drift_rate(before, after) * 1e6 == pytest.approx(0.2)
    assert drift_rate(before, None) == 0.0  # a lost machine: no second measurement
    assert drift_rate(before, Offset(0.02, 1e-4, 8)) == 0.0  # one without its time
    # offset_from keeps the time of its kept sample: the midpoint of its send and receive
    got = offset_from([(10, 20, 20, 40), (100, 111, 111, 104)])  # the 2nd: smaller delay
    assert got.t_s == pytest.approx(102e-9) and got.offset_s == pytest.approx(9e-9)


def test_a_machine_time_comes_back_by_the_interpolated_offset():
    from orchestration.cluster.control import drift_rate, to_driver_s

    # a clock running 100 ppm fast, 5 s ahead at driver time 1000 s: it reads
    # T(t) = t + 5 + 1e-4 (t - 1000); any driver time t comes back from T(t) exactly
    before, after = Offset(5.0, 1e-4, 8, 1000.0), Offset(5.0 + 1e-4 * 60, 1e-4, 8, 1060.0)
    rate = drift_rate(before, after)
    assert rate == pytest.approx(1e-4)
    for t in (1000.0, 1030.0, 1060.0, 1200.0, 990.0):  # also outside the two measurements
        machine_t = t + 5.0 + 1e-4 * (t - 1000.0)
        assert to_driver_s(machine_t, before, rate) == pytest.approx(t, abs=1e-9)
    assert to_driver_s(1035.0, before, 0.0) == 1030.0  # no drift: the offset before only


def test_run_check_leaves_a_cluster_labs_node_sysctls_to_its_machines(tmp_path, monkeypatch):
    """The machines' kernels apply a cluster lab's node sysctls (each part's Lab.up probes
    them there); the controller's kernel, which may allow other congestion controls, must
    not refuse them. A lab on this machine is still probed."""
    from typer.testing import CliRunner

    import testbed.ns.sysctl_probe as probe
    from orchestration.cli.app import app

    probed = []
    monkeypatch.setattr(probe, "namespace_problems",
                        lambda plan: probed.append(plan.name) or ["node h1: refused here"])
    res = CliRunner().invoke(app, ["run", str(experiment(tmp_path, MACHINES)), "--check"])
    assert res.exit_code == 0 and probed == [], res.output
    local = tmp_path / "local.yaml"
    local.write_text("name: local\ntopology: {generator: single_switch, params: {hosts: 2}}\n"
                     "workloads:\n  - {kind: collective, op: all_reduce, size: 1MiB}\n")
    res = CliRunner().invoke(app, ["run", str(local), "--check"])
    assert probed, res.output  # run through `app`, not the entry point that prints it:
    assert "refused here" in res.output + str(res.exception)  # the SpecError is raised
