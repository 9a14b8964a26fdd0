"""The capacity planner without root: a lab's demand (hosts' rates times shaped hops), the
verdict against a stored calibration (a lab that saturates the 2-core machine and one that
does not), the cut (by site, else a balanced min-cut), and the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import topologies
from orchestration.capacity.cut import cut
from orchestration.capacity.model import (
    HEADROOM,
    Calibration,
    demand,
    load_calibration,
    verdict,
)

ROOT = Path(__file__).resolve().parents[2]
CAL = ROOT / "tests" / "data" / "calibration_2core.json"
EXAMPLES = ROOT / "topologies" / "examples"


def small(rate: str = "100Mbit", hosts: int = 4):
    doc = {"name": "small", "generator": {"name": "single_switch",
                                          "params": {"hosts": hosts, "link": "l"}},
           "profiles": {"l": {"rate": rate, "buffer": "100p"}}}
    return topologies.resolve(topologies.parse_topology(doc, "t"), "t")


def test_demand_is_host_rates_times_shaped_hops():
    d = demand(small("100Mbit", 4))
    assert (d.nodes, d.links, d.hosts, d.agents) == (5, 4, 4, 4)
    assert d.host_rate_bps == 4 * 100e6
    assert d.htb_hops == 2.0 and d.delay_hops == 0.0  # host -> switch -> host, both shaped
    assert d.htb_bps == 800e6
    assert d.pps(12000.0) == pytest.approx(1.5)  # one 1500-byte segment + half an ACK


def test_a_small_lab_fits_and_a_256_host_fabric_does_not():
    cal = load_calibration(CAL)
    v = verdict(demand(small()), cal)
    assert v.fits_one and v.machines == 1
    # 0.8 Gbit/s of bit-hops over 9 Gbit/s a core, 0.4 Gbit/s of agents over 5 Gbit/s a core
    assert v.cores_htb == pytest.approx(max(0.8e9 / 9e9, 0.8e9 / 12000 * 1.5 / 1125e3))
    assert v.cores_agents == pytest.approx(0.4e9 / 5e9)
    big = topologies.load_topology(EXAMPLES / "leaf_spine_256.yaml")
    vb = verdict(demand(big), cal)
    assert not vb.fits_one
    assert vb.machines == math.ceil(vb.cores_needed / (HEADROOM * cal.cores))
    assert vb.machines > 10  # 256 hosts at 1 Gbit/s over ~4 shaped hops on 2 cores
    assert any("dominates" in r for r in vb.reasons)


def test_a_delayed_lab_without_delay_figures_says_so():
    two_dc = topologies.load_topology(EXAMPLES / "two_dc.yaml")
    d = demand(two_dc)
    assert d.delay_hops > 0
    v = verdict(d, load_calibration(CAL))
    assert v.cores_delay == 0 and any("no delay-line figures" in r for r in v.reasons)
    cal = Calibration("x", 2, 1, 1, 9e9, 7.5e5, 5e9, delay_bps_per_core=1e9,
                      delay_pps_per_core=1e5)
    assert verdict(d, cal).cores_delay > 0


def test_cut_by_site_puts_each_dc_on_its_own_machine():
    two_dc = topologies.load_topology(EXAMPLES / "two_dc.yaml")
    c = cut(two_dc, 2)
    assert c.by == "site"
    sites = [{n.split("-")[0] for n in part} for part in c.parts]
    assert all(len(s) == 1 for s in sites) and sites[0] != sites[1]
    assert len(c.cut_links) == 1  # the DCI


def test_min_cut_is_balanced_and_cheaper_than_slicing():
    plan = topologies.load_topology(EXAMPLES / "leaf_spine_256.yaml")
    c = cut(plan, 4)
    assert c.by == "min-cut"
    sizes = sorted(len(p) for p in c.parts)
    assert sizes[-1] - sizes[0] <= 1
    assert sorted(n for p in c.parts for n in p) == sorted(n.name for n in plan.nodes)
    # every link cut costs its rate; a min-cut beats putting every node in turn on a machine
    rates = {lk.name: max(lk.a_to_b.rate_bps or 0, lk.b_to_a.rate_bps or 0)
             for lk in plan.links}
    assert c.cut_bps == sum(rates[name] for name in c.cut_links)
    names = [n.name for n in plan.nodes]
    where = {n: i % 4 for i, n in enumerate(names)}
    round_robin = sum(r for lk in plan.links
                      if where[lk.a.node] != where[lk.b.node]
                      for r in [rates[lk.name]])
    assert c.cut_bps < round_robin / 2
    assert cut(plan, 1).cut_links == ()
    three = sorted(len(p) for p in cut(plan, 3).parts)  # unequal halves: 1/3 and 2/3 first
    assert three[-1] - three[0] <= 1


def test_bad_calibration_files_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="run `aitb calibrate`"):
        load_calibration(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**json.loads(CAL.read_text()), "speed": 1}))
    with pytest.raises(ValueError, match="unknown keys speed"):
        load_calibration(bad)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestration.cli", *args], cwd=ROOT,
                          capture_output=True, text=True)


def test_cli_plan_capacity_json(tmp_path):
    out = _cli("plan-capacity", str(EXAMPLES / "leaf_spine_256.yaml"), "--calibration",
               str(CAL), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["verdict"]["fits_one"] is False
    assert got["cut"]["machines"] == min(got["verdict"]["machines"], 276)
    assert sum(got["cut"]["nodes_per_machine"]) == 276
    topo = tmp_path / "small.yaml"
    topo.write_text("name: small\ngenerator: {name: single_switch, params: {hosts: 4, "
                    "link: l}}\nprofiles: {l: {rate: 100Mbit, buffer: 100p}}\n")
    small_out = _cli("plan-capacity", str(topo), "--calibration", str(CAL), "--machines", "2")
    assert small_out.returncode == 0, small_out.stderr
    assert "fits one machine at fidelity" in small_out.stdout
    assert "cut over 2 machines" in small_out.stdout


def test_cli_without_calibration_exits_2(tmp_path):
    out = _cli("plan-capacity", str(EXAMPLES / "incast.yaml"), "--calibration",
               str(tmp_path / "none.json"))
    assert out.returncode == 2 and "aitb calibrate" in out.stderr


def test_delay_line_cost_is_what_the_cores_exceed_htb_by():
    from orchestration.capacity.measure import delay_per_core

    # 1 Gbit/s over 2 hops: HTB at 10 Gbit/s a core accounts for 0.2 core of 0.6 busy
    bps, pps = delay_per_core(1e9, 1e5, 0.6, 10e9, 1e6)
    assert bps == pytest.approx(2e9 / 0.4) and pps == pytest.approx(1e5 / 0.4)
    assert delay_per_core(1e9, 1e5, 0.2, 10e9, 1e6) is None  # nothing left for the line


def test_capture_costs_its_links_packets_times_the_calibrated_cost_per_packet():
    plan = small("100Mbit", 4)
    points = [("s1", lk.b.ifname) if lk.b.node == "s1" else ("s1", lk.a.ifname)
              for lk in plan.links[:2]]
    d = demand(plan, captured=points)
    assert (d.captured, d.captured_bps) == (2, 2 * 2 * 100e6)  # both directions of 2 links
    base = Calibration("x", 2, 1, 1, 9e9, 7.5e5, 5e9)
    v = verdict(d, base)
    assert v.cores_capture == 0 and any("no capture figure" in r for r in v.reasons)
    cal = Calibration("x", 2, 1, 1, 9e9, 7.5e5, 5e9, capture_s_per_packet=4e-6)
    v = verdict(d, cal)
    # 400 Mbit/s of 1500-byte packets plus delayed ACKs, 4 us each
    assert v.cores_capture == pytest.approx(400e6 / 12000 * 1.5 * 4e-6)
    assert v.cores_needed == pytest.approx(verdict(demand(plan), cal).cores_needed
                                           + v.cores_capture)
    assert demand(plan).captured == 0
