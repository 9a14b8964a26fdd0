"""MFU, network wait and energy (analysis/metrics/energy.py) against a hand table, and the
profile file's and the experiment key's errors (models/energy.py)."""

from __future__ import annotations

import shutil
from ipaddress import IPv4Interface
from pathlib import Path

import pandas as pd
import pytest

from analysis.metrics.collectives import iteration_times
from analysis.metrics.energy import energy_metrics, port_kinds
from models.energy import PROFILES_FILE, load_profiles
from models.errors import SpecError
from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
from orchestration.run.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[2]

# round numbers: busy 400 W, idle 100 W, peak 1 TFLOP/s; ports: host NIC 1 W + 10 pJ/bit,
# switch port 2 W + 20 pJ/bit, DCI 5 W + 100 pJ/bit
PROFILES = """\
accelerators:
  acc: {busy_w: 400, idle_w: 100, peak_flops_per_s: 1.0e12, source: hand table}
networks:
  net:
    host_nic: {idle_w: 1, pj_per_bit: 10, source: hand table}
    switch_port: {idle_w: 2, pj_per_bit: 20, source: hand table}
    dci: {idle_w: 5, pj_per_bit: 100, source: hand table}
"""


def _plan() -> LabPlan:
    """h1 - r1 =dci= r2 - h2: 6 ports, 2 host NICs, 2 switch ports, 2 DCI ends."""
    def ep(node: str, ifname: str, n: int, k: int) -> Endpoint:
        return Endpoint(node, ifname, IPv4Interface(f"198.18.{n}.{k}/30"))
    links = (LinkPlan("h1-r1", ep("h1", "eth0", 0, 1), ep("r1", "eth0", 0, 2)),
             LinkPlan("r1-r2", ep("r1", "dci-0", 1, 1), ep("r2", "dci-0", 1, 2)),
             LinkPlan("h2-r2", ep("h2", "eth0", 2, 1), ep("r2", "eth0", 2, 2)))
    nodes = (NodePlan("h1", "host"), NodePlan("h2", "host"), NodePlan("r1", "router"),
             NodePlan("r2", "router"))
    return LabPlan("dci", nodes, links)


def _op(w: int, rank: int, kind: str, t0: float, t1: float) -> dict:
    return {"workload_index": w, "iteration": 0, "rank": rank, "kind": kind, "t_start": t0,
            "t_end": t1}


def _counters() -> pd.DataFrame:
    """1e9 bytes sent by h1 eth0, r1 dci-0 and r2 eth0 during 99.9..102.1, nothing after."""
    rows = []
    for node, ifname in (("h1", "eth0"), ("r1", "dci-0"), ("r2", "eth0"), ("h2", "eth0"),
                         ("r1", "eth0"), ("r2", "dci-0")):
        sent = 1e9 if (node, ifname) in {("h1", "eth0"), ("r1", "dci-0"), ("r2", "eth0")} \
            else 0
        for t, b in ((99.9, 0), (102.1, sent), (199.9, sent), (203.1, sent)):
            rows.append({"t_s": t, "node": node, "ifname": ifname, "tx_bytes": int(b)})
    return pd.DataFrame(rows)


def _run(tmp_path: Path, scale: float) -> dict:
    prof = tmp_path / "profiles.yaml"
    prof.write_text(PROFILES)
    timeline = pd.DataFrame([
        # training, 2 ranks: rank 0 computes 0.5 s, rank 1 1.0 s, iteration 100..102 (2 s)
        _op(0, 0, "compute", 100.0, 100.5), _op(0, 0, "all_reduce", 100.5, 102.0),
        _op(0, 1, "compute", 100.0, 101.0), _op(0, 1, "all_reduce", 101.0, 102.0),
        # FL, 3 ranks: the aggregator (rank 0) aggregates 0.5 s at the end of 200..203
        _op(1, 0, "gather", 200.0, 203.0), _op(1, 0, "compute", 202.5, 203.0)])
    rounds = pd.DataFrame([{"workload_index": 1, "round": 0, "level": "global",
                            "t_start": 200.0, "t_end": 203.0, "round_time_s": 3.0,
                            "selected_hosts": ["h2"]}])
    manifest = {"scale": scale, "energy": {"accelerator": "acc", "network": "net"},
                "workloads": [
                    {"index": 0, "name": "train", "world_size": 2, "model_flops": 2e12,
                     "flops_per_s": 1e12},
                    # rank 2 (on h1) was not selected: its training is not in this round
                    {"index": 1, "name": "fl", "world_size": 3, "hosts": {
                        "0": "h1", "1": "h2", "2": "h1"}, "train_s": [{"1": 1.0, "2": 2.0}]}]}
    iters = iteration_times(timeline, pd.DataFrame())
    return energy_metrics(iters, timeline, rounds, _counters(), _plan(), manifest, prof)


