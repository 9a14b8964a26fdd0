"""The Python API (aitb.api) and the examples in examples/python/, run as scripts."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

import aitb
import topologies
from models.errors import SpecError
from models.paths import dci_links
from models.plan import plan_to_dict

ROOT = Path(__file__).parents[2]
EX = ROOT / "examples" / "python"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}  # the scripts import this checkout


def test_topology_from_file_and_generator():
    assert len(aitb.topology(ROOT / "topologies/examples/incast.yaml").links) == 8
    plan = aitb.topology({"generator": "single_switch", "params": {"hosts": 3}})
    assert [n.name for n in plan.hosts()] == ["h1", "h2", "h3"]


def test_prepare_refuses_a_bad_key_with_its_path():
    with pytest.raises(SpecError, match="workloads.0"):
        aitb.prepare({"name": "x", "topology": {"generator": "single_switch"},
                          "workloads": [{"kind": "incast", "receiver": "h1", "sise": "1B"}]})


def test_with_value_copies_and_names_a_missing_key():
    base = {"workloads": [{"size": "1KiB"}]}
    assert aitb.with_value(base, "workloads.0.size", "2KiB")["workloads"][0]["size"] == \
        "2KiB"
    assert base["workloads"][0]["size"] == "1KiB"
    with pytest.raises(KeyError, match="nope"):
        aitb.with_value(base, "nope.size", 1)


def _fake_run(tmp_path, delay_s, cct_s, name):
    """A run directory with a plan whose DCI has ``delay_s`` and two DP all-reduces."""
    plan = topologies.load_topology(ROOT / "topologies/examples/two_dc.yaml")
    dci = dci_links(plan)
    plan = replace(plan, links=tuple(
        replace(lk, a_to_b=replace(lk.a_to_b, delay_s=delay_s),
                b_to_a=replace(lk.b_to_a, delay_s=delay_s)) if lk.name in dci else lk
        for lk in plan.links))
    d = tmp_path / name
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"run_id": name, "status": "ok"}))
    (d / "plan.json").write_text(json.dumps(plan_to_dict(plan)))
    rows = [{"collective_id": f"c{i}.0", "op": "all_reduce", "group_kind": "dp",
             "iteration": i, "cct_s": cct_s, "size_bytes": 1000,
             "algbw_Bps": 1000 / cct_s, "busbw_Bps": 1000 / cct_s, "ranks": [0, 1],
             "rank_t_start": [0.0, 0.0], "rank_t_end": [cct_s, cct_s]} for i in range(2)]
    (d / "collectives.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_run_tables_are_dataframes(tmp_path):
    run = aitb.load_run(_fake_run(tmp_path, 0.01, 0.05, "r1"))
    assert isinstance(run.table("collectives"), pd.DataFrame)
    assert list(run.table("collectives")["cct_s"]) == [0.05, 0.05]
    assert run.table("flows").empty and run.ok and run.trustworthy is None
    with pytest.raises(KeyError, match="known: flows"):
        run.table("flow")
    assert run.summary["cct_s_mean"] == pytest.approx(0.05)  # analysed on first use
    assert (run.run_dir / "metrics.json").exists()


def test_example_cct_vs_dci_delay_plots(tmp_path):
    runs = [_fake_run(tmp_path, d, c, f"r{k}") for k, (d, c) in
            enumerate([(0.005, 0.03), (0.010, 0.05), (0.020, 0.09)])]
    out = tmp_path / "cct.png"
    res = subprocess.run([sys.executable, str(EX / "cct_vs_dci_delay.py"), str(out),
                          *map(str, runs)], capture_output=True, text=True, cwd=ROOT,
                         timeout=120, check=False, env=ENV)
    assert res.returncode == 0, res.stderr
    assert "dp ['5 ms -> 30 ms', '10 ms -> 50 ms', '20 ms -> 90 ms']" in res.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_example_sweep_checks_every_point():
    res = subprocess.run([sys.executable, str(EX / "sweep_incast.py"), "--dry-run"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
                         env=ENV)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["64KiB", "ok", "256KiB", "ok"]