def test_ports_by_kind():
    kinds = port_kinds(_plan())
    assert kinds[("h1", "eth0")] == "host_nic" and kinds[("r1", "eth0")] == "switch_port"
    assert kinds[("r1", "dci-0")] == kinds[("r2", "dci-0")] == "dci"


def test_iteration_by_hand(tmp_path):
    e = _run(tmp_path, 1)
    it = e["iterations"][0]
    assert (it["workload_index"], it["time_s"]) == (0, 2.0)
    assert it["mfu"] == pytest.approx(2e12 / (2 * 1e12 * 2.0))             # 0.5
    assert it["network_wait_s"] == pytest.approx(2 * 2.0 - 1.5)              # 2.5 acc-s
    assert it["network_wait_share"] == pytest.approx(2.5 / 4)
    assert it["accelerator_j"] == pytest.approx(400 * 1.5 + 100 * 2.5)       # 850 J
    # 8e9 bits each through a host NIC, a switch port and a DCI end
    assert it["network_bits_j"] == pytest.approx(8e9 * (10 + 20 + 100) * 1e-12)  # 1.04 J
    assert it["network_idle_j"] == pytest.approx((2 * 1 + 2 * 2 + 2 * 5) * 2.0)  # 32 J
    assert it["energy_j"] == pytest.approx(850 + 32 + 1.04)
    w = e["workloads"][0]
    assert (w["name"], w["ranks"], w["mfu"]) == ("train", 2, pytest.approx(0.5))
    assert e["mfu_mean"] == pytest.approx(0.5)
    assert e["ports"] == {"host_nic": 2, "switch_port": 2, "dci": 2}


def test_round_counts_the_selected_clients_training(tmp_path):
    r = _run(tmp_path, 1)["rounds"][0]
    # aggregator 0.5 s + client 1's 1.0 s of training; rank 2 was not in this round
    assert r["network_wait_s"] == pytest.approx(3 * 3.0 - 1.5)               # 7.5 acc-s
    assert r["accelerator_j"] == pytest.approx(400 * 1.5 + 100 * 7.5)        # 1350 J
    assert r["network_bits_j"] == 0 and r["network_idle_j"] == pytest.approx(16 * 3.0)
    assert r["energy_j"] == pytest.approx(1350 + 48) and r["mfu"] is None


def test_scaled_run_reports_the_unscaled_job(tmp_path):
    e1, e10 = _run(tmp_path, 1)["iterations"][0], _run(tmp_path, 10)["iterations"][0]
    assert e10["network_bits_j"] == pytest.approx(10 * e1["network_bits_j"])
    assert e10["mfu"] == e1["mfu"] and e10["network_idle_j"] == e1["network_idle_j"]
    assert e10["energy_j"] == pytest.approx(850 + 32 + 10.4)


def test_default_profiles_cite_a_source_for_every_entry():
    p = load_profiles(PROFILES_FILE)
    assert {"a100_sxm", "h100_sxm"} <= set(p.accelerators)
    assert p.accelerators["h100_sxm"].busy_w == 700 and p.accelerators["a100_sxm"].busy_w == 400
    for net in p.networks.values():
        assert all(getattr(net, k).source for k in ("host_nic", "switch_port", "dci"))


def test_bad_profile_file_names_file_key_and_line(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text(PROFILES.replace("busy_w: 400, idle_w: 100,", "busy_w: -4, idle_w: 100,"))
    with pytest.raises(SpecError) as err:
        load_profiles(bad)
    (issue,) = err.value.issues
    assert issue.file == str(bad) and issue.line == 2
    assert issue.key_path == ("accelerators", "acc", "busy_w")


def test_unknown_profile_in_experiment_names_key_and_line(tmp_path):
    exp = tmp_path / "e.yaml"
    shutil.copy(ROOT / "examples" / "ring_allreduce_quick.yaml", exp)
    with exp.open("a") as fh:
        fh.write("energy: {accelerator: h200_sxm, network: default}\n")
    with pytest.raises(SpecError) as err:
        load_experiment(exp)
    (issue,) = err.value.issues
    assert issue.key_path == ("energy", "accelerator") and issue.file == str(exp)
    assert issue.line == len(exp.read_text().splitlines())
    assert "h200_sxm" in issue.message and "h100_sxm" in issue.message
    spec, _ = load_experiment(ROOT / "examples" / "ring_allreduce_quick.yaml")
    assert (spec.energy.accelerator, spec.energy.network) == ("a100_sxm", "default")
